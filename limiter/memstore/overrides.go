package memstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// Interface guard.
var _ perkey.Overrides = (*Overrides)(nil)

// DefaultMaxOverrides is the bound on overrides used when
// OverrideOptions.MaxOverrides is 0. An override costs a few hundred
// bytes in memory and about as much in the file (twice that at most,
// with its journal): at the bound, about 20 to 40 MB.
const DefaultMaxOverrides = 100_000

// OverridesFormat is the version of the overrides file this package
// writes, and the newest it reads (version 1, a snapshot without journal,
// is read too).
const OverridesFormat = 2

// minJournal is the fewest journal records that make a compaction: below
// it, a small store is not rewritten at every other change.
const minJournal = 64

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
	// perkey.ErrTooManyOverrides.
	MaxOverrides int
}

// Overrides is the in-memory override store (perkey.Overrides), for one
// instance, persisted to a file. Create it with NewOverrides; it is safe
// for concurrent use, and needs no goroutine.
//
// The overrides are in maps sharded by a hash of the client key, each
// immutable once published: Get loads its shard's map with one atomic
// load and takes no lock, and a change publishes a copy of its shard's
// map (1/64 of the overrides), which suits a store read by every request
// and changed by an operator. Set and Remove are serialized by one mutex:
// each appends a record of the change to the file's journal and fsyncs
// it, and only then applies the change, so that what Get answers has
// always been saved. A change therefore costs one short write and one
// fsync, whatever the number of overrides (BenchmarkOverridesSet: the
// same at 10 and 100,000). When the journal holds as many records as
// there are overrides (at least 64), the next change compacts the file:
// writes every override anew to a temporary file in the same directory,
// fsyncs it, renames it over the file and fsyncs the directory, so that a
// crash leaves the old file or the new one, never a mix. The file is thus
// at most about twice the overrides, and the compaction's cost, one write
// of every override, is spread over as many changes.
//
// # File
//
// The file is UTF-8 JSON lines, mode 0600: a header, the snapshot (one
// override per line in perkey.Override's JSON form, sorted by policy
// then key), then the journal, one change per line:
//
//	{"format":"limitproxy overrides","version":2,"count":2}
//	{"policy":"api","key":"203.0.113.9","limits":[{"algorithm":"token_bucket","rate":"500/1s","burst":1000}],"set_at":"2030-01-01T00:00:00Z"}
//	{"policy":"api","key":"partner-7","scale":10,"note":"gold tier","set_at":"2030-01-01T00:00:00Z"}
//	{"set":{"policy":"api","key":"partner-8","scale":5,"set_at":"2030-01-02T00:00:00Z"}}
//	{"remove":{"policy":"api","key":"203.0.113.9"}}
//
// count is the number of snapshot lines (so a truncated snapshot is
// caught: an operator who edits the file by hand, with the proxy stopped,
// updates it); the journal's records apply in order. A last journal line
// without its newline, or that does not read, is a change whose write a
// crash cut short (its Set or Remove never returned success): it is
// dropped, and the file cut back to the line before. NewOverrides refuses
// a file it cannot trust, naming the file, the line and the problem: a
// header of another format or of a later version than OverridesFormat, a
// snapshot line that is not an override or that Override.Validate
// refuses, a key twice in the snapshot, a count that does not match, a
// journal record that does not read (but the last), or more overrides
// than MaxOverrides. A missing file is an empty store. Temporary files
// left by a crash (the file's name + ".tmp" + digits) are never read.
type Overrides struct {
	path     string // "" for memory only
	max      int
	seed     maphash.Seed
	shards   []ovShard
	n        atomic.Int64 // overrides held: 0 lets Get skip the lookup
	mu       sync.Mutex   // serializes Set and Remove, and the file
	dir      string
	tmpNames string // CreateTemp's pattern
	// journal is the file open for appending (nil: the next change
	// compacts), journaled the records in its journal. Both under mu.
	journal   *os.File
	journaled int
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
	o    perkey.Override
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
	recs, journaled, err := readOverrides(path, s.max, true)
	if err != nil {
		return nil, err
	}
	s.journaled = journaled
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
	// The journal is appended to from here on; a file in an older format,
	// or missing, is compacted by the first change.
	if journaled >= 0 {
		if s.journal, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
			return nil, fmt.Errorf("overrides file %s: %w", path, err)
		}
	}
	return s, nil
}

