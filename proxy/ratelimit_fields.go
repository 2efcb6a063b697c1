package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// The rate-limit fields (docs/responses.md): in "draft" mode the IETF
// httpapi RateLimit draft-11's RateLimit-Policy, one quota policy item
// per limit of the policy, named as config.Policy.LimitName says and the
// same on every response of the policy to a client, and RateLimit, the
// service limit of the most pressing of them; in "legacy" mode
// X-RateLimit-Limit, -Remaining and -Reset for that one limit.
//
// Field names are case-insensitive: Go writes these as "Ratelimit-Policy"
// and "Ratelimit", HTTP/2 in lower case. Names are restricted (by the
// configuration's validation) to characters a Structured Field String
// holds as they are.

// setRateLimitHeaders writes the fields of mode for a request of p that
// its limits decided as d: every limit of p in RateLimit-Policy, and d's
// limit (the most restrictive) in RateLimit and the legacy fields. p is
// the policy as the client's per-key override, if any, changes it.
func setRateLimitHeaders(h http.Header, mode config.HeadersMode, p *policy.Policy, d limiter.Decision, now time.Time) {
	if mode == config.HeadersNone || d.Index < 0 || int(d.Index) >= len(p.Limits) {
		return
	}
	if mode == config.HeadersDraft || mode == config.HeadersBoth {
		// t, the effective window (draft-11 §4.1.2): the seconds until
		// additional quota is available, within which no more than r can
		// be used; never more than Retry-After on a rejection (§6).
		next := ceilSeconds(d.Next)
		if !d.Allowed {
			next = min(next, retryAfter(d))
		}
		var buf [256]byte
		b := appendQuotaPolicies(buf[:0], p)
		policyEnd := len(b)
		b = appendServiceLimit(b, p, int(d.Index), d.Remaining, next)
		setDraftFields(h, string(b), policyEnd)
	}
	if mode == config.HeadersLegacy || mode == config.HeadersBoth {
		setLegacyFields(h, d.Limit, d.Remaining, ceilSeconds(d.ResetAt.Sub(now)))
	}
}

// setBanHeaders writes the fields of mode on the answer to a request of p
// refused by ban b (d is the decision whose offence began the ban, or nil
// for a key already banned): RateLimit-Policy as on every response of p,
// and every limit of p exhausted until the ban ends — r=0, t the seconds
// until then (for the limit that rejected the offence, until it would
// admit the request, if that is later), never later than Retry-After
// (banRetryAfter). The legacy fields give
// remaining 0 and a reset no earlier than the ban's end.
func setBanHeaders(h http.Header, mode config.HeadersMode, p *policy.Policy, d *limiter.Decision, b perkey.Ban, now time.Time) {
	if mode == config.HeadersNone || len(p.Limits) == 0 {
		return
	}
	until := ceilSeconds(b.Until.Sub(now))
	if mode == config.HeadersDraft || mode == config.HeadersBoth {
		var buf [256]byte
		bs := appendQuotaPolicies(buf[:0], p)
		policyEnd := len(bs)
		for i := range p.Limits {
			if i > 0 {
				bs = append(bs, ", "...)
			}
			t := until
			if d != nil && !d.Allowed && i == int(d.Index) {
				// The limit that rejected the offence has no more
				// quota before it would admit the request, ban or not.
				t = max(t, min(ceilSeconds(d.Next), retryAfter(*d)))
			}
			bs = appendServiceLimit(bs, p, i, 0, t)
		}
		setDraftFields(h, string(bs), policyEnd)
	}
	if mode == config.HeadersLegacy || mode == config.HeadersBoth {
		i, reset := 0, until
		if d != nil && d.Index >= 0 && int(d.Index) < len(p.Limits) {
			i, reset = int(d.Index), max(until, ceilSeconds(d.ResetAt.Sub(now)))
		}
		q, _ := p.Quota(i) // 0 for a limit of 0
		setLegacyFields(h, q, 0, reset)
	}
}

// banRetryAfter is the Retry-After of an answer refused by ban b, in whole
// seconds: until the ban ends, and, on the answer to the offence that
// began it (d not nil), no earlier than the limit itself would admit the
// request.
func banRetryAfter(d *limiter.Decision, b perkey.Ban, now time.Time) int64 {
	s := ceilSeconds(b.Until.Sub(now))
	if d != nil && !d.Allowed {
		s = max(s, retryAfter(*d))
	}
	return s
}

