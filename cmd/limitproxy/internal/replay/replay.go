package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
	"github.com/limitproxy/limitproxy/internal/topk"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// DefaultTop is Options.Top's default: the keys each list shows.
const DefaultTop = 10

// sketchK is the counters of each top-keys summary (topk.Sketch): counts
// are exact while a policy rejects at most this many distinct keys, and
// never off by more than rejections/sketchK after (Report's Err).
const sketchK = 4096

// Options configures a replay.
type Options struct {
	// Config is the configuration the logs are replayed against; Against,
	// if not "", a second one replayed beside it for a comparison.
	Config, Against string
	// Overrides, if not "", is a file of per-key overrides applied under
	// every configuration: the memory store's overrides file, or what the
	// admin API's GET /api/v1/overrides answered (docs/replay.md).
	Overrides string
	// Logs are the access logs' paths (plain or gzipped), merged in time
	// order.
	Logs []string
	// Read says how the logs are read: their format and, for nginx's, the
	// log_format, the client-address variable, the X-Forwarded-For walk
	// and the trusted proxies.
	Read logread.Options
	// Slack is how far out of time order a log's lines may be and still
	// be replayed in order (logread.MergeOptions.Slack); 0 means
	// logread.DefaultSlack.
	Slack time.Duration
	// Top is how many keys each list of keys shows; 0 means DefaultTop.
	Top int
	// RawKeys shows client keys as proxy.KeyParts decodes them; otherwise
	// each is shown as its key hash (proxy.KeyHasher) under KeySecret.
	RawKeys bool
	// KeySecret is the key hash's secret: the server's ([admin]
	// key_hash_secret_env's) shows the hashes the admin API and the
	// access log show. nil: one drawn for the run (the same key gets the
	// same hash throughout one run, and nothing links it to the key
	// across runs).
	KeySecret []byte
	// LineError, if not nil, is called with each line that could not be
	// read (a *logread.LineError, naming file:line); the replay moves on.
	LineError func(error)
	// Progress, if not nil, is called as the replay goes (every few
	// thousand lines) and once at the end, from Run's goroutine.
	Progress func(Progress)
}

// Progress is how far a replay is.
type Progress struct {
	// Lines are the lines read so far, all logs together.
	Lines int64
	// Read and Size are the bytes read of the logs and their total size
	// (as stored: compressed for a gzipped log); Size is 0 when unknown
	// (a log that is not a regular file).
	Read, Size int64
	// Elapsed is the time since the replay began.
	Elapsed time.Duration
	// Done is set on the last call.
	Done bool
}

// decider is what a replay asks about each request: proxy's Evaluator,
// or a fake in tests.
type decider interface {
	Evaluate(r *http.Request, now time.Time) proxy.Verdict
	Answer(v proxy.Verdict, status int, cost int64, end time.Time)
}

// Run replays the logs of o against its configurations and returns what
// each decided. Each configuration gets a store and penalty box of its
// own, in memory (whatever its [store] says), with no goroutine: the
// replay's clock is the logs' and nothing waits. An error loading a
// configuration or opening a log ends it before any replay; a malformed
// line does not (see Options.LineError). It returns early, with an
// error, when ctx is done.
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.Logs) == 0 {
		return nil, errors.New("no access log to replay")
	}
	paths := []string{o.Config}
	if o.Against != "" {
		paths = append(paths, o.Against)
	}
	var ov perkey.Overrides
	if o.Overrides != "" {
		var err error
		if ov, err = loadOverrides(o.Overrides); err != nil {
			return nil, err
		}
	}
	var sides []*side
	for _, path := range paths {
		s, err := load(path, ov)
		if err != nil {
			return nil, err
		}
		sides = append(sides, s)
	}
	var (
		readers []logread.Reader
		files   []*logread.File
	)
	for _, path := range o.Logs {
		f, err := logread.Open(path, o.Read)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		readers = append(readers, f)
		files = append(files, f)
	}
	e := newEngine(sides, o.Top, o.RawKeys, o.KeySecret)
	e.logs = o.Logs
	if o.Progress != nil {
		begin := time.Now()
		e.progress = func(lines int64, done bool) {
			p := Progress{Lines: lines, Elapsed: time.Since(begin), Done: done}
			for _, f := range files {
				read, size := f.Position()
				p.Read += read
				if size < 0 || p.Size < 0 {
					p.Size = -1
					continue
				}
				p.Size += size
			}
			p.Size = max(p.Size, 0)
			o.Progress(p)
		}
	}
	if err := e.replay(ctx, logread.Merge(logread.MergeOptions{Slack: o.Slack}, readers...), o.LineError); err != nil {
		return nil, err
	}
	return e.report(), nil
}

