package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// TestOverrides holds the memory override store to the conformance
// suite: each subtest has a file of its own, and a restart is a new
// store loading it.
func TestOverrides(t *testing.T) {
	limitertest.RunOverrides(t, func(t *testing.T) func() perkey.Overrides {
		path := filepath.Join(t.TempDir(), "overrides.jsonl")
		return func() perkey.Overrides {
			s, err := memstore.NewOverrides(memstore.OverrideOptions{Path: path, MaxOverrides: limitertest.OverridesBound})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

// openOverrides opens a store on path, failing the test on an error.
func openOverrides(t testing.TB, path string) *memstore.Overrides {
	t.Helper()
	s, err := memstore.NewOverrides(memstore.OverrideOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustSet(t testing.TB, s perkey.Overrides, o perkey.Override) {
	t.Helper()
	if err := s.Set(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

var partner = perkey.Override{Policy: "api", Key: "partner-7", Scale: 10, Note: "gold <tier> & co", SetAt: t0}

var fixed = perkey.Override{Policy: "api", Key: "203.0.113.9", SetAt: t0.Add(1500 * time.Millisecond), Limits: []perkey.LimitSpec{
	{Algorithm: limiter.TokenBucket, Rate: limiter.Rate{N: 500, Per: time.Second}, Burst: 1000},
	{Algorithm: limiter.SlidingWindow, Limit: 100, Window: time.Minute, Slots: 6, Cost: 2},
}}

// fileHead is the header and lines of the file holding partner and fixed.
const fileHead = `{"format":"limitproxy overrides","version":2,"count":2}
{"policy":"api","key":"203.0.113.9","limits":[{"algorithm":"token_bucket","rate":"500/1s","burst":1000},{"algorithm":"sliding_window","limit":100,"window":"1m0s","slots":6,"cost":2}],"set_at":"2026-11-21T12:00:01.5Z"}
{"policy":"api","key":"partner-7","scale":10,"note":"gold <tier> & co","set_at":"2026-11-21T12:00:00Z"}
`

// TestOverridesFile: the file is the documented JSON lines, mode 0600:
// a snapshot, written by the first change, then a journal record per
// change; a new store reads it back; nothing else is left in its
// directory.
func TestOverridesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "overrides.jsonl")
	s := openOverrides(t, path)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("opening a store created the file: %v", err)
	}
	lines := strings.SplitAfter(fileHead, "\n")
	fixedLine, partnerLine := strings.TrimSuffix(lines[1], "\n"), lines[2]
	mustSet(t, s, partner)
	mustSet(t, s, fixed)
	want := `{"format":"limitproxy overrides","version":2,"count":1}` + "\n" + partnerLine + `{"set":` + fixedLine + "}\n"
	if b, err := os.ReadFile(path); err != nil || string(b) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", b, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("file mode %v, want 0600", m)
	}
	if ok, err := s.Remove(context.Background(), "api", "partner-7"); !ok || err != nil {
		t.Fatalf("Remove = %v, %v", ok, err)
	}
	if ok, err := s.Remove(context.Background(), "api", "partner-7"); ok || err != nil {
		t.Fatalf("second Remove = %v, %v", ok, err)
	}
	want += `{"remove":{"policy":"api","key":"partner-7"}}` + "\n"
	if b, _ := os.ReadFile(path); string(b) != want {
		t.Fatalf("file after Remove:\n%s\nwant:\n%s", b, want)
	}
	s2 := openOverrides(t, path)
	if _, ok := s2.Get("api", "partner-7"); ok || s2.Len() != 1 {
		t.Fatalf("read back: %d overrides, partner-7 %v; want fixed alone", s2.Len(), ok)
	}
	if o, ok := s2.Get(fixed.Policy, fixed.Key); !ok || len(o.Limits) != 2 {
		t.Fatalf("read back: fixed %+v, %v", o, ok)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d files, want the file alone", len(entries))
	}
}

// TestOverridesJournal: changes append to the journal until it holds as
// many records as there are overrides (at least 64); the next change
// compacts the file to the snapshot alone. A store reads back every
// state, and a file of version 1 is read, then compacted by the first
// change.
func TestOverridesJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "overrides.jsonl")
	writeOverrides(t, path, 100) // version 1
	s := openOverrides(t, path)
	lines := func() int {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), "\n")
	}
	o := perkey.Override{Policy: "api", Key: "k7", SetAt: t0}
	for i := range 250 {
		o.Scale = float64(i + 1)
		mustSet(t, s, o)
		// A compaction at the first change (version 1), then at the
		// 101st record.
		want := 1 + 100 + (i % 101)
		if n := lines(); n != want {
			t.Fatalf("change %d: %d lines, want %d", i, n, want)
		}
		if i%37 == 0 {
			if got, ok := openOverrides(t, path).Get("api", "k7"); !ok || got.Scale != o.Scale {
				t.Fatalf("change %d read back: %+v, %v", i, got, ok)
			}
		}
	}
	if b, _ := os.ReadFile(path); !strings.HasPrefix(string(b), `{"format":"limitproxy overrides","version":2,"count":100}`) {
		t.Fatalf("header %.80q", b)
	}
}

