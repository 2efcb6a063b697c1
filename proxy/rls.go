package proxy

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

// RLSMethod is the method of the access log line of an RLS descriptor.
const RLSMethod = "RLS"

// Descriptor is one rate limit descriptor of an Envoy rate limit call
// (docs/envoy.md): its entries, in order, and its cost.
type Descriptor struct {
	Entries []policy.DescriptorEntry
	// Cost is the hits the descriptor adds (each limit multiplies it by
	// its own cost); 0 counts as 1. The caller bounds it.
	Cost int64
	// CheckOnly asks what the limits would decide without counting
	// (Envoy's descriptor hits_addend of 0): for one hit, or, with [rls]
	// compatibility = "envoyproxy/ratelimit", for none (the count as it
	// is, as the reference checks it).
	CheckOnly bool
	// Limit, if not nil, is the descriptor's own limit (Envoy's
	// per-route override): with [rls] compatibility =
	// "envoyproxy/ratelimit" and a domain the service knows, it decides
	// the descriptor instead of any policy; ignored otherwise.
	Limit *DescriptorLimit
}

// DescriptorLimit is a descriptor's own limit: RequestsPerUnit per Unit,
// a window of that length aligned to the Unix epoch, as
// envoyproxy/ratelimit counts it.
type DescriptorLimit struct {
	RequestsPerUnit int64
	Unit            time.Duration
}

// DescriptorVerdict is what DecideDescriptors decided about one
// descriptor.
type DescriptorVerdict struct {
	// Policy is the RLS policy that matched; "" when none did (Decision
	// Unmatched), or when the descriptor's own limit decided it.
	Policy string
	// Decision is as the access log names it: Allowed, Queued, Rejected,
	// ShadowRejected, Banned, ShadowBanned, Skipped (its policy was
	// replaced: not decided) or Unmatched.
	Decision Decision
	// Over reports that the descriptor is over its limit (OVER_LIMIT):
	// rejected by a limit, or banned.
	Over bool
	// Unlimited reports that an unlimited policy matched it: OK with
	// limit_remaining 4294967295, nothing counted.
	Unlimited bool
	// QuotaMode reports that its policy's quota_mode makes it a quota
	// (docs/envoy.md): over, it makes the call OVER_LIMIT only if every
	// quota of the call is over.
	QuotaMode bool
	// Limited reports that a limit decided: LimitName, Quota, Window,
	// Remaining and ResetAfter describe the most pressing one.
	Limited bool
	// LimitName is the limit's name as the RateLimit fields give it;
	// NameKey its name key ("" when it has none: the name a compatible
	// answer's current_limit carries).
	LimitName string
	NameKey   string
	Quota     int64            // the limit's quota per Window
	Window    time.Duration    // the limit's period (a calendar window's nominal length)
	Calendar  limiter.Calendar // a calendar window's unit, whose periods Window does not say; 0 for none
	Remaining int64            // requests of cost 1 it admits now; 0 when Over
	// ResetAfter is the time until the limit is back to full; with [rls]
	// compatibility = "envoyproxy/ratelimit", for a fixed window, the
	// whole seconds from the current second to the window's end, as the
	// reference gives its duration_until_reset.
	ResetAfter time.Duration
	// Metadata is the metadata of the policy that decided the descriptor
	// with a limit (not unlimited, not replaced, not its own limit); nil
	// for none. Read only.
	Metadata map[string]any
}

// rateLimitFields reports whether a response header (canonical name) is
// one of the fields an RLS answer carries: the RateLimit fields of any
// draft or legacy form, and Retry-After.
func rateLimitFields(name string) bool {
	return strings.HasPrefix(name, "Ratelimit") || strings.HasPrefix(name, "X-Ratelimit") || name == "Retry-After"
}

