package logread_test

import (
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
)

// readAll reads every record of r, and the errors of malformed lines
// (as "file:line: msg"), until io.EOF or another error, which fails t.
func readAll(t *testing.T, r logread.Reader) (recs []logread.Record, lineErrs []string) {
	t.Helper()
	for {
		rec, err := r.Next()
		var le *logread.LineError
		switch {
		case err == nil:
			recs = append(recs, rec)
		case err == io.EOF:
			return recs, lineErrs
		case errors.As(err, &le) && errors.Is(err, logread.ErrMalformed):
			lineErrs = append(lineErrs, err.Error())
		default:
			t.Fatalf("Next: %v", err)
		}
	}
}

func limitproxyReader(src string) *logread.LimitproxyReader {
	return logread.NewLimitproxyReader(strings.NewReader(src), "access.log", logread.Options{})
}

// mustTime parses an RFC 3339 time with a fraction.
func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// Lines copied from testdata/limitproxy.*.log, which TestRealServerLog
// writes from a running limitproxy.
const (
	jsonQueued   = `{"level":"info","ts":"2026-11-23T14:51:06.698Z","logger":"access","msg":"request","method":"GET","host":"127.0.0.1:37133","path":"/queue","status":200,"duration":0.200424465,"policy":"queue","decision":"queued","upstream":"up","queue_wait":0.199919418}`
	jsonEscaped  = `{"level":"info","ts":"2026-11-23T14:51:06.700Z","logger":"access","msg":"request","method":"GET","host":"127.0.0.1:37133","path":"/api/café/\"q\"\tt","status":200,"duration":0.000365494,"policy":"api","decision":"allowed","upstream":"up","queue_wait":0}`
	jsonRejected = `{"level":"debug","ts":"2026-11-23T14:51:06.496Z","logger":"access","msg":"request","method":"POST","host":"127.0.0.1:37133","path":"/login","status":429,"duration":0.000042634,"policy":"login","decision":"rejected","upstream":"","queue_wait":0}`
	jsonStarted  = `{"level":"info","ts":"2026-11-23T14:51:06.493Z","msg":"limitproxy started","listen":"127.0.0.1:37133","config":"real.toml","policies":4,"version":"test"}`
	consoleQuery = "2026-11-23T14:51:06.907Z\tINFO\taccess\trequest\t" +
		`{"method": "GET", "host": "example.com", "path": "/api/items", "status": 200, "duration": 0.000091548, "policy": "api", "decision": "allowed", "upstream": "up", "queue_wait": 0}`
	consoleStarted = "2026-11-23T14:51:06.703Z\tINFO\tlimitproxy started\t" + `{"listen": "127.0.0.1:45015", "config": "real.toml", "policies": 4, "version": "test"}`
	consoleStopped = "2026-11-23T14:51:06.910Z\tINFO\tstopped"
)

