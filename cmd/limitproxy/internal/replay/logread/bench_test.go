package logread_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
)

// benchLines is how many distinct lines a benchmark's log holds; it is
// read again from the start when done.
const benchLines = 20000

var (
	benchPaths = []string{"/", "/login", "/api/v1/items", "/api/v1/items/8812", "/static/app.3f9a1c.js", "/static/img/logo.png",
		"/search", "/reports/2026/11", "/api/v1/orders", "/healthz", "/wp-login.php", "/api/v1/users/me/preferences"}
	benchQueries = []string{"", "", "", "?page=2", "?q=rate+limit&sort=-date", "?id=8812&expand=owner,tags", "?utm_source=newsletter&utm_medium=email"}
	benchUAs     = []string{
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
		"curl/8.5.0", "python-requests/2.32.3", "Go-http-client/1.1",
		"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
	}
	benchDecisions = []string{"allowed", "allowed", "allowed", "allowed", "rejected", "queued", "shadow_rejected", "unmatched"}
)

func benchAddr(rng *rand.Rand) string {
	if rng.IntN(5) == 0 {
		return fmt.Sprintf("2001:db8:%x:%x::%x", rng.IntN(1<<16), rng.IntN(1<<16), rng.IntN(1<<16))
	}
	return fmt.Sprintf("%d.%d.%d.%d", 1+rng.IntN(223), rng.IntN(256), rng.IntN(256), 1+rng.IntN(254))
}

// combinedLog is benchLines realistic combined lines, a few a millisecond.
func combinedLog() []byte { return combinedLogOf(1, 600) }

// combinedLogOf is benchLines combined lines from the random seed, from
// 0 to maxGapMicros apart.
func combinedLogOf(seed uint64, maxGapMicros int) []byte {
	rng := rand.New(rand.NewPCG(seed, 2))
	var b bytes.Buffer
	t := time.Date(2026, 11, 22, 18, 0, 0, 0, time.FixedZone("", 3600))
	for range benchLines {
		t = t.Add(time.Duration(rng.IntN(maxGapMicros)) * time.Microsecond)
		ref := "-"
		if rng.IntN(3) == 0 {
			ref = "https://www.example.com" + benchPaths[rng.IntN(len(benchPaths))]
		}
		fmt.Fprintf(&b, "%s - - [%s] \"%s %s%s HTTP/1.1\" %d %d \"%s\" \"%s\"\n",
			benchAddr(rng), t.Format("02/Jan/2006:15:04:05 -0700"), []string{"GET", "GET", "GET", "POST", "HEAD"}[rng.IntN(5)],
			benchPaths[rng.IntN(len(benchPaths))], benchQueries[rng.IntN(len(benchQueries))],
			[]int{200, 200, 200, 304, 404, 429, 502}[rng.IntN(7)], rng.IntN(50000), ref, benchUAs[rng.IntN(len(benchUAs))])
	}
	return b.Bytes()
}

// jsonLog is benchLines access lines as limitproxy writes them.
func jsonLog() []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	var b bytes.Buffer
	t := time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)
	for range benchLines {
		t = t.Add(time.Duration(rng.IntN(600)) * time.Microsecond)
		d := benchDecisions[rng.IntN(len(benchDecisions))]
		level, status, policy, upstream, wait := "info", 200, "api", "backend", "0"
		switch d {
		case "rejected":
			level, status, upstream = "debug", 429, ""
		case "queued":
			wait = fmt.Sprintf("%.9f", rng.Float64()/10)
		case "unmatched":
			status, policy, upstream = 404, "", ""
		}
		fmt.Fprintf(&b, `{"level":"%s","ts":"%s","logger":"access","msg":"request","method":"GET","host":"api.example.com","path":"%s","status":%d,"duration":%.9f,"policy":"%s","decision":"%s","upstream":"%s","queue_wait":%s}`+"\n",
			level, t.Format("2006-01-02T15:04:05.000Z0700"), benchPaths[rng.IntN(len(benchPaths))], status, rng.Float64()/20, policy, d, upstream, wait)
	}
	return b.Bytes()
}

