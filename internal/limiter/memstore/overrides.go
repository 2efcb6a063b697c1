package memstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/limitproxy/limitproxy/internal/limiter"
)

// Interface guard.
var _ limiter.Overrides = (*Overrides)(nil)

// DefaultMaxOverrides is the bound on overrides used when
// OverrideOptions.MaxOverrides is 0. An override costs a few hundred
// bytes in memory and about as much in the file, which every change
// rewrites: at the bound, about 20 MB.
const DefaultMaxOverrides = 100_000

// OverridesFormat is the version of the overrides file this package
// writes, and the newest it reads.
const OverridesFormat = 1

// overridesMagic is the header's "format".
const overridesMagic = "limitproxy overrides"

// maxOverrideLine bounds a line of the file. The largest valid override,
// every string escaped as \u sequences, is under 16 KiB.
const maxOverrideLine = 64 << 10

// OverrideOptions configures Overrides. The zero value keeps overrides in
// memory only, bounded by DefaultMaxOverrides.
type OverrideOptions struct {
	// Path is the file the overrides are kept in; "" keeps them in memory
	// only (lost at exit: for tests, or an operator who chose so). Its
	// directory must exist and be writable.
	Path string
	// MaxOverrides bounds the overrides held; 0 means
	// DefaultMaxOverrides. A Set of a new key at the bound fails with
	// limiter.ErrTooManyOverrides.
	MaxOverrides int
}

// Overrides is the in-memory override store (limiter.Overrides), for one
// instance, persisted to a file. Create it with NewOverrides; it is safe
// for concurrent use, and needs no goroutine.
//
// The overrides are in maps sharded by a hash of the client key, each
// immutable once published: Get loads its shard's map with one atomic
// load and takes no lock, and a change publishes a copy of its shard's
// map (1/64 of the overrides), which suits a store read by every request
// and changed by an operator. Set and Remove are serialized by one mutex:
// each writes the whole file anew with the change (a temporary file in the
// same directory, fsync, rename over the file, fsync of the directory),
// and only then applies the change, so that what Get answers has always
// been saved, and a crash leaves the old file or the new one, never a
// mix. A change therefore costs a write of every override (about 200
// bytes each) and two fsyncs: 5 to 20 ms with 10,000 overrides on this
// project's test machine (BenchmarkOverridesSet), which the admin API's
// rate of changes affords.
//
// # File
//
// The file is UTF-8 JSON lines, mode 0600, sorted by policy then key: a
// header, then one override per line in limiter.Override's JSON form:
//
//	{"format":"limitproxy overrides","version":1,"count":2}
//	{"policy":"api","key":"203.0.113.9","limits":[{"algorithm":"token_bucket","rate":"500/1s","burst":1000}],"set_at":"2030-01-01T00:00:00Z"}
//	{"policy":"api","key":"partner-7","scale":10,"note":"gold tier","set_at":"2030-01-01T00:00:00Z"}
//
// count must match the lines that follow (so a truncated copy is caught:
// an operator who edits the file by hand, with the proxy stopped, updates
// it). NewOverrides refuses a file it cannot trust, naming the file, the
// line and the problem: a header of another format or of a later version
// than OverridesFormat, a line that is not an override or that
// Override.Validate refuses, a key twice, a count that does not match, or
// more overrides than MaxOverrides. A missing file is an empty store.
// Temporary files left by a crash (the file's name + ".tmp" + digits) are
// never read.
type Overrides struct {
	path     string // "" for memory only
	max      int
	seed     maphash.Seed
	shards   []ovShard
	n        atomic.Int64 // overrides held: 0 lets Get skip the lookup
	mu       sync.Mutex   // serializes Set and Remove, and the file
	dir      string
	tmpNames string // CreateTemp's pattern
}

// ovShards is how many shards Overrides has.
const ovShards = 64

// ovShard holds a map that is never modified once stored: a change
// stores a modified copy. Only writers (holding Overrides.mu) store.
type ovShard struct {
	m atomic.Pointer[map[ovKey]*ovRec]
	_ [56]byte // keep shards on separate cache lines
}

// recs returns the shard's current map.
func (sh *ovShard) recs() map[ovKey]*ovRec { return *sh.m.Load() }

// put stores a copy of the shard's map with k set to r, or deleted for
// nil. Requires Overrides.mu held.
func (sh *ovShard) put(k ovKey, r *ovRec) {
	m := maps.Clone(sh.recs())
	if r == nil {
		delete(m, k)
	} else {
		m[k] = r
	}
	sh.m.Store(&m)
}

type ovKey struct{ policy, key string }

// ovRec is an override and its line in the file (without the newline).
type ovRec struct {
	o    limiter.Override
	line []byte
}

