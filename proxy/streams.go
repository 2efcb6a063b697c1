package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy/config"
)

// streamRetryAfter is the Retry-After of a refused stream, in seconds:
// one of the key's streams must end first, which the proxy cannot foresee.
const streamRetryAfter = "1"

// streamCounts counts the requests streaming their bodies to each upstream,
// per client key. An entry lives while its key streams, so the map holds
// at most as many entries as there are streamed requests in flight. It
// lives in the Handler, not in an upstream's pool, so that a reload never
// resets what a client holds. Safe for concurrent use; the zero value is
// ready.
type streamCounts struct {
	mu sync.Mutex
	n  map[streamKey]int
}

type streamKey struct{ upstream, key string }

// acquire takes one of limit places for k; ok is false when all are taken.
// release gives it back, once.
func (s *streamCounts) acquire(k streamKey, limit int) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[k] >= limit {
		return nil, false
	}
	if s.n == nil {
		s.n = map[streamKey]int{}
	}
	s.n[k]++
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.n[k]--; s.n[k] <= 0 {
			delete(s.n, k)
		}
	}), true
}

// admitStream bounds the requests of one client key whose bodies stream
// to the upstream u at once. A request that buffers, or has no body, is
// not counted. The key is the policy's client key (record.key); a key that
// names no client — none (key = [], a key part skipped), a limit's skip
// marker, or one with a part missing under on_missing = "shared", which
// every client lacking that part shares — is counted with its client's
// address, so that one client cannot take the places of all the others
// (the bound is never a global one). Beyond the bound the request is
// refused here — 429 with Retry-After, RESOURCE_EXHAUSTED for a gRPC call
// — and ok is false.
func (h *Handler) admitStream(x *exchange, u *config.Upstream, lim bodyLimits) (release func(), ok bool) {
	r, w, s := x.req.r, &x.w, x.req.srv
	if lim.buffer || !hasBody(r) {
		return func() {}, true
	}
	key := "key " + x.rec.key
	if x.rec.key == "" || x.rec.key == limiter.SkipKey || !completeKey(x.rec.key) {
		if c := &x.req.client; c.OK {
			key += " addr " + c.Addr.String()
		}
	}
	release, ok = h.streams.acquire(streamKey{u.Name, key}, u.MaxStreamsPerKey)
	if ok {
		return release, true
	}
	x.rec.streamRefused = true
	readRefusedBody(w, r, s.ClientBodyTimeout)
	w.Header().Set("Retry-After", streamRetryAfter)
	const detail = "this client streams max_streams_per_key request bodies to the upstream already; retry when one ends"
	if w.grpc {
		w.grpcStatus = http.StatusTooManyRequests
		w.Header().Set("Grpc-Retry-Pushback-Ms", streamRetryAfter+"000")
		writeGRPCStatus(w, grpcResourceExhausted, "Too Many Requests: "+detail)
		return nil, false
	}
	writeProblem(w, http.StatusTooManyRequests, problem{Type: "about:blank", Title: http.StatusText(http.StatusTooManyRequests),
		Status: http.StatusTooManyRequests, Detail: detail})
	return nil, false
}

// completeKey reports whether key, as keyOf builds it, has every part
// present: only length-prefixed values, no "-;" that a missing part
// writes under on_missing = "shared" (an "ip=" key of on_missing = "ip"
// names its client too).
func completeKey(key string) bool {
	if strings.HasPrefix(key, "ip=") {
		return true
	}
	for key != "" {
		i := strings.IndexByte(key, ':')
		if i <= 0 {
			return false
		}
		n, err := strconv.Atoi(key[:i])
		if err != nil || n < 0 || i+1+n >= len(key) || key[i+1+n] != ';' {
			return false
		}
		key = key[i+2+n:]
	}
	return true
}