// load compiles the configuration at path against a fresh memory store,
// as the server's memory backend does, with its queues virtual (Decision
// carries a queued request's place on the schedule; nobody waits), and
// the overrides ov (nil: none).
func load(path string, ov perkey.Overrides) (*side, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	store := memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys, VirtualQueues: true})
	set, err := policy.Compile(cfg, store, time.Unix(0, 0).UTC())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	names := make([]string, len(cfg.Policies))
	for i, p := range cfg.Policies {
		names[i] = p.Name
	}
	s := newSide(path, proxy.NewEvaluator(set, proxy.EvaluatorOptions{Bans: memstore.NewBans(memstore.BanOptions{}), Overrides: ov}), names)
	s.headers = proxy.ReplayHeaders(set)
	s.query = keysOnQuery(cfg)
	s.valueHeaders, s.valueClaims = valueReads(set)
	return s, nil
}

// valueReads returns the request headers (canonical) and the claims the
// policies of set compare by value: headers matched on a value or giving
// an estimate, claims matched on. What a log holds of them only hashed
// ([log] access_replay = "hashed") cannot decide those.
func valueReads(set *policy.Set) (headers, claims []string) {
	for _, p := range set.Policies {
		for _, h := range p.Match.Headers {
			if !h.Any && !slices.Contains(headers, http.CanonicalHeaderKey(h.Name)) {
				headers = append(headers, http.CanonicalHeaderKey(h.Name))
			}
		}
		for _, ch := range p.Charges {
			if ch.EstimateHeader != "" && !slices.Contains(headers, http.CanonicalHeaderKey(ch.EstimateHeader)) {
				headers = append(headers, http.CanonicalHeaderKey(ch.EstimateHeader))
			}
		}
		for _, c := range p.Match.Claims {
			if !slices.Contains(claims, c.Path) {
				claims = append(claims, c.Path)
			}
		}
	}
	return headers, claims
}

// keysOnQuery reports whether a policy of cfg keys on a query parameter.
func keysOnQuery(cfg *config.Config) bool {
	for _, p := range cfg.Policies {
		for _, kp := range p.Key {
			if kp.Kind == config.KeyQuery {
				return true
			}
		}
		for _, lk := range p.LimitKeys {
			for _, kp := range lk.Parts {
				if kp.Kind == config.KeyQuery {
					return true
				}
			}
		}
	}
	return false
}

// source is what a replay reads: a logread.Merger, or one Reader.
type source interface {
	Next() (logread.Record, error)
	Stats() logread.Stats
}

// checkEvery is how many records go by between two looks at ctx.
const checkEvery = 4096

// replay decides every record of src, in order, under every side.
func (e *engine) replay(ctx context.Context, src source, lineError func(error)) error {
	for n := 0; ; n++ {
		if n%checkEvery == 0 {
			if ctx.Err() != nil {
				return fmt.Errorf("replay interrupted: %w", ctx.Err())
			}
			if e.progress != nil && n > 0 {
				e.progress(src.Stats().Lines, false)
			}
		}
		rec, err := src.Next()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			for _, s := range e.sides {
				s.settle(time.Time{}, true)
			}
			e.st = src.Stats()
			if e.progress != nil {
				e.progress(e.st.Lines, true)
			}
			return nil
		case errors.Is(err, logread.ErrMalformed):
			if lineError != nil {
				lineError(err)
			}
			continue
		default:
			return err
		}
		e.record(&rec)
	}
}

