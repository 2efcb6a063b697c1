package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
)

// gRPC-aware answers (docs/responses.md): a gRPC client reads the status
// of a call from grpc-status, not from the HTTP status, and turns a bare
// HTTP error into UNAVAILABLE, which standard retry policies retry — one
// rejected call would become five. So what limitproxy answers itself to a
// gRPC request is a trailers-only response: HTTP 200, Content-Type
// application/grpc, grpc-status and grpc-message in the one header block,
// no body.

// gRPC status codes (google.golang.org/grpc/codes) limitproxy answers with.
const (
	grpcUnknown           = 2
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// isGRPC reports whether r is a gRPC call: HTTP/2, and Content-Type
// application/grpc, alone or with a +codec suffix or parameters (not
// gRPC-Web, which has its own framing). gRPC runs over HTTP/2 only: an
// HTTP/1.1 request that merely carries the label is an ordinary request,
// answered in HTTP. The label decides only how limitproxy answers, never
// whether the body is buffered: that is the upstream's request_buffering
// (a slow client must not turn buffering off by naming a content type).
func isGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	ct := r.Header.Get("Content-Type")
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// grpcCode maps the HTTP status of an answer of limitproxy's own to the
// gRPC code a gRPC client gets instead, after gRPC's HTTP-to-gRPC mapping
// (doc/http-grpc-status-mapping.md): 502, 503 and 504 — the upstream
// unreachable, failing or slow, or the proxy draining — are UNAVAILABLE,
// which clients may retry; a body over max_body_bytes is
// RESOURCE_EXHAUSTED (as gRPC's own message-size limit); no policy for the
// method is UNIMPLEMENTED. (A rate-limit rejection is RESOURCE_EXHAUSTED
// whatever its policy's status: see writeGRPCRejection.)
func grpcCode(status int) int {
	switch status {
	case http.StatusBadRequest:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return grpcUnimplemented
	case http.StatusRequestTimeout:
		return grpcDeadlineExceeded
	case http.StatusRequestEntityTooLarge:
		return grpcResourceExhausted
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return grpcUnavailable
	}
	return grpcUnknown
}

// writeGRPCStatus answers a gRPC call with code and msg, trailers-only,
// with whatever header w holds already (the RateLimit fields become
// metadata).
func writeGRPCStatus(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(code))
	if msg != "" {
		h.Set("Grpc-Message", grpcMessage(msg))
	}
	w.WriteHeader(http.StatusOK)
}

// writeGRPCRejection answers a gRPC call a policy rejected:
// RESOURCE_EXHAUSTED, the quota-exceeded message naming the policy, and
// grpc-retry-pushback-ms, the Retry-After in milliseconds rounded up (gRFC
// A6: a client's retry policy waits that long, and a negative value — a
// request no wait can admit — asks it not to retry at all).
func writeGRPCRejection(w http.ResponseWriter, p *policy.Policy, d limiter.Decision) {
	pushback := "-1"
	if d.RetryAfter < limiter.Never/2 {
		pushback = strconv.FormatInt(int64((max(d.RetryAfter, 0)+time.Millisecond-1)/time.Millisecond), 10)
	}
	w.Header().Set("Grpc-Retry-Pushback-Ms", pushback)
	writeGRPCStatus(w, grpcResourceExhausted, "quota exceeded: policy "+p.Name)
}

// FlushError sends what the response holds to the client. ReverseProxy
// flushes a streamed response (every gRPC response, server-sent events:
// those without a Content-Length) after each write, through
// http.ResponseController, which finds this method before it unwraps the
// recorder.
//
// On HTTP/2 it then lifts the send_timeout deadline: there a write
// deadline resets the stream when it passes, whether a write is pending or
// not, so a stream waiting longer than send_timeout for its upstream's
// next message (a gRPC health Watch, an event stream) would be cut. The
// next write sets the deadline again (renewDeadline), so send_timeout
// still bounds a message the client does not take. (On HTTP/1 a deadline
// passing with no write pending does nothing.)
func (r *recorder) FlushError() error {
	err := http.NewResponseController(r.ResponseWriter).Flush()
	if r.h2 && err == nil && r.dl != nil && r.sendTimeout > 0 {
		r.dl.SetWriteDeadline(time.Time{})
		r.renewed = time.Time{}
	}
	return err
}

// grpcMessage percent-encodes msg as grpc-message requires: every byte
// outside printable ASCII, and '%'.
func grpcMessage(msg string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			if b != nil {
				b = append(b, c)
			}
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(msg)+8), msg[:i]...)
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	if b == nil {
		return msg
	}
	return string(b)
}