// rlsDecided is one descriptor of a call as DecideDescriptors decides it.
type rlsDecided struct {
	o    ruling
	x    exchange
	wait time.Duration
	// over reports OVER_LIMIT when no reply says it (a descriptor's own
	// limit, which has no policy to answer with).
	over bool
	// own holds the figures of a descriptor's own limit; replaced that
	// the descriptor's policy was replaced; unlimited that it is.
	own       *DescriptorVerdict
	replaced  bool
	unlimited bool
}

// rlsScratch is what DecideDescriptors decides a call of one descriptor
// in (1.4 KiB: the exchange's answer parts), kept in oneScratch from one
// call to the next instead of allocated for each: nothing holds on to it
// past the call (the verdict, the fields and the keys it counted are
// values or allocations of their own).
type rlsScratch struct {
	all  [1]rlsDecided
	keys [limiter.MaxLimits]string
}

// oneScratch holds *rlsScratch.
var oneScratch = sync.Pool{New: func() any { return new(rlsScratch) }}

// put clears sc, so that it keeps nothing of the call alive, and puts it
// back in oneScratch.
func (sc *rlsScratch) put() {
	*sc = rlsScratch{}
	oneScratch.Put(sc)
}

// DecideDescriptors decides the descriptors of one Envoy rate limit call
// of domain, each on its own against the first RLS policy of domain that
// matches it, as ServeHTTP decides a request (the same decide steps:
// penalty box, per-key overrides, limits, shadow mode, the store's
// on_error), and records each decision as a proxied request's: the
// metrics, the top offenders, an access log line. A descriptor whose
// policy has a limit named in the replaces of another descriptor's policy
// is not decided (envoyproxy/ratelimit's replaces). With [rls]
// compatibility = "envoyproxy/ratelimit", a descriptor's fixed windows
// count every hit, rejected or not, and its own limit decides it
// (decideCompatible). It returns a verdict per descriptor, and, when
// [rls] response_headers is "ratelimit", the response fields of the
// call: the RateLimit fields of the first descriptor over its limit,
// else of the allowed one with the fewest remaining; and Retry-After
// when one is over (an empty header otherwise: no answer carries them).
//
// A descriptor a leaky bucket queues is answered when its turn comes
// (unless another descriptor is over, when it leaves the queue at once):
// err is ctx's error when the caller left before, or an error when
// CloseQueues was called; the verdicts are then not to be answered.
// Safe for concurrent use.
func (h *Handler) DecideDescriptors(ctx context.Context, domain string, ds []Descriptor) ([]DescriptorVerdict, http.Header, error) {
	start := h.now()
	snap := h.snap.Load()
	rls := &snap.set.Config.RLS
	compat := rls.Compatibility == config.CompatEnvoy
	joined := rls.Lookup == config.LookupJoined
	// The RateLimit fields are built only for an answer that carries
	// them (about 1 µs and 400 bytes a descriptor).
	withFields := rls.ResponseHeaders == config.RLSHeadersRateLimit
	// Every descriptor's ruling, exchange, wait and keys, and the
	// verdicts: for a call of one descriptor (most), the verdict's
	// allocation and a scratch kept from call to call, three allocations
	// for more.
	var (
		out  []DescriptorVerdict
		all  []rlsDecided
		keys []string
	)
	if len(ds) == 1 {
		sc := oneScratch.Get().(*rlsScratch)
		defer sc.put()
		out, all, keys = make([]DescriptorVerdict, 1), sc.all[:], sc.keys[:]
	} else {
		out = make([]DescriptorVerdict, len(ds))
		all = make([]rlsDecided, len(ds))
		keys = make([]string, len(ds)*limiter.MaxLimits)
	}
	// Each descriptor's policy, or its own limit; then which are
	// replaced: a limit the call's other policies name in their replaces
	// (a descriptor's own limit has no name, and replaces none).
	own := compat && snap.set.KnownDomain(domain)
	var replacing []string
	for i := range ds {
		a := &all[i]
		a.o.keys = keys[i*limiter.MaxLimits : (i+1)*limiter.MaxLimits : (i+1)*limiter.MaxLimits]
		a.o.n, a.o.peek = max(ds[i].Cost, 1), ds[i].CheckOnly
		a.x.w.ResponseWriter = headerWriter{}
		a.x.req.start, a.x.req.snap, a.x.req.srv = start, snap, &snap.set.Config.Server
		if p, ok := snap.set.MatchDescriptor(domain, ds[i].Entries); ok {
			a.o.p, a.o.hp, a.o.ps = p, p, snap.policies[p]
		}
		if own && ds[i].Limit != nil {
			a.own = &DescriptorVerdict{}
			continue
		}
		if a.o.p != nil {
			replacing = append(replacing, a.o.p.RLS.Replaces...)
		}
	}
	if compat && rls.StopIncrementWhenOverLimit {
		if err := h.stopIncrement(ctx, snap, domain, ds, all, replacing, start); err != nil {
			return nil, nil, err
		}
	}
	over := false
	for i := range ds {
		a := &all[i]
		p := a.o.p
		switch {
		case a.own != nil:
			h.decideOwnLimit(ctx, snap, domain, &ds[i], start, a)
		case p == nil:
			a.o.decision = Unmatched
		case len(replacing) > 0 && replaced(p, replacing):
			a.replaced = true
			a.o.decision = Skipped
		case p.RLS.Unlimited || len(p.Limits) == 0:
			// Matched, not limited: unlimited, or a policy without limits
			// (the reference's descriptor without rate_limit).
			a.unlimited = p.RLS.Unlimited
			a.o.decision = Allowed
		default:
			h.decideDescriptor(ctx, ds[i].Entries, start, compat, joined, &a.o)
			if withFields {
				h.inform(&a.x.w, snap, start, &a.o)
			} else if a.o.limited {
				a.o.ps.tracker.observe(a.o.counted, a.o.d, start)
			}
			if a.o.reply != noReply {
				h.answer(&a.x, &a.o)
			}
		}
		over = over || a.o.reply != noReply || a.over
	}
	var err error
	for i := range all {
		o := &all[i].o
		if o.decision != Queued {
			continue
		}
		if over || err != nil {
			// Envoy refuses the request: it never takes its turn.
			leaveQueue(o.p, o.d)
			continue
		}
		all[i].wait, err = h.await(ctx, o, start, noMaxWait)
	}
	best := -1
	for i := range all {
		a := &all[i]
		o := &a.o
		v := &out[i]
		if a.own != nil {
			*v = *a.own
			if v.Limited {
				v.ResetAfter = wholeSecondsToEnd(start, v.Window)
			}
		} else {
			h.verdict(a, v, start, compat)
		}
		status := a.x.w.status
		if status == 0 {
			status = http.StatusOK
			if v.Over {
				status = http.StatusTooManyRequests
			}
		}
		h.metrics.decision(v.Policy, v.Decision)
		if h.acc != nil {
			// The request the line shows is built only for a log, in an
			// exchange of its own: a descriptor sends no body.
			lx := &exchange{req: request{r: descriptorRequest(domain, ds[i].Entries), start: start}, w: recorder{status: status}}
			var p *policy.Policy
			if a.own == nil {
				p = o.p
			}
			h.logAccess(lx, p, v.Decision, a.wait, nil)
		}
		if a.own != nil {
			continue // no RateLimit fields: no policy to describe it
		}
		switch {
		case best < 0:
			if v.Over || v.Limited {
				best = i
			}
		case out[best].Over:
		case v.Over || v.Limited && v.Remaining < out[best].Remaining:
			best = i
		}
	}
	fields := http.Header{}
	if best >= 0 && withFields {
		// The best descriptor's own header, of this call alone: what it
		// holds beside the fields goes.
		fields = all[best].x.w.Header()
		for name := range fields {
			if !rateLimitFields(name) {
				delete(fields, name)
			}
		}
		if out[best].Over && fields.Get("Retry-After") == "" {
			// A ban answered 403 carries none on the proxy path; Envoy's
			// answer to OVER_LIMIT always does.
			o := &all[best].o
			var ra int64
			if o.reply == replyBan {
				var d *limiter.Decision
				if o.limited {
					d = &o.d
				}
				ra = banRetryAfter(d, o.ban, start)
			} else {
				ra = retryAfter(o.d)
			}
			fields.Set("Retry-After", strconv.FormatInt(ra, 10))
		}
	}
	return out, fields, err
}