// engine replays records under one or two sides and tallies what they
// decided.
type engine struct {
	sides  []*side
	top    int
	raw    bool
	hasher *proxy.KeyHasher
	logs   []string
	// progress, if not nil, is told the lines read so far.
	progress func(lines int64, done bool)

	st                    logread.Stats // the readers', at the end
	replayed, notRequests int64
	noClient              int64
	maskedClient          int64     // of noClient, lines whose client was masked or hashed
	noReplayFields        int64     // limitproxy's lines without access_replay's fields
	from, to              time.Time // the earliest and latest arrival replayed
	diff                  diff      // with two sides
	verdicts              [2]proxy.Verdict
	// hashedCompared counts the records whose header or claim a side
	// compares by value but the line holds hashed; hashedNames names
	// them.
	hashedCompared int64
	hashedNames    []string
}

// newEngine returns an engine of sides (one or two). secret keys the
// hashes of client keys; nil draws one.
func newEngine(sides []*side, top int, raw bool, secret []byte) *engine {
	if top <= 0 {
		top = DefaultTop
	}
	e := &engine{sides: sides, top: top, raw: raw, hasher: proxy.NewKeyHasher(secret)}
	if len(sides) == 2 {
		e.diff.init()
	}
	return e
}

// record replays one record under every side.
func (e *engine) record(rec *logread.Record) {
	if rec.Method == "" || rec.Method == proxy.RLSMethod {
		// Not a request: limitproxy's server refuses such a line before
		// any policy sees it; or a descriptor Envoy's rate limit service
		// decided, which no HTTP policy ever sees.
		e.notRequests++
		return
	}
	t := rec.Time
	end := rec.End
	if end.Before(t) {
		end = t
	}
	c := cost(rec)
	hashed := false
	for _, s := range e.sides {
		hashed = e.hashedRead(s, rec) || hashed
	}
	if hashed {
		e.hashedCompared++
	}
	for i, s := range e.sides {
		// A request of its own for each side: evaluating canonicalizes
		// it in place.
		r, hasClient := request(rec)
		if i == 0 && !hasClient {
			e.noClient++
			if rec.Has&logread.HasMaskedClient != 0 {
				e.maskedClient++
			}
		}
		if i == 0 && rec.Format == logread.Limitproxy && rec.Has&logread.HasReplayFields == 0 {
			e.noReplayFields++
		}

		s.settle(t, false)
		v := s.d.Evaluate(r, t)
		if v.Status == 0 {
			// Forwarded: its answer ends at end, when what it owes the
			// limits that read answers is settled.
			s.answers.push(answer{v: v, status: rec.Status, cost: c, end: end})
		}
		s.count(v, t, rec)
		e.verdicts[i] = v
	}
	if e.replayed == 0 || t.Before(e.from) {
		e.from = t
	}
	if e.replayed == 0 || t.After(e.to) {
		e.to = t
	}
	e.replayed++
	if len(e.sides) == 2 {
		e.diff.add(&e.verdicts[0], &e.verdicts[1])
	}
}

// hashedRead reports whether side s compares by value a header or claim
// that rec holds only hashed, and notes its name.
func (e *engine) hashedRead(s *side, rec *logread.Record) bool {
	found := false
	note := func(what, name string, in []string) {
		if slices.Contains(in, name) {
			found = true
			if n := what + name; !slices.Contains(e.hashedNames, n) {
				e.hashedNames = append(e.hashedNames, n)
			}
		}
	}
	for _, f := range rec.Header {
		if f.Hashed {
			note("h#:", f.Name, s.valueHeaders)
		}
	}
	for _, f := range rec.Claims {
		if f.Hashed {
			note("c#:", f.Name, s.valueClaims)
		}
	}
	return found
}

