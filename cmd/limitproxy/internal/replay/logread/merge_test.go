package logread_test

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
)

var t0 = time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)

// fakeReader returns records at the given offsets from t0 (in
// milliseconds), named file, and a *LineError for an offset of -1.
type fakeReader struct {
	file  string
	ms    []int
	i     int
	st    logread.Stats
	final error // returned after the records instead of io.EOF
}

func (f *fakeReader) Next() (logread.Record, error) {
	if f.i >= len(f.ms) {
		if f.final != nil {
			return logread.Record{}, f.final
		}
		return logread.Record{}, io.EOF
	}
	f.i++
	f.st.Lines++
	if f.ms[f.i-1] < 0 {
		f.st.Malformed++
		return logread.Record{}, &logread.LineError{File: f.file, Line: f.i, Msg: "bad"}
	}
	f.st.Records++
	return logread.Record{File: f.file, Line: f.i, Time: t0.Add(time.Duration(f.ms[f.i-1]) * time.Millisecond)}, nil
}

func (f *fakeReader) Stats() logread.Stats { return f.st }

// drain reads m to the end as "file:line@ms" strings, and line errors as
// "error file:line".
func drain(t *testing.T, m *logread.Merger) []string {
	t.Helper()
	var out []string
	for {
		rec, err := m.Next()
		var le *logread.LineError
		switch {
		case err == io.EOF:
			return out
		case errors.As(err, &le):
			out = append(out, fmt.Sprintf("error %s:%d", le.File, le.Line))
		case err != nil:
			t.Fatal(err)
		default:
			out = append(out, fmt.Sprintf("%s:%d@%d", rec.File, rec.Line, rec.Time.Sub(t0).Milliseconds()))
		}
	}
}

// TestMerge: step tables of inputs and what comes out.
func TestMerge(t *testing.T) {
	tests := []struct {
		name  string
		slack time.Duration
		in    map[string][]int // file a, b, c in that order
		want  string
		late  int64
	}{
		{"one file in order", 0, map[string][]int{"a": {0, 1, 1, 2}}, "a:1@0 a:2@1 a:3@1 a:4@2", 0},
		{"interleaved", 0, map[string][]int{"a": {0, 20, 40}, "b": {10, 30, 50}}, "a:1@0 b:1@10 a:2@20 b:2@30 a:3@40 b:3@50", 0},
		{"ties by input, then line", 0, map[string][]int{"a": {5, 5}, "b": {5}, "c": {0, 5}}, "c:1@0 a:1@5 a:2@5 b:1@5 c:2@5", 0},
		{"within the slack", 0, map[string][]int{"a": {1000, 0, 4000, 3000, 2000, 9000}}, "a:2@0 a:1@1000 a:5@2000 a:4@3000 a:3@4000 a:6@9000", 0},
		{"beyond the slack", time.Second, map[string][]int{"a": {0, 5000, 6000, 1000, 7000}}, "a:1@0 a:4@1000 a:2@5000 a:3@6000 a:5@7000", 0},
		{"late", time.Second, map[string][]int{"a": {0, 5000, 6000, 7000, 1000, 8000}}, "a:1@0 a:2@5000 a:5@1000 a:3@6000 a:4@7000 a:6@8000", 1},
		// a:2 is still held (nothing later was read) when a:3 comes.
		{"no slack", -1, map[string][]int{"a": {0, 10, 5, 20}, "b": {7}}, "a:1@0 b:1@7 a:3@5 a:2@10 a:4@20", 1},
		// Errors come out when read, ahead of the records held.
		{"line errors pass", 0, map[string][]int{"a": {0, -1, 10}, "b": {5, -1}}, "error a:2 error b:2 a:1@0 b:1@5 a:3@10", 0},
		{"empty inputs", 0, map[string][]int{"a": {}, "b": {3}, "c": {}}, "b:1@3", 0},
		{"nothing", 0, nil, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rs []logread.Reader
			for _, f := range []string{"a", "b", "c"} {
				if ms, ok := tt.in[f]; ok {
					rs = append(rs, &fakeReader{file: f, ms: ms})
				}
			}
			m := logread.Merge(logread.MergeOptions{Slack: tt.slack}, rs...)
			got := strings.Join(drain(t, m), " ")
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if st := m.Stats(); st.Late != tt.late || st.Records != int64(strings.Count(tt.want, "@")) {
				t.Errorf("stats %+v, want Late %d", st, tt.late)
			}
		})
	}
}

// TestMergeHoldsLittle: records come out as soon as every input has read
// past them plus the slack, not at the end.
func TestMergeHoldsLittle(t *testing.T) {
	a := &fakeReader{file: "a", ms: []int{0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000}}
	b := &fakeReader{file: "b", ms: []int{500, 1500, 2500, 3500, 4500, 5500, 6500, 7500, 8500}}
	m := logread.Merge(logread.MergeOptions{Slack: 2 * time.Second}, a, b)
	rec, err := m.Next()
	if err != nil || rec.File != "a" || rec.Line != 1 {
		t.Fatalf("%+v, %v", rec, err)
	}
	// To let 0 out, both must have read past 2 s: a to 3000, b to 2500.
	if a.i != 4 || b.i != 3 {
		t.Errorf("read a to line %d and b to line %d, want 4 and 3", a.i, b.i)
	}
	if st := m.Stats(); st.Records != 1 || st.Lines != 7 {
		t.Errorf("%+v", st)
	}
}

// TestMergeFinalError: an input's failure ends the merge.
func TestMergeFinalError(t *testing.T) {
	boom := errors.New("read x: boom")
	m := logread.Merge(logread.MergeOptions{}, &fakeReader{file: "a", ms: []int{0}, final: boom}, &fakeReader{file: "b", ms: []int{1}})
	for range 2 {
		if _, err := m.Next(); err != boom {
			t.Fatalf("err %v, want the input's", err)
		}
	}
}

// TestMergeFiles merges real files: an nginx log and limitproxy's, in
// time order.
func TestMergeFiles(t *testing.T) {
	var rs []logread.Reader
	for _, name := range []string{"testdata/combined.log", "testdata/limitproxy.json.log"} {
		f, err := logread.Open(name, logread.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		rs = append(rs, f)
	}
	m := logread.Merge(logread.MergeOptions{}, rs...)
	var times []time.Time
	for {
		rec, err := m.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, logread.ErrMalformed) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, rec.Time)
	}
	if len(times) != 20 {
		t.Fatalf("%d records, want 20", len(times))
	}
	for i := 1; i < len(times); i++ {
		if times[i].Before(times[i-1]) {
			t.Errorf("record %d at %v before %v", i, times[i], times[i-1])
		}
	}
	want := logread.Stats{Lines: 26, Records: 20, Skipped: 5, Malformed: 1}
	if st := m.Stats(); !reflect.DeepEqual(st, want) {
		t.Errorf("%+v, want %+v", st, want)
	}
}