// verdict fills v from a's ruling (compat: [rls] compatibility is
// envoyproxy/ratelimit's).
func (h *Handler) verdict(a *rlsDecided, v *DescriptorVerdict, start time.Time, compat bool) {
	o := &a.o
	v.Decision, v.Over, v.Unlimited = o.decision, o.reply != noReply, a.unlimited
	if o.p == nil {
		return
	}
	v.Policy = o.p.Name
	v.QuotaMode = o.p.RLS.QuotaMode && !a.replaced
	if !a.replaced && !a.unlimited && len(o.p.Limits) > 0 {
		v.Metadata = o.p.RLS.Metadata
		if compat && v.Metadata != nil && o.p.RLS.ValueToMetric != nil && !metricKeyKept(o.p, o.entries) {
			v.Metadata = nil
		}
	}
	if o.limited && o.d.Index >= 0 && o.hp != nil && int(o.d.Index) < len(o.hp.Limits) {
		i := int(o.d.Index)
		v.Limited = true
		v.LimitName = o.hp.LimitName(i)
		if i < len(o.hp.RLS.Names) {
			v.NameKey = o.hp.RLS.Names[i]
		}
		v.Quota, v.Window = o.hp.Quota(i)
		v.Calendar, _ = o.hp.Limits[i].Calendar()
		v.Remaining = max(o.d.Remaining, 0)
		if !o.d.Allowed {
			v.Remaining = 0
		}
		v.ResetAfter = max(o.d.ResetAt.Sub(start), 0)
		if compat && o.hp.Limits[i].Algorithm() == limiter.FixedWindow && v.Calendar == 0 {
			// The reference's windows are of a length; a calendar
			// window (never imported) counts to its real end.
			v.ResetAfter = wholeSecondsToEnd(start, v.Window)
		}
	}
}

