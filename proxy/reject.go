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

// rejection is what every rejection of a policy carries whatever the
// request: built once per policy set (Swap), so that a rejection sets its
// fixed header fields from slices shared read-only by every answer (the
// header map's values; net/http only reads them, and each has capacity 1,
// so that an Add copies rather than writes into them).
type rejection struct {
	body          []byte
	contentType   []string
	contentLength []string
	// fixed is the fixed fields' lines as a head carries them, sorted
	// (Cache-Control, Content-Length, Content-Type), for a server that
	// takes a rejection's fields written out (wholeWriter); "" when one
	// of them could not be written so (writeWhole).
	fixed string
	// fields are the policy's rate-limit fields on a rejection, when
	// they can be built once (rejectionFields); nil otherwise.
	fields *rejectFields
}

// cacheControlNoStore is every rejection's Cache-Control.
var cacheControlNoStore = []string{"no-store"}

// newRejection builds p's rejection under mode's rate-limit fields.
func newRejection(p *policy.Policy, mode config.HeadersMode) *rejection {
	body := rejectionBody(p)
	rj := &rejection{
		body:          body,
		contentType:   []string{p.Reject.ContentType},
		contentLength: []string{strconv.Itoa(len(body))},
		fields:        newRejectFields(p, mode),
	}
	if plainValue(p.Reject.ContentType) && len(body) <= maxWholeBody {
		rj.fixed = "Cache-Control: " + cacheControlNoStore[0] + "\r\nContent-Length: " + rj.contentLength[0] +
			"\r\nContent-Type: " + p.Reject.ContentType + "\r\n"
	}
	return rj
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

// smallSeconds are the values 0 to len-1 as header field values, each a
// slice of capacity 1 of one shared array: Retry-After and the RateLimit
// field's t without formatting or allocating.
var smallSeconds = func() []string {
	v := make([]string, 3600)
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

// secondsField returns s as a header field's values, shared read-only
// when s is small.
func secondsField(s int64) []string {
	if s >= 0 && s < int64(len(smallSeconds)) {
		return smallSeconds[s : s+1 : s+1]
	}
	return []string{strconv.FormatInt(s, 10)}
}

// reject answers a rejected request: the policy's status (429), Retry-After
// in whole seconds rounded up, and its body (see rejectionBody), with the
// fields rj holds built once.
func reject(w http.ResponseWriter, p *policy.Policy, d limiter.Decision, rj *rejection) {
	if rec, ok := w.(*recorder); ok && rec.grpc {
		rec.grpcStatus = p.Reject.Status
		writeGRPCRejection(w, p, d)
		return
	}
	h := w.Header()
	h["Retry-After"] = secondsField(retryAfter(d))
	h["Content-Type"] = rj.contentType
	h["Content-Length"] = rj.contentLength
	h["Cache-Control"] = cacheControlNoStore
	if rec, ok := w.(*recorder); ok && rj.fixed != "" && rec.writeWhole(p.Reject.Status, rj) {
		return
	}
	w.WriteHeader(p.Reject.Status)
	w.Write(rj.body)
}

// wholeWriter is a ResponseWriter that writes a whole answer from its
// header fields written out: internal/h1's front (its WriteWhole, which
// documents the fields' form). A rejection then skips the front's pass
// over the header map (its iteration, sort and checks of each field):
// its fields are few, their order is known, and most are fixed.
type wholeWriter interface {
	WriteWhole(code int, fields [10]string, body []byte) bool
}

// maxWholeBody is the largest rejection body written through a
// wholeWriter: the front's bufferBeforeChunking, below which Write
// buffers a body whole (the front declines an answer larger than its
// buffer, so nothing goes out, nor fails, before the handler returns).
const maxWholeBody = 2048

// writeWhole writes rejection rj of status code to a wholeWriter: the
// fields reject set (rj.fixed's and Retry-After), the request id
// (stampHeader), and RateLimit-Policy and RateLimit if inform set them,
// sorted by name as net/http writes them. It reports false, having
// written nothing, when r writes to another server or the header map
// holds any other field, or a value that net/http would change (CR, LF,
// or space to trim): WriteHeader then writes the same answer from the
// map.
func (r *recorder) writeWhole(code int, rj *rejection) bool {
	ww, ok := r.ResponseWriter.(wholeWriter)
	if !ok || r.status != 0 {
		return false
	}
	r.stampHeader()
	h := r.Header()
	var f [10]string
	f[0] = rj.fixed
	n := 4 // rj.fixed's three and Retry-After
	rl, hasRL := h["Ratelimit"]
	pol, hasPol := h["Ratelimit-Policy"]
	switch {
	case hasRL && hasPol:
		if len(rl) != 1 || len(pol) != 1 || !plainValue(rl[0]) || !plainValue(pol[0]) {
			return false
		}
		f[1], f[2], f[3], f[4], f[5] = "Ratelimit: ", rl[0], "\r\nRatelimit-Policy: ", pol[0], "\r\nRetry-After: "
		n += 2
	case hasRL || hasPol:
		return false
	default:
		f[5] = "Retry-After: "
	}
	ra := h["Retry-After"]
	if len(ra) != 1 || !plainValue(ra[0]) {
		return false
	}
	f[6] = ra[0]
	f[7] = "\r\n"
	if r.id != nil {
		id := r.id[0]
		if !plainValue(id) {
			return false
		}
		f[7], f[8], f[9] = "\r\nX-Request-Id: ", id, "\r\n"
		n++
	}
	if len(h) != n || len(rj.body) > maxWholeBody {
		return false
	}
	r.renewDeadline()
	if !ww.WriteWhole(code, f, rj.body) {
		return false
	}
	r.status, r.head = code, code
	if r.clock != nil {
		r.headerAt = r.clock()
	}
	if !r.headReq {
		r.sent += int64(len(rj.body))
	}
	return true
}

// plainValue reports whether net/http writes s as a field's value
// unchanged: no CR or LF (written as spaces), and no space, tab, CR or LF
// at either end (trimmed).
func plainValue(s string) bool {
	if s != "" && (isOWS(s[0]) || isOWS(s[len(s)-1])) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' || s[i] == '\n' {
			return false
		}
	}
	return true
}

// isOWS reports whether textproto.TrimString trims c.
func isOWS(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// setFields writes the rate-limit fields of rejection d from those rj
// holds built, if it does (rejectFields.set); nil holds none.
func (rj *rejection) setFields(h http.Header, d limiter.Decision) bool {
	return rj != nil && rj.fields.set(h, d)
}