// TestLimitproxyFields: every field of real access lines, in both
// encodings; other lines are skipped.
func TestLimitproxyFields(t *testing.T) {
	src := jsonStarted + "\n" + jsonQueued + "\n\n" + jsonEscaped + "\r\n" + jsonRejected + "\n" +
		consoleStarted + "\n" + consoleQuery + "\n" + consoleStopped // no final newline
	recs, errs := readAll(t, limitproxyReader(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	end := mustTime(t, "2026-11-23T14:51:06.698Z")
	want := []logread.Record{{
		File: "access.log", Line: 2, Format: logread.Limitproxy,
		Has:  logread.HasTime | logread.HasDuration | logread.HasStatus | logread.HasOutcome,
		Time: end.Add(-200424465 * time.Nanosecond), End: end, Resolution: time.Millisecond,
		Method: "GET", Host: "127.0.0.1:37133", Path: "/queue", Status: 200, Duration: 200424465 * time.Nanosecond,
		Policy: "queue", Decision: "queued", Upstream: "up", QueueWait: 199919418 * time.Nanosecond,
	}, {
		File: "access.log", Line: 4, Format: logread.Limitproxy,
		Has:  logread.HasTime | logread.HasDuration | logread.HasStatus | logread.HasOutcome,
		Time: mustTime(t, "2026-11-23T14:51:06.699634506Z"), End: mustTime(t, "2026-11-23T14:51:06.700Z"), Resolution: time.Millisecond,
		Method: "GET", Host: "127.0.0.1:37133", Path: "/api/café/\"q\"\tt", Status: 200, Duration: 365494 * time.Nanosecond,
		Policy: "api", Decision: "allowed", Upstream: "up",
	}, {
		File: "access.log", Line: 5, Format: logread.Limitproxy,
		Has:  logread.HasTime | logread.HasDuration | logread.HasStatus | logread.HasOutcome,
		Time: mustTime(t, "2026-11-23T14:51:06.495957366Z"), End: mustTime(t, "2026-11-23T14:51:06.496Z"), Resolution: time.Millisecond,
		Method: "POST", Host: "127.0.0.1:37133", Path: "/login", Status: 429, Duration: 42634 * time.Nanosecond,
		Policy: "login", Decision: "rejected",
	}, {
		File: "access.log", Line: 7, Format: logread.Limitproxy,
		Has:  logread.HasTime | logread.HasDuration | logread.HasStatus | logread.HasOutcome,
		Time: mustTime(t, "2026-11-23T14:51:06.906908452Z"), End: mustTime(t, "2026-11-23T14:51:06.907Z"), Resolution: time.Millisecond,
		Method: "GET", Host: "example.com", Path: "/api/items", Status: 200, Duration: 91548 * time.Nanosecond,
		Policy: "api", Decision: "allowed", Upstream: "up",
	}}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i := range want {
		if !equalRecord(recs[i], want[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, recs[i], want[i])
		}
	}
}

// equalRecord compares records, times with Equal.
func equalRecord(a, b logread.Record) bool {
	if !a.Time.Equal(b.Time) || !a.End.Equal(b.End) {
		return false
	}
	a.Time, a.End, b.Time, b.End = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// TestLimitproxyFixture reads the fixtures written by a real limitproxy:
// the decisions in order, nothing malformed.
func TestLimitproxyFixture(t *testing.T) {
	want := []string{"allowed", "rejected", "allowed", "shadow_rejected", "allowed", "queued", "allowed", "rejected", "allowed", "unmatched", "invalid", "invalid"}
	for _, name := range []string{"limitproxy.json.log", "limitproxy.console.log"} {
		f, err := logread.Open(filepath.Join("testdata", name), logread.Options{})
		if err != nil {
			t.Fatal(err)
		}
		recs, errs := readAll(t, f)
		f.Close()
		var got []string
		for _, r := range recs {
			got = append(got, r.Decision)
		}
		if len(errs) > 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decisions %q, errors %q; want %q", name, got, errs, want)
		}
		if st := f.Stats(); st.Lines != 16 || st.Records != 12 || st.Skipped != 4 {
			t.Errorf("%s: %+v", name, st)
		}
	}
}

// TestLimitproxyOdd: what is not in today's log but may be (an epoch ts,
// an offset, fields of a later version), and what is not a log line.
func TestLimitproxyOdd(t *testing.T) {
	const base = `"logger":"access","msg":"request","method":"GET","host":"h","path":"/p","status":200,"policy":"","decision":"unmatched"`
	tests := []struct {
		name, line string
		check      func(t *testing.T, r logread.Record)
		err        string // substring of the *LineError's message
	}{
		{name: "offset", line: `{"ts":"2026-11-23T15:51:06.123+0100",` + base + `}`, check: func(t *testing.T, r logread.Record) {
			if !r.End.Equal(mustTime(t, "2026-11-23T14:51:06.123Z")) || r.Has&logread.HasDuration != 0 || !r.Time.Equal(r.End) {
				t.Errorf("End %v, Time %v, Has %b", r.End, r.Time, r.Has)
			}
			if _, off := r.End.Zone(); off != 3600 {
				t.Errorf("zone offset %d, want the logged 3600", off)
			}
		}},
		{name: "epoch ts", line: `{"ts":1795445466.123456,` + base + `}`, check: func(t *testing.T, r logread.Record) {
			if got := r.End.UnixMicro(); got != 1795445466123456 {
				t.Errorf("End %v (%d µs)", r.End, got)
			}
		}},
		{name: "later fields", line: `{"ts":"2026-11-23T14:51:06.000Z",` + base + `,"remote_ip":"::ffff:203.0.113.9","remote_addr":"[2001:db8::1]:4431","query":"a=1&b","error":"upstream response cut short","key_hash":"ab12","n":12,"o":{"a":[1,"}"]},"ok":true,"nil":null}`,
			check: func(t *testing.T, r logread.Record) {
				if r.Client != netip.MustParseAddr("203.0.113.9") || r.Peer != netip.MustParseAddr("2001:db8::1") || r.RawQuery != "a=1&b" || r.Error != "upstream response cut short" {
					t.Errorf("%+v", r)
				}
				want := []logread.Field{{Name: "key_hash", Value: "ab12"}, {Name: "n", Value: "12"}, {Name: "o", Value: `{"a":[1,"}"]}`}, {Name: "ok", Value: "true"}, {Name: "nil", Value: "null"}}
				if !reflect.DeepEqual(r.Extra, want) {
					t.Errorf("Extra %+v, want %+v", r.Extra, want)
				}
				if v, ok := r.ExtraValue("key_hash"); !ok || v != "ab12" {
					t.Errorf("ExtraValue = %q, %v", v, ok)
				}
			}},
		{name: "unicode escapes", line: `{"ts":"2026-11-23T14:51:06.000Z","logger":"access","msg":"request","method":"GET","host":"h","path":"/\u00e9\ud83d\ude00\ud800x\ufffd\/","status":200,"policy":"","decision":"unmatched"}`,
			check: func(t *testing.T, r logread.Record) {
				if r.Path != "/é😀\ufffdx\ufffd/" {
					t.Errorf("Path %q", r.Path)
				}
			}},
		{name: "spaces", line: ` { "ts" : "2026-11-23T14:51:06.000Z" , ` + strings.ReplaceAll(base, ",", " , ") + ` } `, check: func(t *testing.T, r logread.Record) {
			if r.Path != "/p" || r.Decision != "unmatched" {
				t.Errorf("%+v", r)
			}
		}},
		{name: "claims", line: `{"ts":"2026-11-23T14:51:06.000Z",` + base + `,"received":"2026-11-23T14:51:05.999Z","c:sub":"\"al%25ice\"","c:org.id":"42","h:X-A":"1"}`,
			check: func(t *testing.T, r logread.Record) {
				want := []logread.Field{{Name: "sub", Value: `"al%ice"`}, {Name: "org.id", Value: "42"}}
				if !reflect.DeepEqual(r.Claims, want) || len(r.Header) != 1 || len(r.Extra) != 0 {
					t.Errorf("Claims %+v, Header %+v, Extra %+v; want claims %+v", r.Claims, r.Header, r.Extra, want)
				}
			}},
		{name: "claim not JSON", line: `{"ts":"2026-11-23T14:51:06.000Z",` + base + `,"c:sub":"alice"}`, err: `c:sub: "alice" is not JSON`},
		{name: "no decision", line: `{"ts":"2026-11-23T14:51:06.000Z","logger":"access","msg":"request","method":"GET","host":"h","path":"/p","status":200,"policy":""}`, err: "access.log:1: access line without decision"},
		{name: "no ts", line: `{` + base + `}`, err: "access line without ts"},
		{name: "bad ts", line: `{"ts":"2026-13-23T14:51:06.000Z",` + base + `}`, err: `ts: "2026-13-23T14:51:06.000Z" is not a time`},
		{name: "31 February", line: `{"ts":"2026-02-31T14:51:06.000Z",` + base + `}`, err: "is not a time"},
		{name: "status string", line: `{"ts":"2026-11-23T14:51:06.000Z","logger":"access","msg":"request","method":"GET","host":"h","path":"/p","status":"200","policy":"","decision":"x"}`, err: `status: 200 is not a status`},
		{name: "duration string", line: `{"ts":"2026-11-23T14:51:06.000Z",` + base + `,"duration":"1s"}`, err: "duration: 1s is not a number of seconds"},
		{name: "method number", line: `{"ts":"2026-11-23T14:51:06.000Z","logger":"access","msg":"request","method":1,"host":"h","path":"/p","status":200,"policy":"","decision":"x"}`, err: "method: 1 is not a string"},
		{name: "truncated", line: `{"ts":"2026-11-23T14:51:06.000Z","logger":"access","msg":"requ`, err: "malformed value of \"msg\""},
		{name: "garbage after", line: `{"ts":"2026-11-23T14:51:06.000Z",` + base + `} x`, err: "column 155: text after the object"},
		{name: "not json", line: `panic: runtime error: index out of range`, err: "neither a JSON object nor a console-encoded log line"},
		{name: "console, bad field", line: "2026-11-23T14:51:06.907Z\tINFO\taccess\trequest\t{\"method\": \"GET\" \"host\": \"h\"}", err: "access.log:1: column 63: expected ',' or '}'"},
		{name: "console without fields", line: "2026-11-23T14:51:06.907Z\tINFO\taccess\trequest", err: "console access line without its fields"},
		{name: "bad address", line: `{"ts":"2026-11-23T14:51:06.000Z",` + base + `,"remote_ip":"unix:"}`, err: `remote_ip: unix: is not an address`},
		{name: "other logger, bad fields", line: `{"level":"warn","ts":"x","logger":"upstream","msg":"upstream error","status":"x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := limitproxyReader(tt.line + "\n" + jsonRejected + "\n")
			rec, err := r.Next()
			switch {
			case tt.err != "":
				if err == nil || !errors.Is(err, logread.ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one with %q", err, tt.err)
				}
				if !strings.HasPrefix(err.Error(), "access.log:1: ") {
					t.Errorf("err %q does not name the line", err)
				}
				rec, err = r.Next() // goes on with the next line
				if err != nil || rec.Line != 2 || rec.Decision != "rejected" {
					t.Fatalf("after the error: %+v, %v", rec, err)
				}
			case tt.check == nil: // skipped
				if err != nil || rec.Line != 2 {
					t.Fatalf("%+v, %v; want line 1 skipped", rec, err)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, rec)
			}
		})
	}
}

// TestLongLines: lines longer than bufio's buffer (and bufio.Scanner's
// 64 KiB) are read; lines longer than MaxLineBytes are errors that do not
// stop the reader.
func TestLongLines(t *testing.T) {
	long := strings.Repeat("a", 200<<10)
	line := `{"ts":"2026-11-23T14:51:06.000Z","logger":"access","msg":"request","method":"GET","host":"h","path":"/` + long + `","status":200,"policy":"","decision":"unmatched"}`
	r := logread.NewLimitproxyReader(strings.NewReader(line+"\n"+line+"x\n"+jsonRejected), "big.log", logread.Options{MaxLineBytes: len(line)})
	rec, err := r.Next()
	if err != nil || rec.Path != "/"+long {
		t.Fatalf("long line: %v (path of %d bytes)", err, len(rec.Path))
	}
	_, err = r.Next()
	if err == nil || err.Error() != "big.log:2: line longer than "+strconv.Itoa(len(line))+" bytes" {
		t.Fatalf("over the limit: %v", err)
	}
	if rec, err = r.Next(); err != nil || rec.Line != 3 || rec.Decision != "rejected" {
		t.Fatalf("after: %+v, %v", rec, err)
	}
	if _, err = r.Next(); err != io.EOF {
		t.Fatal(err)
	}
	if st := r.Stats(); st != (logread.Stats{Lines: 3, Records: 2, Malformed: 1}) {
		t.Errorf("%+v", st)
	}
}

// failingReader fails after its data.
type failingReader struct {
	data string
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.data == "" {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// TestReadErrorIsFinal: a failed read is not a LineError, names the file,
// and every later call returns it.
func TestReadErrorIsFinal(t *testing.T) {
	boom := errors.New("boom")
	r := logread.NewLimitproxyReader(&failingReader{data: jsonRejected + "\n", err: boom}, "x.log", logread.Options{})
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := r.Next()
		if !errors.Is(err, boom) || errors.Is(err, logread.ErrMalformed) || err.Error() != "read x.log: boom" {
			t.Fatalf("err %v", err)
		}
	}
}