// Close closes the file. The store must not be changed afterwards (Get
// and List still answer).
func (s *Overrides) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return nil
	}
	err := s.journal.Close()
	s.journal = nil
	return err
}

func (s *Overrides) shard(key string) *ovShard {
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// Set implements perkey.Overrides. Beyond ErrInvalidOverride and
// ErrTooManyOverrides, its errors are the file's (the change is then not
// applied); ctx is not used: the file is written to the end. If only the
// directory's fsync fails, after the file was replaced, the change is
// applied (the file has it) and the error says so.
func (s *Overrides) Set(_ context.Context, o perkey.Override) error {
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
		return fmt.Errorf("%w: the store holds %d, its bound", perkey.ErrTooManyOverrides, s.max)
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

// Get implements perkey.Overrides.
func (s *Overrides) Get(policy, key string) (perkey.Override, bool) {
	if s.n.Load() == 0 {
		return perkey.Override{}, false
	}
	r := s.shard(key).recs()[ovKey{policy, key}]
	if r == nil {
		return perkey.Override{}, false
	}
	return r.o, true // r is never modified: a change replaces it
}

// Remove implements perkey.Overrides. Its errors are the file's, as
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

// List implements perkey.Overrides. It never returns an error.
func (s *Overrides) List(_ context.Context, policy string, max int) ([]perkey.Override, error) {
	if max < 1 {
		return nil, nil
	}
	var out []perkey.Override
	for i := range s.shards {
		for k, r := range s.shards[i].recs() {
			if policy == "" || k.policy == policy {
				out = append(out, r.o)
			}
		}
	}
	perkey.SortOverrides(out)
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

// saveLocked saves the change of k to r (a removal for nil): appended
// to the journal, or, when the journal is due for compaction (or the file
// cannot be appended to), by writing the file anew with every override.
// It reports whether the file now holds the change; err may be non-nil
// even so, if only the directory's fsync failed. Requires s.mu held.
func (s *Overrides) saveLocked(k ovKey, r *ovRec) (saved bool, err error) {
	if s.path == "" {
		return true, nil
	}
	if s.journal != nil && s.journaled < max(minJournal, int(s.n.Load())) {
		if err := s.appendLocked(k, r); err == nil {
			s.journaled++
			return true, nil
		}
		// What the append left is cut off by the compaction.
		s.journal.Close()
		s.journal = nil
	}
	return s.compactLocked(k, r)
}

// appendLocked appends the record of a change to the journal and fsyncs
// it, once it has checked that the file it has open is still the one at
// the path (not removed, nor replaced by hand). Requires s.mu held.
func (s *Overrides) appendLocked(k ovKey, r *ovRec) error {
	open, err := s.journal.Stat()
	if err != nil {
		return err
	}
	if cur, err := os.Stat(s.path); err != nil || !os.SameFile(open, cur) {
		return errors.New("the file was removed or replaced")
	}
	var line []byte
	if r != nil {
		line = append(append([]byte(`{"set":`), r.line...), '}', '\n')
	} else {
		b, err := json.Marshal(removeRecord{Policy: k.policy, Key: k.key})
		if err != nil {
			return err
		}
		line = append(append([]byte(`{"remove":`), b...), '}', '\n')
	}
	if _, err := s.journal.Write(line); err != nil {
		return err
	}
	return s.journal.Sync()
}

// compactLocked writes the file anew with every override, k's replaced by
// r (or removed for nil), and an empty journal, and opens it for
// appending. Requires s.mu held.
func (s *Overrides) compactLocked(k ovKey, r *ovRec) (saved bool, err error) {
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
	s.journaled = 0
	if s.journal, err = os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		s.journal = nil // the next change compacts again
		return true, fmt.Errorf("overrides file %s: saved, but cannot be opened to append the next change: %w", s.path, err)
	}
	if err := syncDir(s.dir); err != nil {
		return true, fmt.Errorf("overrides file %s: saved, but the directory's fsync failed (the change may not survive a crash of the machine): %w", s.path, err)
	}
	return true, nil
}

// removeRecord is the body of a journal's removal.
type removeRecord struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
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
func encodeOverride(o perkey.Override) ([]byte, error) {
	b, err := o.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", perkey.ErrInvalidOverride, err)
	}
	return b, nil
}

// overridesHeader is the file's first line.
type overridesHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Count   int    `json:"count"`
}