// metricKeyKept reports whether envoyproxy/ratelimit's GetLimit keeps
// the rate_limit (and so its metadata) of p, whose value_to_metric
// (RLS.ValueToMetric) is known, for a descriptor of entries: whether its
// value_to_metric key, built entry by entry as the descriptor was found,
// is the limit's own key, each pattern's KEY_VALUE (Joined). An entry
// found by its KEY_VALUE adds it; one found through a wildcard adds its
// key and, with value_to_metric, its value, else the wildcard less the
// entry's "KEY_"; one found by its bare key adds the key and, with
// value_to_metric, its value. So a value_to_metric entry with a value
// found by a bare key or a wildcard drops the metadata (and, with lookup
// = "joined", a wildcard of a shorter key than the entry's).
func metricKeyKept(p *policy.Policy, entries []policy.DescriptorEntry) bool {
	pats := p.Match.Descriptor
	if len(pats) != len(entries) {
		return true
	}
	for i, pat := range pats {
		e := entries[i]
		full, parts := pat.Joined()
		kv := e.Key + "_" + e.Value
		toMetric := slices.Contains(p.RLS.ValueToMetric, i)
		var v string
		switch {
		case kv == full:
			v = e.Value
		case toMetric:
			v = e.Value
		case parts != nil && config.JoinedMatch(parts, kv):
			v = strings.TrimPrefix(full, e.Key+"_")
		}
		seg := e.Key
		if v != "" {
			seg += "_" + v
		}
		if seg != full {
			return false
		}
	}
	return true
}

// wholeSecondsToEnd is envoyproxy/ratelimit's duration_until_reset of a
// window of length w at now: from the current whole second (Unix time)
// to the window's end, in whole seconds; for a window not of whole
// seconds, the time to its end.
func wholeSecondsToEnd(now time.Time, w time.Duration) time.Duration {
	if w < time.Second || w%time.Second != 0 {
		return windowEnd(now, w).Sub(now)
	}
	sec := int64(w / time.Second)
	return time.Duration(sec-now.Unix()%sec) * time.Second
}

