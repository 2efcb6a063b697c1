package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// problem is an RFC 9457 problem details body.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// quotaExceeded is the problem type of the IETF RateLimit draft.
const quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

func writeProblem(w http.ResponseWriter, status int, p problem) {
	if rec, ok := w.(*recorder); ok && rec.grpc {
		msg := p.Title
		if p.Detail != "" {
			msg += ": " + p.Detail
		}
		rec.grpcStatus = status
		writeGRPCStatus(w, grpcCode(status), msg)
		return
	}
	body, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// ceilSeconds rounds d up to whole seconds, as Retry-After and the reset
// fields are given.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d >= limiter.Never/2 {
		return int64(limiter.Never / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfter is a rejection's Retry-After: whole seconds, rounded up, at
// least 1.
func retryAfter(d limiter.Decision) int64 { return max(1, ceilSeconds(d.RetryAfter)) }

// setRateLimitHeaders writes docs/responses.md's fields for the most restrictive limit
// of d, per mode: "draft" (IETF httpapi draft-10 RateLimit-Policy and
// RateLimit, Structured Field lists), "legacy" (X-RateLimit-*), "both" or
// "none".
func setRateLimitHeaders(h http.Header, mode config.HeadersMode, p *policy.Policy, d limiter.Decision, now time.Time) {
	if mode == config.HeadersNone || d.Index < 0 || int(d.Index) >= len(p.Limits) {
		return
	}
	if mode == config.HeadersDraft || mode == config.HeadersBoth {
		// t: draft-10's seconds until additional quota is available, never
		// more than Retry-After on a rejection.
		next := ceilSeconds(d.Next)
		if !d.Allowed {
			next = min(next, retryAfter(d))
		}
		_, window := p.Limits[d.Index].Quota()
		// Policy names are restricted to characters a Structured Field
		// string holds as they are. Field names are case-insensitive: Go
		// writes these as "Ratelimit-Policy" and "Ratelimit", HTTP/2 in
		// lower case.
		// Both values are built in one buffer and become one string; the
		// two fields share one backing array of values (capacity 1 each,
		// so that an Add to either copies rather than overwrites): two
		// allocations where Header.Set took six.
		var buf [192]byte
		b := strconv.AppendQuote(buf[:0], p.Name)
		n := len(b)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(1, ceilSeconds(window)), 10)
		policyEnd := len(b)
		b = append(b, b[:n]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, next, 10)
		both := string(b)
		vals := make([]string, 2)
		vals[0], vals[1] = both[:policyEnd], both[policyEnd:]
		h["Ratelimit-Policy"] = vals[0:1:1]
		h["Ratelimit"] = vals[1:2:2]
	}
	if mode == config.HeadersLegacy || mode == config.HeadersBoth {
		reset := ceilSeconds(d.ResetAt.Sub(now))
		h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
}

// rejectionBody returns what a policy's rejections carry: its
// [policy.reject] body, or docs/responses.md's problem+json, which is the same for
// every rejection of the policy and so is built once per policy set.
func rejectionBody(p *policy.Policy) []byte {
	if p.Reject.Body != "" {
		return []byte(p.Reject.Body)
	}
	body, _ := json.Marshal(problem{
		Type:             quotaExceeded,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           p.Reject.Status,
		ViolatedPolicies: []string{p.Name},
	})
	return append(body, '\n')
}

// reject answers a rejected request: the policy's status (429), Retry-After
// in whole seconds rounded up, and its body (see rejectionBody).
func reject(w http.ResponseWriter, p *policy.Policy, d limiter.Decision, body []byte) {
	if rec, ok := w.(*recorder); ok && rec.grpc {
		rec.grpcStatus = p.Reject.Status
		writeGRPCRejection(w, p, d)
		return
	}
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(retryAfter(d), 10))
	h.Set("Content-Type", p.Reject.ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Reject.Status)
	w.Write(body)
}