// TestOverridesTornJournal: a last journal line that a crash cut short
// (no newline, or half a record) is dropped and cut off the file, so that
// the next change is a line of its own; an unreadable record before the
// last is an error naming its line.
func TestOverridesTornJournal(t *testing.T) {
	lines := strings.SplitAfter(fileHead, "\n")
	set := `{"set":{"policy":"api","key":"new","scale":3}}` + "\n"
	for _, c := range []struct {
		name, tail string
		want       int // overrides read
	}{
		{"half a record", set + `{"set":{"policy":"api","key":"torn","sc`, 3},
		{"a record without its newline", set + `{"remove":{"policy":"api","key":"partner-7"}}`, 2},
		{"half a removal", `{"remove":{"policy":"api","ke`, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "overrides.jsonl")
			if err := os.WriteFile(path, []byte(fileHead+c.tail), 0o600); err != nil {
				t.Fatal(err)
			}
			s := openOverrides(t, path)
			if s.Len() != c.want {
				t.Fatalf("%d overrides read, want %d", s.Len(), c.want)
			}
			mustSet(t, s, perkey.Override{Policy: "api", Key: "after", Scale: 2})
			s2 := openOverrides(t, path)
			if _, ok := s2.Get("api", "after"); !ok || s2.Len() != c.want+1 {
				t.Fatalf("after a change: %d overrides, \"after\" %v; want %d", s2.Len(), ok, c.want+1)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "overrides.jsonl")
	os.WriteFile(path, []byte(lines[0]+lines[1]+lines[2]+`{"set":{"policy":"api","key":"torn","sc`+"\n"+set), 0o600)
	if _, err := memstore.NewOverrides(memstore.OverrideOptions{Path: path}); err == nil || !strings.Contains(err.Error(), path+":4: journal record") {
		t.Fatalf("an unreadable record before the last: %v", err)
	}
}

// TestOverridesLoad: a store loads a file it wrote, one written by hand
// (spacing, blank lines, keys in another order), and one reached through
// a symbolic link, which stays a link.
func TestOverridesLoad(t *testing.T) {
	dir := t.TempDir()
	check := func(s *memstore.Overrides, o perkey.Override) {
		t.Helper()
		got, ok := s.Get(o.Policy, o.Key)
		g, _ := got.MarshalJSON()
		w, _ := o.MarshalJSON()
		if !ok || string(g) != string(w) {
			t.Fatalf("Get(%s, %s) = %s, %v; want %s", o.Policy, o.Key, g, ok, w)
		}
	}
	hand := filepath.Join(dir, "hand.jsonl")
	text := "{ \"version\": 1, \"format\": \"limitproxy overrides\", \"count\": 2 }\n\n" +
		`{"key":"partner-7", "policy":"api", "set_at":"2026-11-21T13:00:00+01:00", "scale":10, "note":"gold <tier> & co"}` + "\n" +
		"  \n" + strings.SplitAfter(fileHead, "\n")[1] + "\n"
	if err := os.WriteFile(hand, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openOverrides(t, hand)
	check(s, partner)
	check(s, fixed)
	if s.Len() != 2 {
		t.Fatalf("Len = %d", s.Len())
	}
	// The next write puts the file in its one form.
	mustSet(t, s, partner)
	if b, _ := os.ReadFile(hand); string(b) != fileHead {
		t.Fatalf("hand-written file rewritten as:\n%s", b)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink("hand.jsonl", link); err != nil {
		t.Fatal(err)
	}
	s = openOverrides(t, link)
	check(s, fixed)
	if ok, err := s.Remove(context.Background(), "api", "partner-7"); !ok || err != nil {
		t.Fatalf("Remove = %v, %v", ok, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v, %v", fi.Mode(), err)
	}
	if s2 := openOverrides(t, hand); s2.Len() != 1 || s.Path() != hand {
		t.Fatalf("through the link: the target holds %d overrides, Path %q", s2.Len(), s.Path())
	}
}

// TestOverridesCorrupt: a file that cannot be trusted is an error naming
// the file, the line and the problem, never a store with some overrides
// missing.
func TestOverridesCorrupt(t *testing.T) {
	head := func(count int) string {
		return `{"format":"limitproxy overrides","version":1,"count":` + strconv.Itoa(count) + "}\n"
	}
	lines := strings.SplitAfter(fileHead, "\n")
	good, good2 := lines[1], lines[2]
	for _, c := range []struct {
		name, text, want string
	}{
		{"empty", "", "empty, not even a header"},
		{"not JSON", "hello\n", `:1: not a header`},
		{"another format", `{"format":"something else","version":1,"count":0}` + "\n", ":1: not a header"},
		{"unknown header key", `{"format":"limitproxy overrides","version":1,"count":0,"x":1}` + "\n", ":1: not a header"},
		{"future version", `{"format":"limitproxy overrides","version":3,"count":0}` + "\n", ":1: format version 3 is newer than this limitproxy reads (2)"},
		{"version 0", `{"format":"limitproxy overrides","version":0,"count":0}` + "\n", ":1: format version 0 is not one"},
		{"negative count", head(-1), ":1: count -1 is negative"},
		{"above the bound", head(memstore.DefaultMaxOverrides + 1), ":1: 100001 overrides, above the bound of 100000"},
		{"truncated", head(2) + good, "the header's count is 2, but 1 overrides follow (truncated?)"},
		{"cut mid-line", head(2) + good + good2[:40], ":3: override: unexpected EOF"},
		{"extra line in version 1", head(1) + good + good2, ":3: more overrides than the header's count 1"},
		{"journal record not one", strings.Replace(head(1), `"version":1`, `"version":2`, 1) + good + good2 + good2, ":3: journal record: json: unknown field"},
		{"duplicate", head(2) + good + good, `:3: policy "api" key "203.0.113.9" again (first at line 2)`},
		{"unknown key", head(1) + `{"policy":"p","key":"k","scale":2,"colour":"red"}` + "\n", `:2: override: json: unknown field "colour"`},
		{"unknown algorithm", head(1) + `{"policy":"p","key":"k","limits":[{"algorithm":"magic"}]}` + "\n", `:2: override: limits[0].algorithm: unknown algorithm "magic"`},
		{"bad rate", head(1) + `{"policy":"p","key":"k","limits":[{"algorithm":"token_bucket","rate":"5 per second"}]}` + "\n", `:2: override: limits[0].rate: "5 per second" is not N/period`},
		{"bad duration", head(1) + `{"policy":"p","key":"k","limits":[{"algorithm":"fixed_window","window":"60"}]}` + "\n", `:2: override: limits[0].window: time: missing unit`},
		{"bad time", head(1) + `{"policy":"p","key":"k","scale":2,"set_at":"yesterday"}` + "\n", `:2: override: set_at:`},
		{"invalid override", head(1) + `{"policy":"p","key":"k","scale":2,"limits":[{"algorithm":"fixed_window"}]}` + "\n", ":2: invalid override: sets both limits and scale"},
		{"negative", head(1) + `{"policy":"p","key":"k","limits":[{"algorithm":"fixed_window","limit":-1}]}` + "\n", ":2: invalid override: limits[0].limit: must not be negative"},
		{"long line", head(1) + `{"policy":"p","key":"` + strings.Repeat("k", 70_000) + `"}` + "\n", ":2: line longer than 65536 bytes"},
		{"array", head(1) + `[1,2]` + "\n", ":2: override: json: cannot unmarshal array"},
		{"two objects", head(1) + `{"policy":"p","key":"k","scale":2}{}` + "\n", ":2: override: data after the object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "overrides.jsonl")
			if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := memstore.NewOverrides(memstore.OverrideOptions{Path: path})
			if err == nil {
				t.Fatalf("NewOverrides = %d overrides, nil; want an error", s.Len())
			}
			if !strings.HasPrefix(err.Error(), "overrides file "+path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q; want it to name %s and say %q", err, path, c.want)
			}
		})
	}
}

// TestOverridesBoundAtLoad: a file holding more overrides than the bound
// (lowered since it was written) is refused, not cut.
func TestOverridesBoundAtLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "overrides.jsonl")
	if err := os.WriteFile(path, []byte(fileHead), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := memstore.NewOverrides(memstore.OverrideOptions{Path: path, MaxOverrides: 1})
	if err == nil || !strings.Contains(err.Error(), "2 overrides, above the bound of 1") {
		t.Fatalf("NewOverrides with bound 1 = %v", err)
	}
	if s, err := memstore.NewOverrides(memstore.OverrideOptions{Path: path, MaxOverrides: 2}); err != nil || s.Len() != 2 {
		t.Fatalf("with bound 2: %v", err)
	}
}

// TestOverridesUnreadable: a file that cannot be read, and a directory
// that cannot take the file, are errors naming the file.
func TestOverridesUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "overrides.jsonl")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := memstore.NewOverrides(memstore.OverrideOptions{Path: path}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a directory in the file's place: %v", err)
	}
	missing := filepath.Join(dir, "nowhere", "overrides.jsonl")
	_, err := memstore.NewOverrides(memstore.OverrideOptions{Path: missing})
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "cannot write beside it") {
		t.Fatalf("a missing directory: %v", err)
	}
}

