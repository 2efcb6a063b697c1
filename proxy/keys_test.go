package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/netip"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

// The key room's calls (proxy/internal/clientkey) as the data path makes
// them, for the tests that build keys from a bare request: its client
// resolved as arrive resolves it, its path key read as an exchange reads
// it.

type keyResult = clientkey.Result

const (
	keyOK      = clientkey.OK
	keySkip    = clientkey.Skip
	keyReject  = clientkey.Reject
	keyInvalid = clientkey.Invalid
)

type partState = clientkey.State

const (
	partAbsent    = clientkey.Absent
	partPresent   = clientkey.Present
	partAmbiguous = clientkey.Ambiguous
)

// testKeyRequest is what an exchange of r under s builds keys from.
func testKeyRequest(r *http.Request, s *config.Server) *clientkey.Request {
	x := &exchange{}
	x.req.r, x.req.srv = r, s
	x.req.client = clientkey.Resolve(r, s)
	q := x.keyRequest()
	return &q
}

func keyOf(r *http.Request, parts []config.KeyPart, onMissing config.OnMissing, s *config.Server) (string, keyResult) {
	return clientkey.Of(testKeyRequest(r, s), parts, onMissing)
}

func clientKey(r *http.Request, p *policy.Policy, s *config.Server) (string, keyResult) {
	return clientkey.Policy(testKeyRequest(r, s), p)
}

func limitKeys(r *http.Request, p *policy.Policy, s *config.Server, keys []string) keyResult {
	return clientkey.Limits(testKeyRequest(r, s), p, keys)
}

// keyPart is the value of one key part of r under s, and whether r holds
// it.
func keyPart(r *http.Request, part config.KeyPart, s *config.Server) (string, bool) {
	k, res := keyOf(r, []config.KeyPart{part}, config.MissingSkip, s)
	if res != keyOK {
		return "", false
	}
	vs, _ := clientkey.Parts(k)
	return vs[0], true
}

func clientIP(r *http.Request, s *config.Server) (netip.Addr, bool) {
	c := clientkey.Resolve(r, s)
	return c.Addr, c.OK
}

func resolveClient(r *http.Request, s *config.Server, chain []netip.Addr) (client, peer netip.Addr, hops []netip.Addr, ok bool) {
	c := clientkey.Resolve(r, s)
	return c.Addr, c.Peer, append(chain, c.Hops...), c.OK
}

func setForwarded(pr *httputil.ProxyRequest, s *config.Server) {
	c := clientkey.Resolve(pr.In, s)
	clientkey.SetForwarded(pr, s, &c)
}

var (
	keyedPart     = clientkey.Keyed
	ambiguousPart = clientkey.AmbiguousPart
	pinKeyHeaders = clientkey.Pin
	isTrusted     = clientkey.Trusted
)

// testExchange is the exchange ServeHTTP begins for r (without replay
// fields), answered through w, judged by srv (nil: the set's [server]).
// h may be a zero Handler, when srv is given.
func testExchange(h *Handler, w http.ResponseWriter, r *http.Request, srv *config.Server) *exchange {
	snap := h.snap.Load()
	if srv == nil {
		srv = &snap.set.Config.Server
	}
	x := &exchange{}
	x.req = request{r: r, snap: snap, srv: srv}
	x.w = recorder{ResponseWriter: w}
	x.req.client = clientkey.Resolve(r, srv)
	return x
}

func rewriteParts(r *http.Request, parts []config.KeyPart) {
	clientkey.Rewrite(r, &policy.Policy{Policy: config.Policy{Key: parts}})
}