// NewOverrides returns an override store holding the overrides of
// o.Path, if it exists. Its errors name the file and what is wrong with
// it (see Overrides): the caller should refuse to start rather than run
// without overrides the operator set.
func NewOverrides(o OverrideOptions) (*Overrides, error) {
	if o.MaxOverrides <= 0 {
		o.MaxOverrides = DefaultMaxOverrides
	}
	s := &Overrides{max: o.MaxOverrides, seed: maphash.MakeSeed(), shards: make([]ovShard, ovShards)}
	for i := range s.shards {
		s.shards[i].m.Store(&map[ovKey]*ovRec{})
	}
	if o.Path == "" {
		return s, nil
	}
	path := o.Path
	// Through a symbolic link, the file written is the link's target: the
	// link stays.
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	s.path, s.dir = path, filepath.Dir(path)
	s.tmpNames = filepath.Base(path) + ".tmp*"
	recs, err := readOverrides(path, s.max)
	if err != nil {
		return nil, err
	}
	loaded := make([]map[ovKey]*ovRec, len(s.shards))
	for i := range loaded {
		loaded[i] = map[ovKey]*ovRec{}
	}
	for _, r := range recs {
		loaded[maphash.String(s.seed, r.o.Key)%uint64(len(s.shards))][ovKey{r.o.Policy, r.o.Key}] = r
	}
	for i := range loaded {
		s.shards[i].m.Store(&loaded[i])
	}
	s.n.Store(int64(len(recs)))
	// Find out now, not at the first Set, if the directory takes the
	// temporary files.
	f, err := os.CreateTemp(s.dir, s.tmpNames)
	if err != nil {
		return nil, fmt.Errorf("overrides file %s: cannot write beside it: %w", path, err)
	}
	f.Close()
	os.Remove(f.Name())
	return s, nil
}

func (s *Overrides) shard(key string) *ovShard {
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// Set implements limiter.Overrides. Beyond ErrInvalidOverride and
// ErrTooManyOverrides, its errors are the file's (the change is then not
// applied); ctx is not used: the file is written to the end. If only the
// directory's fsync fails, after the file was replaced, the change is
// applied (the file has it) and the error says so.
func (s *Overrides) Set(_ context.Context, o limiter.Override) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o = o.Clone()
	o.SetAt = o.SetAt.UTC()
	line, err := encodeOverride(o)
	if err != nil {
		return err
	}
	k := ovKey{o.Policy, o.Key}
	r := &ovRec{o: o, line: line}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shard(o.Key)
	_, replace := sh.recs()[k]
	if !replace && s.n.Load() >= int64(s.max) {
		return fmt.Errorf("%w: the store holds %d, its bound", limiter.ErrTooManyOverrides, s.max)
	}
	saved, err := s.saveLocked(k, r)
	if !saved {
		return err
	}
	sh.put(k, r)
	if !replace {
		s.n.Add(1)
	}
	return err
}

// Get implements limiter.Overrides.
func (s *Overrides) Get(policy, key string) (limiter.Override, bool) {
	if s.n.Load() == 0 {
		return limiter.Override{}, false
	}
	r := s.shard(key).recs()[ovKey{policy, key}]
	if r == nil {
		return limiter.Override{}, false
	}
	return r.o, true // r is never modified: a change replaces it
}

// Remove implements limiter.Overrides. Its errors are the file's, as
// Set's.
func (s *Overrides) Remove(_ context.Context, policy, key string) (bool, error) {
	k := ovKey{policy, key}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shard(key)
	if sh.recs()[k] == nil {
		return false, nil
	}
	saved, err := s.saveLocked(k, nil)
	if !saved {
		return false, err
	}
	sh.put(k, nil)
	s.n.Add(-1)
	return true, err
}

// List implements limiter.Overrides. It never returns an error.
func (s *Overrides) List(_ context.Context, policy string, max int) ([]limiter.Override, error) {
	if max < 1 {
		return nil, nil
	}
	var out []limiter.Override
	for i := range s.shards {
		for k, r := range s.shards[i].recs() {
			if policy == "" || k.policy == policy {
				out = append(out, r.o)
			}
		}
	}
	limiter.SortOverrides(out)
	out = out[:min(len(out), max)]
	for i := range out {
		out[i] = out[i].Clone()
	}
	return out, nil
}

// Len returns the number of overrides held.
func (s *Overrides) Len() int { return int(s.n.Load()) }

// Path returns the file the overrides are kept in (the target of a
// symbolic link given as OverrideOptions.Path), or "" for memory only.
func (s *Overrides) Path() string { return s.path }