// TestOverridesCrashLeftovers: a partly written temporary file left by a
// crash beside the file is never read; the store loads the file, and
// writes it again, as if the leftover were not there.
func TestOverridesCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "overrides.jsonl")
	if err := os.WriteFile(path, []byte(fileHead), 0o600); err != nil {
		t.Fatal(err)
	}
	leftover := path + ".tmp123456"
	partial := `{"format":"limitproxy overrides","version":1,"count":3}` + "\n" + `{"policy":"api","key":"half`
	if err := os.WriteFile(leftover, []byte(partial), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openOverrides(t, path)
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want the file's 2", s.Len())
	}
	if _, ok := s.Get("api", "half"); ok {
		t.Fatal("an override of the leftover was loaded")
	}
	mustSet(t, s, perkey.Override{Policy: "api", Key: "new", Scale: 2})
	if s2 := openOverrides(t, path); s2.Len() != 3 {
		t.Fatalf("after a write beside the leftover: %d overrides, want 3", s2.Len())
	}
	if b, err := os.ReadFile(leftover); err != nil || string(b) != partial {
		t.Fatalf("the leftover was touched: %q, %v", b, err)
	}
}

// TestOverridesWriteFails: when the file cannot be written, Set and
// Remove fail, naming the file, and the change is not applied: Get never
// answers what the file does not hold.
func TestOverridesWriteFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "overrides.jsonl")
	s := openOverrides(t, path)
	mustSet(t, s, partner)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err := s.Set(context.Background(), fixed)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Set with the directory gone = %v", err)
	}
	if _, ok := s.Get(fixed.Policy, fixed.Key); ok {
		t.Fatal("an override that was not saved is applied")
	}
	if ok, err := s.Remove(context.Background(), partner.Policy, partner.Key); ok || err == nil {
		t.Fatalf("Remove with the directory gone = %v, %v", ok, err)
	}
	if _, ok := s.Get(partner.Policy, partner.Key); !ok {
		t.Fatal("a removal that was not saved is applied")
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d, want 1", s.Len())
	}
}