// appendQuotaPolicies appends the RateLimit-Policy value of p: a quota
// policy item per limit, in the limits' order, with its quota (q) and
// window in seconds (w, rounded up, at least 1). A calendar window's item
// has no w: its periods have no one length (a day of 23 hours, a month of
// 28 days), w is optional (draft-11 §3.1.3), and the field is the same on
// every response of the policy (§3), which the length of the current
// period would not be; t counts to the period's real end.
func appendQuotaPolicies(b []byte, p *policy.Policy) []byte {
	for i := range p.Limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		q, w := p.Quota(i)
		b = strconv.AppendQuote(b, p.LimitName(i))
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, q, 10)
		if cal, _ := p.Limits[i].Calendar(); cal != 0 {
			continue
		}
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(1, ceilSeconds(w)), 10)
	}
	return b
}

// appendServiceLimit appends a RateLimit item: limit i of p, r remaining,
// t seconds until more quota.
func appendServiceLimit(b []byte, p *policy.Policy, i int, r, t int64) []byte {
	b = strconv.AppendQuote(b, p.LimitName(i))
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, r, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, t, 10)
}

// setDraftFields sets RateLimit-Policy to both[:policyEnd] and RateLimit
// to the rest. The two fields share one backing array of values (capacity
// 1 each, so that an Add to either copies rather than overwrites): two
// allocations where Header.Set took six.
func setDraftFields(h http.Header, both string, policyEnd int) {
	vals := make([]string, 2)
	vals[0], vals[1] = both[:policyEnd], both[policyEnd:]
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
}

// setLegacyFields sets X-RateLimit-Limit, -Remaining and -Reset.
func setLegacyFields(h http.Header, limit, remaining, reset int64) {
	h.Set("X-RateLimit-Limit", strconv.FormatInt(limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
}

// quotaView returns the policy whose limits the rate-limit fields of key's
// requests describe: p, or p as key's per-key override changes it (an
// override applies to a policy whose limits all count under its key and
// charge on admission, as the decision applies it).
func (h *Handler) quotaView(ps *policyState, p *policy.Policy, key string) *policy.Policy {
	if h.overrides == nil || p.Limiter == nil || p.OwnKeys || p.Deferred != nil {
		return p
	}
	if _, view, ok := h.overridden(ps, p, key); ok {
		return view
	}
	return p
}

// cachedT bounds the t values whose RateLimit field a rejection finds
// built (rejectFields): a rejection's t is at most its Retry-After, a
// second or a few under most limits.
const cachedT = 16

// rejectFields are a policy's draft rate-limit fields on a rejection by a
// limit with no quota left (r=0) that frees more within cachedT seconds:
// RateLimit-Policy, and each limit's RateLimit for each such t, built once
// per policy set and shared read-only by the answers (each value a slice
// of capacity 1, as secondsField's).
type rejectFields struct {
	policy []string
	limit  [][]string // limit index → t → value
}

// newRejectFields builds p's rejectFields under mode, nil unless mode is
// "draft" (the other modes set their fields as setRateLimitHeaders does).
func newRejectFields(p *policy.Policy, mode config.HeadersMode) *rejectFields {
	if mode != config.HeadersDraft || len(p.Limits) == 0 {
		return nil
	}
	f := &rejectFields{policy: []string{string(appendQuotaPolicies(nil, p))}, limit: make([][]string, len(p.Limits))}
	for i := range p.Limits {
		v := make([]string, cachedT)
		for t := range v {
			v[t] = string(appendServiceLimit(nil, p, i, 0, int64(t)))
		}
		f.limit[i] = v
	}
	return f
}

// set writes what setRateLimitHeaders would for a rejection d of the
// policy f was built for, and reports true, when f holds it built;
// otherwise it writes nothing and reports false.
func (f *rejectFields) set(h http.Header, d limiter.Decision) bool {
	if f == nil || d.Allowed || d.Remaining != 0 || d.Index < 0 || int(d.Index) >= len(f.limit) {
		return false
	}
	t := min(ceilSeconds(d.Next), retryAfter(d))
	if t >= cachedT {
		return false
	}
	h["Ratelimit-Policy"] = f.policy
	h["Ratelimit"] = f.limit[d.Index][t : t+1 : t+1]
	return true
}
