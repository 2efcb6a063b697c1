package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
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