// ReadOverrides returns the overrides the file at path holds, as a store
// opened on it would (NewOverrides), sorted by policy then key, without
// writing to it: a torn last journal line is left where it is, and
// skipped. It is for a reader of another process's file (`limitproxy
// replay`), which may be in use. A missing file is an error (wrapping
// fs.ErrNotExist); so is one holding more than DefaultMaxOverrides.
func ReadOverrides(path string) ([]perkey.Override, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("overrides file %s: %w", path, err)
	}
	recs, _, err := readOverrides(path, DefaultMaxOverrides, false)
	if err != nil {
		return nil, err
	}
	out := make([]perkey.Override, len(recs))
	for i, r := range recs {
		out[i] = r.o.Clone()
	}
	perkey.SortOverrides(out)
	return out, nil
}

// readOverrides reads the file at path: none if it does not exist. It
// returns the overrides, and how many records its journal holds (-1 for
// a missing file or one of version 1, which the first change rewrites).
// With repair, a torn last journal line is cut off the file (and a last
// line without its newline given one); without, the file is only read.
func readOverrides(path string, max int, repair bool) ([]*ovRec, int, error) {
	mode := os.O_RDONLY
	if repair {
		mode = os.O_RDWR
	}
	f, err := os.OpenFile(path, mode, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, -1, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("overrides file %s: %w", path, err)
	}
	defer f.Close()
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("overrides file %s:%d: %s", path, line, fmt.Sprintf(format, args...))
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var (
		h         overridesHeader
		recs      = map[ovKey]*ovRec{}
		seen      = map[ovKey]int{}
		line      = 0
		snapshot  = 0
		journaled = 0
		offset    int64 // of the line being read
	)
	for {
		b, err := readLine(br)
		if err == io.EOF && len(b) == 0 {
			break
		}
		if err != nil && err != io.EOF {
			if errors.Is(err, bufio.ErrTooLong) {
				return nil, 0, bad(line+1, "line longer than %d bytes", maxOverrideLine)
			}
			return nil, 0, fmt.Errorf("overrides file %s: %w", path, err)
		}
		line++
		torn := err == io.EOF // the last line, without its newline
		start := offset
		offset += int64(len(b))
		b = bytes.TrimSuffix(b, []byte("\n"))
		if line > 1 && len(bytes.TrimSpace(b)) == 0 {
			continue // a blank line a hand edit left
		}
		if line == 1 {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&h); err != nil || h.Format != overridesMagic {
				return nil, 0, bad(1, `not a header {"format":%q,"version":N,"count":N}: %.64q`, overridesMagic, b)
			}
			switch {
			case h.Version > OverridesFormat:
				return nil, 0, bad(1, "format version %d is newer than this limitproxy reads (%d): written by a later version", h.Version, OverridesFormat)
			case h.Version < 1:
				return nil, 0, bad(1, "format version %d is not one (1 to %d)", h.Version, OverridesFormat)
			case h.Count < 0:
				return nil, 0, bad(1, "count %d is negative", h.Count)
			case h.Count > max:
				return nil, 0, bad(1, "%d overrides, above the bound of %d (raise it, or remove some)", h.Count, max)
			}
			continue
		}
		if snapshot == h.Count {
			if h.Version == 1 {
				return nil, 0, bad(line, "more overrides than the header's count %d", h.Count)
			}
			err := applyJournal(recs, b)
			if err != nil && torn || err != nil && atEOF(br) {
				// A change a crash cut short: cut it off, so that the
				// next append starts on a line of its own.
				if !repair {
					break
				}
				if err := f.Truncate(start); err != nil {
					return nil, 0, fmt.Errorf("overrides file %s: cutting off its torn last line: %w", path, err)
				}
				break
			}
			if err != nil {
				return nil, 0, bad(line, "%v", err)
			}
			if torn && repair {
				if _, err := f.WriteAt([]byte("\n"), offset); err != nil {
					return nil, 0, fmt.Errorf("overrides file %s: ending its last line: %w", path, err)
				}
			}
			journaled++
			continue
		}
		o, err := decodeLine(b)
		if err != nil {
			return nil, 0, bad(line, "%v", err)
		}
		k := ovKey{o.Policy, o.Key}
		if first, dup := seen[k]; dup {
			return nil, 0, bad(line, "policy %q key %q again (first at line %d)", o.Policy, o.Key, first)
		}
		seen[k] = line
		enc, err := encodeOverride(o)
		if err != nil {
			return nil, 0, bad(line, "%v", err)
		}
		recs[k] = &ovRec{o: o, line: enc}
		snapshot++
	}
	switch {
	case line == 0:
		return nil, 0, fmt.Errorf("overrides file %s: empty, not even a header (a file this store wrote always has one)", path)
	case snapshot != h.Count:
		return nil, 0, fmt.Errorf("overrides file %s: the header's count is %d, but %d overrides follow (truncated?)", path, h.Count, snapshot)
	case len(recs) > max:
		return nil, 0, fmt.Errorf("overrides file %s: %d overrides, above the bound of %d (raise it, or remove some)", path, len(recs), max)
	}
	if h.Version < OverridesFormat {
		journaled = -1
	}
	out := make([]*ovRec, 0, len(recs))
	for _, r := range recs {
		out = append(out, r)
	}
	return out, journaled, nil
}