// TestOverridesMemoryOnly: without a path the store works in memory and
// writes nothing.
func TestOverridesMemoryOnly(t *testing.T) {
	s, err := memstore.NewOverrides(memstore.OverrideOptions{MaxOverrides: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, partner)
	if err := s.Set(context.Background(), fixed); !errors.Is(err, perkey.ErrTooManyOverrides) {
		t.Fatalf("Set past the bound = %v", err)
	}
	if o, ok := s.Get(partner.Policy, partner.Key); !ok || o.Scale != 10 || s.Path() != "" {
		t.Fatalf("Get = %+v, %v", o, ok)
	}
}

// writeOverrides writes a file of n scale overrides under policy "api",
// keys "k0" to "k<n-1>".
func writeOverrides(t testing.TB, path string, n int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `{"format":"limitproxy overrides","version":1,"count":%d}`+"\n", n)
	for i := range n {
		fmt.Fprintf(&b, `{"policy":"api","key":"k%d","scale":2,"set_at":"2026-11-21T12:00:00Z"}`+"\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkOverridesGet: Get with no override at all, and with 10,000
// (found, and missing), from parallel goroutines.
func BenchmarkOverridesGet(b *testing.B) {
	for _, n := range []int{0, 10_000} {
		path := filepath.Join(b.TempDir(), "overrides.jsonl")
		writeOverrides(b, path, n)
		s := openOverrides(b, path)
		for _, c := range []struct{ name, key string }{{"found", "k1234"}, {"missing", "203.0.113.9"}} {
			if n == 0 && c.name == "found" {
				continue
			}
			b.Run(fmt.Sprintf("n=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						s.Get("api", c.key)
					}
				})
			})
		}
	}
}

