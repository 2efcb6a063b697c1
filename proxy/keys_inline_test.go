package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestManyLimitsOwnKeys: a policy of more limits than the recorder holds
// keys for (inlineKeys), each keyed by a query parameter of its own,
// counts each request under each limit's own key: the last limit's key,
// held where match made room for it, refuses a request that repeats it
// alone, only that limit says so, and the top offenders count the
// refusal under that limit's key.
func TestManyLimitsOwnKeys(t *testing.T) {
	const n = inlineKeys + 2
	var src strings.Builder
	fmt.Fprintf(&src, `
[[upstream]]
name = "app"
targets = ["http://%s"]
[[policy]]
name = "many"
upstream = "app"
`, startScriptUpstream(t, nil).ln.Addr())
	for i := range n {
		fmt.Fprintf(&src, `  [[policy.limits]]
  name = "l%d"
  algorithm = "fixed_window"
  key = ["query:k%d"]
  limit = 1
  window = "1h"
`, i, i)
	}
	cfg, err := config.Parse("many.toml", []byte(src.String()))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	h := New(set, Options{Now: func() time.Time { return t0 }})
	query := func(vals ...string) string {
		var q []string
		for i, v := range vals {
			q = append(q, fmt.Sprintf("k%d=%s", i, v))
		}
		return "/x?" + strings.Join(q, "&")
	}
	do := func(target string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		return w
	}
	all := func(v string) []string { return strings.Split(strings.Repeat(v+",", n-1)+v, ",") }
	if w := do(query(all("a")...)); w.Code != http.StatusOK {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	// Every key new but the last limit's, which has counted "a" once.
	last := append(all("b")[:n-1], "a")
	w := do(query(last...))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("the last limit's key repeated: %d, want 429", w.Code)
	}
	if rl := w.Header().Get("RateLimit"); !strings.HasPrefix(rl, fmt.Sprintf(`"l%d";`, n-1)) {
		t.Errorf("RateLimit %q, want the last limit, l%d", rl, n-1)
	}
	// The top offenders count the refusal under the key the refusing
	// limit counted ("a"), not the others' ("b").
	top := h.Top(5)
	if len(top) != 1 || len(top[0].Rejected) != 1 || !strings.Contains(top[0].Rejected[0].Key, "a") || strings.Contains(top[0].Rejected[0].Key, "b") {
		t.Errorf("top offenders %+v, want one rejection, under the last limit's key", top)
	}
	// The limits before it counted nothing for the refused request
	// (a token is taken only when every limit allows): "b" passes.
	if w := do(query(all("b")...)); w.Code != http.StatusOK {
		t.Errorf("fresh keys for every limit: %d, want 200", w.Code)
	}
}