// replaced reports whether a limit of p has one of the names replacing
// holds.
func replaced(p *policy.Policy, replacing []string) bool {
	for _, n := range p.RLS.Names {
		if n == "" {
			continue
		}
		for _, r := range replacing {
			if n == r {
				return true
			}
		}
	}
	return false
}

// decideDescriptor is decide for one RLS descriptor of o.p, a policy
// with limits: its keys (descriptor:KEY parts, of the entries as p's
// patterns see them when joined: [rls] lookup = "joined"), the penalty
// box, the limits. A policy with a limit of 0, or with compat a policy
// of fixed windows, has them asked by askRLS.
func (h *Handler) decideDescriptor(ctx context.Context, entries []policy.DescriptorEntry, now time.Time, compat, joined bool, o *ruling) {
	p := o.p
	seen := entries
	if joined {
		var buf [8]policy.DescriptorEntry
		seen = policy.SeenEntries(p, entries, buf[:])
	}
	if p.OwnKeys {
		for i, lk := range p.LimitKeys {
			o.keys[i] = descriptorKey(lk.Parts, seen)
		}
	} else {
		o.key = descriptorKey(p.Key, seen)
	}
	o.rls = p.RLS.Zero != nil || compat && o.ps.counters(p) != nil
	o.compat, o.entries = compat, entries
	if h.inPenaltyBox(now, o) {
		return
	}
	// An RLS policy has no limit that reads the answer (config refuses
	// them), so the request is not needed.
	h.applyLimits(ctx, nil, now, o)
}

// DescriptorKeys sets keys[i] to the client key limit i of RLS policy p
// counts a descriptor of entries under (entries in the order of p's
// patterns), as DecideDescriptors builds them: the same key for every
// limit unless p's limits have their own. len(keys) must be at least
// len(p.Limits). Envoy's rate limit quota service (RLQS) keys the leases
// of a bucket with it, so that they count against the state RLS calls
// and the bucket's other Envoys count against.
func DescriptorKeys(p *policy.Policy, entries []policy.DescriptorEntry, keys []string) {
	if p.OwnKeys {
		for i, lk := range p.LimitKeys {
			keys[i] = descriptorKey(lk.Parts, entries)
		}
		return
	}
	k := descriptorKey(p.Key, entries)
	for i := range p.Limits {
		keys[i] = k
	}
}

// descriptorKey builds the key of descriptor:KEY parts from entries: a
// "descriptor:KEY#N" part is the value of the Nth entry of KEY, and the
// nth "descriptor:KEY" part of a KEY the value of its nth entry, as
// appendPart writes a request's key parts (config guarantees every
// part's entry is there).
func descriptorKey(parts []config.KeyPart, entries []policy.DescriptorEntry) string {
	var stack [128]byte
	b := stack[:0]
	for j, part := range parts {
		nth := 0
		if part.Nth > 0 {
			nth = part.Nth - 1
		} else {
			for _, q := range parts[:j] {
				if q.Name == part.Name && q.Nth == 0 {
					nth++
				}
			}
		}
		for _, e := range entries {
			if e.Key != part.Name {
				continue
			}
			if nth == 0 {
				b = clientkey.AppendPart(b, []byte(e.Value))
				break
			}
			nth--
		}
	}
	return string(b)
}

// maxLoggedValue bounds each descriptor value in the access log's path.
const maxLoggedValue = 256

// descriptorRequest is the request the access log shows for a
// descriptor: method RLS, the domain as host, the entries as the path.
func descriptorRequest(domain string, entries []policy.DescriptorEntry) *http.Request {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		v := e.Value
		if len(v) > maxLoggedValue {
			v = v[:maxLoggedValue]
		}
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(v)
	}
	return &http.Request{Method: RLSMethod, Host: domain, URL: &url.URL{Path: b.String()}}
}
