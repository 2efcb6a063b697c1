package proxy

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
	// CheckOnly asks what the limits would decide for one hit without
	// counting it (Envoy's descriptor hits_addend of 0).
	CheckOnly bool
}

// DescriptorVerdict is what DecideDescriptors decided about one
// descriptor.
type DescriptorVerdict struct {
	// Policy is the RLS policy that matched; "" when none did (Decision
	// Unmatched).
	Policy string
	// Decision is as the access log names it: Allowed, Queued, Rejected,
	// ShadowRejected, Banned, ShadowBanned or Unmatched.
	Decision Decision
	// Over reports that the descriptor is over its limit (OVER_LIMIT):
	// rejected by a limit, or banned.
	Over bool
	// Limited reports that the policy's limits decided: LimitName, Quota,
	// Window, Remaining and ResetAfter describe the most pressing limit.
	Limited    bool
	LimitName  string
	Quota      int64            // the limit's quota per Window
	Window     time.Duration    // the limit's period (a calendar window's nominal length)
	Calendar   limiter.Calendar // a calendar window's unit, whose periods Window does not say; 0 for none
	Remaining  int64            // requests of cost 1 it admits now; 0 when Over
	ResetAfter time.Duration    // until the limit is back to full
}

// rateLimitFields reports whether a response header (canonical name) is
// one of the fields an RLS answer carries: the RateLimit fields of any
// draft or legacy form, and Retry-After.
func rateLimitFields(name string) bool {
	return strings.HasPrefix(name, "Ratelimit") || strings.HasPrefix(name, "X-Ratelimit") || name == "Retry-After"
}

// DecideDescriptors decides the descriptors of one Envoy rate limit call
// of domain, each on its own against the first RLS policy of domain that
// matches it, as ServeHTTP decides a request (the same decide steps:
// penalty box, per-key overrides, limits, shadow mode, the store's
// on_error), and records each decision as a proxied request's: the
// metrics, the top offenders, an access log line. It returns a verdict
// per descriptor, and the response fields of the call: the RateLimit
// fields of the first descriptor over its limit, else of the allowed one
// with the fewest remaining; and Retry-After when one is over.
//
// A descriptor a leaky bucket queues is answered when its turn comes
// (unless another descriptor is over, when it leaves the queue at once):
// err is ctx's error when the caller left before, or an error when
// CloseQueues was called; the verdicts are then not to be answered.
// Safe for concurrent use.
func (h *Handler) DecideDescriptors(ctx context.Context, domain string, ds []Descriptor) ([]DescriptorVerdict, http.Header, error) {
	start := h.now()
	snap := h.snap.Load()
	// Every descriptor's ruling, exchange, wait and keys, and the
	// verdicts: one allocation for a call of one descriptor (most), three
	// for more.
	type decided struct {
		o    ruling
		x    exchange
		wait time.Duration
	}
	var (
		out  []DescriptorVerdict
		all  []decided
		keys []string
	)
	if len(ds) == 1 {
		one := &struct {
			out  [1]DescriptorVerdict
			all  [1]decided
			keys [limiter.MaxLimits]string
		}{}
		out, all, keys = one.out[:], one.all[:], one.keys[:]
	} else {
		out = make([]DescriptorVerdict, len(ds))
		all = make([]decided, len(ds))
		keys = make([]string, len(ds)*limiter.MaxLimits)
	}
	over := false
	for i := range ds {
		a := &all[i]
		a.o.keys = keys[i*limiter.MaxLimits : (i+1)*limiter.MaxLimits : (i+1)*limiter.MaxLimits]
		a.o.n, a.o.peek = max(ds[i].Cost, 1), ds[i].CheckOnly
		a.x.w.ResponseWriter = headerWriter{}
		a.x.req.start, a.x.req.snap, a.x.req.srv = start, snap, &snap.set.Config.Server
		h.decideDescriptor(ctx, snap, domain, ds[i].Entries, start, &a.o)
		h.inform(&a.x.w, snap, start, &a.o)
		if a.o.reply != noReply {
			h.answer(&a.x, &a.o)
		}
		over = over || a.o.reply != noReply
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
		v.Decision, v.Over = o.decision, o.reply != noReply
		if o.p != nil {
			v.Policy = o.p.Name
		}
		if o.limited && o.d.Index >= 0 && o.hp != nil && int(o.d.Index) < len(o.hp.Limits) {
			v.Limited = true
			v.LimitName = o.hp.LimitName(int(o.d.Index))
			v.Quota, v.Window = o.hp.Limits[o.d.Index].Quota()
			v.Calendar, _ = o.hp.Limits[o.d.Index].Calendar()
			v.Remaining = max(o.d.Remaining, 0)
			if !o.d.Allowed {
				v.Remaining = 0
			}
			v.ResetAfter = max(o.d.ResetAt.Sub(start), 0)
		}
		status := a.x.w.status
		if status == 0 {
			status = http.StatusOK
		}
		h.metrics.decision(v.Policy, v.Decision)
		if h.acc != nil {
			// The request the line shows is built only for a log, in an
			// exchange of its own: a descriptor sends no body.
			lx := &exchange{req: request{r: descriptorRequest(domain, ds[i].Entries), start: start}, w: recorder{status: status}}
			h.logAccess(lx, o.p, v.Decision, a.wait, nil)
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
	if best >= 0 {
		for name, vs := range all[best].x.w.Header() {
			if rateLimitFields(name) {
				fields[name] = vs
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

// decideDescriptor is decide for one RLS descriptor: its policy, its
// keys (descriptor:KEY parts), the penalty box, the limits.
func (h *Handler) decideDescriptor(ctx context.Context, snap *snapshot, domain string, entries []policy.DescriptorEntry, now time.Time, o *ruling) {
	p, ok := snap.set.MatchDescriptor(domain, entries)
	if !ok {
		o.decision = Unmatched
		return
	}
	o.p, o.hp, o.ps = p, p, snap.policies[p]
	if p.OwnKeys {
		for i, lk := range p.LimitKeys {
			o.keys[i] = descriptorKey(lk.Parts, entries)
		}
	} else {
		o.key = descriptorKey(p.Key, entries)
	}
	if h.inPenaltyBox(now, o) {
		return
	}
	// An RLS policy has no limit that reads the answer (config refuses
	// them), so the request is not needed.
	h.applyLimits(ctx, nil, now, o)
}

// descriptorKey builds the key of descriptor:KEY parts from entries: each
// part the value of the first entry of its key, as appendPart writes a
// request's key parts (config guarantees every part's entry is there).
func descriptorKey(parts []config.KeyPart, entries []policy.DescriptorEntry) string {
	var stack [128]byte
	b := stack[:0]
	for _, part := range parts {
		for _, e := range entries {
			if e.Key == part.Name {
				b = clientkey.AppendPart(b, []byte(e.Value))
				break
			}
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