// side is one configuration's replay: its decider and its tallies.
type side struct {
	config   string
	d        decider
	policies []string // in file order
	rows     map[rowKey]*row
	answers  answerQueue
	logged   agreement
	// headers are the request headers its policies read; query whether
	// one keys on a query parameter: what a log without access_replay's
	// fields leaves the replay without. valueHeaders and valueClaims are
	// those it compares by value (valueReads).
	headers                   []string
	query                     bool
	valueHeaders, valueClaims []string
}

func newSide(config string, d decider, policies []string) *side {
	return &side{config: config, d: d, policies: policies, rows: map[rowKey]*row{}}
}

// settle gives the answers that ended by now (all of them if all) to the
// decider, in the order they ended: the proxy settles an answer when it
// ends, so a request arriving after that sees what it was charged, and
// one arriving before does not. An answer that ends at the instant a
// request arrives is settled first.
func (s *side) settle(now time.Time, all bool) {
	for len(s.answers.q) > 0 && (all || !s.answers.q[0].end.After(now)) {
		a := s.answers.pop()
		s.d.Answer(a.v, a.status, a.cost, a.end)
	}
}

// rowKey names a row of the tally: a policy, or one of the rows of
// requests no policy decided (unmatched, invalid).
type rowKey struct {
	policy  string
	special string // "", RowUnmatched or RowInvalid
}

// row is one policy's tally under one side.
type row struct {
	counts Counts
	top    *topk.Sketch // the keys rejected (rejected, banned); nil until one is
	tl     timeline
}

// count tallies v, decided at t for rec.
func (s *side) count(v proxy.Verdict, t time.Time, rec *logread.Record) {
	k := rowKey{policy: v.Policy}
	switch {
	case v.Decision == proxy.Unmatched:
		k = rowKey{special: RowUnmatched}
	case v.Decision == proxy.Invalid:
		k = rowKey{special: RowInvalid}
	}
	rw := s.rows[k]
	if rw == nil {
		rw = &row{}
		s.rows[k] = rw
	}
	rw.counts.add(v.Decision)
	if k.special == "" {
		p := rw.tl.at(t.Unix())
		switch v.Decision {
		case proxy.Rejected, proxy.Banned:
			p.rejected++
		case proxy.ShadowRejected, proxy.ShadowBanned:
			p.shadow++
			p.admitted++
		default:
			p.admitted++
		}
	}
	if refused(v.Decision) {
		if rw.top == nil {
			rw.top, _ = topk.New(sketchK)
		}
		rw.top.Add(keyOf(&v), 1)
	}
	if rec.Has&logread.HasOutcome != 0 {
		s.logged.add(rec.Policy, rec.Decision, v.Policy, v.Decision.String())
	}
}

// refused reports whether decision refused the request because of a limit
// or a ban: what a diff compares.
func refused(decision proxy.Decision) bool {
	return decision == proxy.Rejected || decision == proxy.Banned
}

// answer is a forwarded request's answer, settled when it ends.
type answer struct {
	v      proxy.Verdict
	status int
	cost   int64
	end    time.Time
	seq    uint64
}

// answerQueue is a min-heap of answers by end, then by arrival.
type answerQueue struct {
	q   []answer
	seq uint64
}

func (h *answerQueue) less(i, j int) bool {
	a, b := &h.q[i], &h.q[j]
	if !a.end.Equal(b.end) {
		return a.end.Before(b.end)
	}
	return a.seq < b.seq
}

func (h *answerQueue) push(a answer) {
	a.seq = h.seq
	h.seq++
	h.q = append(h.q, a)
	for i := len(h.q) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.q[i], h.q[p] = h.q[p], h.q[i]
		i = p
	}
}

func (h *answerQueue) pop() answer {
	a := h.q[0]
	n := len(h.q) - 1
	h.q[0] = h.q[n]
	h.q[n] = answer{} // drop the verdict's reference
	h.q = h.q[:n]
	for i := 0; ; {
		l, r, least := 2*i+1, 2*i+2, i
		if l < n && h.less(l, least) {
			least = l
		}
		if r < n && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h.q[i], h.q[least] = h.q[least], h.q[i]
		i = least
	}
	return a
}