// readLine returns the next line with its newline, or the last one
// without (and io.EOF), refusing one longer than maxOverrideLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		b = append(b, chunk...)
		if len(b) > maxOverrideLine+1 {
			return nil, bufio.ErrTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return b, err
	}
}

// atEOF reports whether br has nothing more to read.
func atEOF(br *bufio.Reader) bool {
	_, err := br.Peek(1)
	return err != nil
}

// decodeLine reads an override's line and checks it.
func decodeLine(b []byte) (perkey.Override, error) {
	var o perkey.Override
	if err := o.UnmarshalJSON(b); err != nil {
		return o, err
	}
	return o, o.Validate()
}

// applyJournal applies one journal record to recs.
func applyJournal(recs map[ovKey]*ovRec, b []byte) error {
	var rec struct {
		Set    json.RawMessage `json:"set"`
		Remove *removeRecord   `json:"remove"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return fmt.Errorf("journal record: %w", err)
	}
	switch {
	case dec.More():
		return errors.New("journal record: data after the object")
	case (rec.Set == nil) == (rec.Remove == nil):
		return errors.New(`journal record: not one of {"set":override} and {"remove":{"policy":…,"key":…}}`)
	case rec.Remove != nil:
		delete(recs, ovKey{rec.Remove.Policy, rec.Remove.Key})
		return nil
	}
	o, err := decodeLine(rec.Set)
	if err != nil {
		return err
	}
	enc, err := encodeOverride(o)
	if err != nil {
		return err
	}
	recs[ovKey{o.Policy, o.Key}] = &ovRec{o: o, line: enc}
	return nil
}
