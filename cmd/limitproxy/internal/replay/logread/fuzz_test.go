package logread_test

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
)

// fuzzSeeds adds every line of the fixture name to f.
func fuzzSeeds(f *testing.F, name string) {
	data, err := os.ReadFile(name)
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f.Add(line)
	}
}

// checkReader reads r to the end: it must not panic, each record must be
// on a line it read, and it must end with io.EOF.
func checkReader(t *testing.T, r logread.Reader) {
	for n := 0; ; n++ {
		rec, err := r.Next()
		switch {
		case err == io.EOF:
			st := r.Stats()
			if st.Records+st.Malformed+st.Skipped != st.Lines {
				t.Fatalf("stats do not add up: %+v", st)
			}
			return
		case errors.Is(err, logread.ErrMalformed):
			var le *logread.LineError
			if !errors.As(err, &le) || le.Line < 1 || le.Msg == "" {
				t.Fatalf("line error %#v", err)
			}
		case err != nil:
			t.Fatalf("final error on a strings.Reader: %v", err)
		default:
			if rec.Line < 1 || int64(rec.Line) > r.Stats().Lines || rec.Has&logread.HasTime == 0 {
				t.Fatalf("record %+v", rec)
			}
			if !rec.Time.Equal(rec.End.Add(-rec.Duration)) {
				t.Fatalf("Time %v is not End %v - Duration %v", rec.Time, rec.End, rec.Duration)
			}
		}
		if n > 1<<20 {
			t.Fatal("no end")
		}
	}
}

// FuzzCombined: the combined reader never panics, and what it reads is
// consistent.
func FuzzCombined(f *testing.F) {
	fuzzSeeds(f, "testdata/combined.log")
	f.Add(`::ffff:1.2.3.4 - - [22/Nov/2026:18:46:44 +0000] "GET http://h:1/a%zz?x HTTP/1.1" 200 0 "\"x\x22" "\\"`)
	f.Add(`[::1]:80 - - [29/Feb/2028:23:59:60 -2359] "CONNECT h:443 HTTP/1.1" 999 18446744073709551615 "-" "-"`)
	f.Fuzz(func(t *testing.T, line string) {
		for _, o := range []logread.NginxOptions{{}, {LogFormat: lbFormat, ClientVar: "$http_x_forwarded_for"}} {
			r, err := logread.NewNginxReader(strings.NewReader(line), "fuzz.log", logread.Options{Nginx: o, MaxLineBytes: 4096})
			if err != nil {
				t.Fatal(err)
			}
			checkReader(t, r)
		}
	})
}

// FuzzLogFormat: any format either fails to compile or reads any line
// without panicking.
func FuzzLogFormat(f *testing.F) {
	f.Add(logread.Combined, `1.2.3.4 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`)
	f.Add(lbFormat, `10.0.0.2 10.0.0.2 "203.0.113.7" [2026-11-22T18:46:44+00:00] 1795373204.250 "GET /api/x?k=1 HTTP/1.1" api.example.com 200 312 0.250 "key1" "s1" 10.1.0.5:8080`)
	f.Add(`log_format j escape=json '{"t":"$msec","u":"$request_uri","a":"$remote_addr"}';`, `{"t":"1.5","u":"/\u0041","a":"1.2.3.4"}`)
	f.Add(`${msec}x$remote_addr`, `1.000x::1`)
	f.Fuzz(func(t *testing.T, format, line string) {
		r, err := logread.NewNginxReader(strings.NewReader(line), "fuzz.log", logread.Options{Nginx: logread.NginxOptions{LogFormat: format}, MaxLineBytes: 4096})
		if err != nil {
			return
		}
		checkReader(t, r)
	})
}

// FuzzLimitproxy: limitproxy's reader never panics either.
func FuzzLimitproxy(f *testing.F) {
	fuzzSeeds(f, "testdata/limitproxy.json.log")
	fuzzSeeds(f, "testdata/limitproxy.console.log")
	f.Add(`{"ts":1795445466.123456,"logger":"access","msg":"request","method":"GET","host":"h","path":"/\ud800\u00e9","status":200,"policy":"","decision":"x","o":{"a":[1,"}"]}}`)
	f.Fuzz(func(t *testing.T, line string) {
		checkReader(t, logread.NewLimitproxyReader(strings.NewReader(line), "fuzz.log", logread.Options{MaxLineBytes: 4096}))
	})
}