// BenchmarkOverridesSet: the cost of a change with 10 and with 100,000
// overrides: a journal record appended and synced (and, every
// max(64, n) changes, a compaction of the file).
func BenchmarkOverridesSet(b *testing.B) {
	for _, n := range []int{10, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "overrides.jsonl")
			writeOverrides(b, path, n)
			s := openOverrides(b, path)
			ctx := context.Background()
			o := perkey.Override{Policy: "api", Key: "k7", SetAt: t0}
			o.Scale = 3
			if err := s.Set(ctx, o); err != nil { // the compaction of version 1
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				o.Scale = float64(i%10 + 1)
				if err := s.Set(ctx, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestReadOverrides: ReadOverrides reads what a store opened on the file
// holds, journal applied, without writing to it: a torn last line stays
// in the file (a running proxy may be about to cut it off itself). A
// missing file is an error, not an empty list.
func TestReadOverrides(t *testing.T) {
	set := `{"set":{"policy":"api","key":"new","scale":3}}` + "\n"
	for _, tail := range []string{"", set, set + `{"set":{"policy":"api","key":"torn","sc`, set + `{"remove":{"policy":"api","key":"partner-7"}}`} {
		dir := t.TempDir()
		path := filepath.Join(dir, "overrides.jsonl")
		if err := os.WriteFile(path, []byte(fileHead+tail), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := memstore.ReadOverrides(path)
		if err != nil {
			t.Fatalf("tail %q: %v", tail, err)
		}
		if b, _ := os.ReadFile(path); string(b) != fileHead+tail {
			t.Fatalf("tail %q: the file was changed to %q", tail, b)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("tail %q: %d files in the directory, want the file alone", tail, len(entries))
		}
		s := openOverrides(t, path)
		want, _ := s.List(context.Background(), "", 1000)
		if len(got) != len(want) {
			t.Fatalf("tail %q: read %d overrides, a store holds %d", tail, len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("tail %q: override %d: read %+v, a store holds %+v", tail, i, got[i], want[i])
			}
		}
	}
	if _, err := memstore.ReadOverrides(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v, want fs.ErrNotExist", err)
	}
}