// benchRead reads b.N lines of data with readers made by open, one
// record per iteration, and reports lines per second.
func benchRead(b *testing.B, data []byte, open func(io.Reader) logread.Reader) {
	benchReadSized(b, data, len(data)/benchLines, open)
}

// benchReadSized is benchRead for data whose lines are lineBytes long on
// average once read (gzipped data is shorter).
func benchReadSized(b *testing.B, data []byte, lineBytes int, open func(io.Reader) logread.Reader) {
	b.SetBytes(int64(lineBytes))
	b.ReportAllocs()
	r := open(bytes.NewReader(data))
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		_, err := r.Next()
		if err == io.EOF {
			r = open(bytes.NewReader(data))
			_, err = r.Next()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "lines/s")
}

// BenchmarkReadJSON: limitproxy's JSON access log; one op is one line.
func BenchmarkReadJSON(b *testing.B) {
	benchRead(b, jsonLog(), func(r io.Reader) logread.Reader {
		return logread.NewLimitproxyReader(r, "bench.log", logread.Options{})
	})
}

// BenchmarkReadCombined: nginx's combined format; one op is one line.
func BenchmarkReadCombined(b *testing.B) {
	benchRead(b, combinedLog(), func(r io.Reader) logread.Reader {
		nr, err := logread.NewNginxReader(r, "bench.log", logread.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return nr
	})
}

// BenchmarkReadCombinedGzip: the same, gzipped, through NewReader.
func BenchmarkReadCombinedGzip(b *testing.B) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	plain := combinedLog()
	zw.Write(plain)
	zw.Close()
	benchReadSized(b, gz.Bytes(), len(plain)/benchLines, func(r io.Reader) logread.Reader {
		lr, err := logread.NewReader(r, "bench.log.gz", logread.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return lr
	})
}

// BenchmarkMerge4: four combined logs of 1,700 lines a second each,
// merged with the default slack (which then holds some 34,000 records);
// one op is one line.
func BenchmarkMerge4(b *testing.B) {
	var data [4][]byte
	for i := range data {
		data[i] = combinedLogOf(uint64(10+i), 1200)
	}
	open := func() logread.Reader {
		var rs []logread.Reader
		for i := range data {
			nr, err := logread.NewNginxReader(bytes.NewReader(data[i]), "bench.log", logread.Options{})
			if err != nil {
				b.Fatal(err)
			}
			rs = append(rs, nr)
		}
		return logread.Merge(logread.MergeOptions{}, rs...)
	}
	b.ReportAllocs()
	r := open()
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		_, err := r.Next()
		if err == io.EOF {
			r = open()
			_, err = r.Next()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "lines/s")
}

// TestBenchLogsRead: the benchmarks' logs are read without errors (a
// benchmark of errors would measure the wrong thing).
func TestBenchLogsRead(t *testing.T) {
	for name, data := range map[string][]byte{"json": jsonLog(), "combined": combinedLog()} {
		r, err := logread.NewReader(bytes.NewReader(data), name, logread.Options{})
		if err != nil {
			t.Fatal(err)
		}
		recs, errs := readAll(t, r)
		if len(recs) != benchLines || len(errs) > 0 || strings.Count(string(data), "\n") != benchLines {
			t.Errorf("%s: %d records, errors %q", name, len(recs), errs)
		}
	}
}

// TestAllocsPerLine: reading costs one allocation per line (the line's
// string), Header and Extra included.
func TestAllocsPerLine(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 40000 lines")
	}
	for name, data := range map[string][]byte{"json": jsonLog(), "combined": combinedLog()} {
		r, err := logread.NewReader(bytes.NewReader(data), name, logread.Options{})
		if err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(benchLines/2, func() {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Errorf("%s: %v allocations per line, want 1", name, allocs)
		}
	}
}