// saveLocked writes the file with every override, k's replaced by r (or
// removed for nil), and reports whether the file now holds the change;
// err may be non-nil even so, if only the directory's fsync failed.
// Requires s.mu held.
func (s *Overrides) saveLocked(k ovKey, r *ovRec) (saved bool, err error) {
	if s.path == "" {
		return true, nil
	}
	recs := make([]*ovRec, 0, s.n.Load()+1)
	for i := range s.shards {
		for rk, x := range s.shards[i].recs() {
			if rk != k {
				recs = append(recs, x)
			}
		}
	}
	if r != nil {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b *ovRec) int {
		if c := strings.Compare(a.o.Policy, b.o.Policy); c != 0 {
			return c
		}
		return strings.Compare(a.o.Key, b.o.Key)
	})
	if err := s.replaceFile(recs); err != nil {
		return false, fmt.Errorf("overrides file %s: %w", s.path, err)
	}
	if err := syncDir(s.dir); err != nil {
		return true, fmt.Errorf("overrides file %s: saved, but the directory's fsync failed (the change may not survive a crash of the machine): %w", s.path, err)
	}
	return true, nil
}

// replaceFile writes recs to a temporary file beside the file, syncs it
// and renames it over the file.
func (s *Overrides) replaceFile(recs []*ovRec) (err error) {
	f, err := os.CreateTemp(s.dir, s.tmpNames) // mode 0600
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	w := bufio.NewWriterSize(f, 64<<10)
	fmt.Fprintf(w, `{"format":%q,"version":%d,"count":%d}`+"\n", overridesMagic, OverridesFormat, len(recs))
	for _, r := range recs {
		w.Write(r.line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), s.path)
}

// syncDir fsyncs a directory, so that a rename in it survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// encodeOverride returns o's line of the file.
func encodeOverride(o limiter.Override) ([]byte, error) {
	b, err := o.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", limiter.ErrInvalidOverride, err)
	}
	return b, nil
}

// overridesHeader is the file's first line.
type overridesHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Count   int    `json:"count"`
}

// readOverrides reads the file at path: none if it does not exist.
func readOverrides(path string, max int) ([]*ovRec, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("overrides file %s: %w", path, err)
	}
	defer f.Close()
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("overrides file %s:%d: %s", path, line, fmt.Sprintf(format, args...))
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxOverrideLine)
	var (
		h    overridesHeader
		recs []*ovRec
		seen = map[ovKey]int{}
		line = 0
	)
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if line > 1 && len(bytes.TrimSpace(b)) == 0 {
			continue // a blank line a hand edit left
		}
		if line == 1 {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&h); err != nil || h.Format != overridesMagic {
				return nil, bad(1, `not a header {"format":%q,"version":N,"count":N}: %.64q`, overridesMagic, b)
			}
			switch {
			case h.Version > OverridesFormat:
				return nil, bad(1, "format version %d is newer than this limitproxy reads (%d): written by a later version", h.Version, OverridesFormat)
			case h.Version < 1:
				return nil, bad(1, "format version %d is not one (1 to %d)", h.Version, OverridesFormat)
			case h.Count < 0:
				return nil, bad(1, "count %d is negative", h.Count)
			case h.Count > max:
				return nil, bad(1, "%d overrides, above the bound of %d (raise it, or remove some)", h.Count, max)
			}
			recs = make([]*ovRec, 0, h.Count)
			continue
		}
		if len(recs) == h.Count {
			return nil, bad(line, "more overrides than the header's count %d", h.Count)
		}
		var o limiter.Override
		if err := o.UnmarshalJSON(b); err != nil {
			return nil, bad(line, "%v", err)
		}
		if err := o.Validate(); err != nil {
			return nil, bad(line, "%v", err)
		}
		k := ovKey{o.Policy, o.Key}
		if first, dup := seen[k]; dup {
			return nil, bad(line, "policy %q key %q again (first at line %d)", o.Policy, o.Key, first)
		}
		seen[k] = line
		// Encoded again, so that the next write has one form whatever
		// spacing a hand edit left.
		enc, err := encodeOverride(o)
		if err != nil {
			return nil, bad(line, "%v", err)
		}
		recs = append(recs, &ovRec{o: o, line: enc})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, bad(line+1, "line longer than %d bytes", maxOverrideLine)
		}
		return nil, fmt.Errorf("overrides file %s: %w", path, err)
	}
	switch {
	case line == 0:
		return nil, fmt.Errorf("overrides file %s: empty, not even a header (a file this store wrote always has one)", path)
	case len(recs) != h.Count:
		return nil, fmt.Errorf("overrides file %s: the header's count is %d, but %d overrides follow (truncated?)", path, h.Count, len(recs))
	}
	return recs, nil
}
