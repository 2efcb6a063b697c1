package proxy

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestSwapKeepsCounters: docs/configuration.md's counter rules through the handler, with
// an injected clock. Every Set is compiled against the same store, as a
// reload does.
func TestSwapKeepsCounters(t *testing.T) {
	up := newUpstream(t, nil)
	target, _ := url.Parse(up.URL)
	store := memstore.New(memstore.Options{})
	clock := newClock()
	compile := func(limits string) *policy.Set {
		t.Helper()
		cfg, err := config.Parse("swap.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9"]
[[policy]]
name = "api"
upstream = "app"
`+limits))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Upstreams[0].Targets = []*url.URL{target}
		set, err := policy.Compile(cfg, store, clock.now())
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	bucket := func(burst int) string {
		return strings.ReplaceAll(`  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/m"
  burst = BURST
`, "BURST", strconv.Itoa(burst))
	}
	h := New(compile(bucket(3)), Options{Now: clock.now})
	status := func() (int, string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/x", nil)
		h.ServeHTTP(w, r)
		return w.Code, w.Header().Get("RateLimit")
	}
	for range 3 {
		status()
	}
	if s, _ := status(); s != 429 {
		t.Fatalf("drained: %d", s)
	}
	// Unrelated change: a reject body. Still drained.
	h.Swap(compile(bucket(3) + "  [policy.reject]\n  body = \"slow down\"\n"))
	if s, _ := status(); s != 429 {
		t.Fatalf("after an unrelated change: %d, the bucket was reset", s)
	}
	// Raise the burst: still empty now, but it refills to the new burst.
	h.Swap(compile(bucket(10)))
	if s, _ := status(); s != 429 {
		t.Fatalf("raised burst: %d, want still empty", s)
	}
	clock.advance(time.Hour)
	admitted := 0
	for range 12 {
		if s, _ := status(); s == 200 {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("an hour after raising the burst to 10: %d admitted, want 10", admitted)
	}
	// Change the algorithm: a fresh limit.
	h.Swap(compile(`  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1h"
`))
	if s, rl := status(); s != 200 || !strings.Contains(rl, "r=1") {
		t.Errorf("new algorithm: %d %q, want a fresh window", s, rl)
	}
}

// TestSameUpstreamEveryField: a reload keeps an upstream's pool only when
// its config.Upstream is unchanged, whatever field changed, nested ones
// ([upstream.concurrency] and its classes) included. The test changes
// each field in turn, reaching new fields by reflection: one of a kind it
// cannot change fails it, so a field added to config.Upstream is
// considered here too.
func TestSameUpstreamEveryField(t *testing.T) {
	parse := func() config.Upstream {
		t.Helper()
		cfg, err := config.Parse("up.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9", "http://user:pw@127.0.0.2:9/base?q=1"]
timeout = "3s"
max_fails = 2
allow_trace = true
  [upstream.concurrency]
  limit = 8
  queue = 4
  max_wait = "1s"
  classes = [{ name = "gold", reserve = "20%" }, { name = "default" }]
[[policy]]
name = "p"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Upstreams[0]
	}
	a := parse()
	if !sameUpstream(a, parse()) {
		t.Fatal("two parses of one upstream differ: every reload would drop its pool")
	}
	var changed int
	var walk func(path string, v reflect.Value, rebuild func(func(reflect.Value)) config.Upstream)
	// walk changes, one at a time, each field reachable from v (a field of
	// a copy of a), and checks that sameUpstream notices.
	walk = func(path string, v reflect.Value, rebuild func(func(reflect.Value)) config.Upstream) {
		check := func(what string, change func(reflect.Value)) {
			t.Helper()
			changed++
			if b := rebuild(change); sameUpstream(a, b) {
				t.Errorf("%s %s: sameUpstream still true", path, what)
			}
		}
		switch v.Kind() {
		case reflect.Bool:
			check("flipped", func(f reflect.Value) { f.SetBool(!f.Bool()) })
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			check("+1", func(f reflect.Value) { f.SetInt(f.Int() + 1) })
		case reflect.Float32, reflect.Float64:
			check("+0.5", func(f reflect.Value) { f.SetFloat(f.Float() + 0.5) })
		case reflect.String:
			check("+x", func(f reflect.Value) { f.SetString(f.String() + "x") })
		case reflect.Slice:
			check("one more", func(f reflect.Value) {
				e := reflect.New(f.Type().Elem()).Elem()
				if e.Kind() == reflect.Pointer {
					e = reflect.New(e.Type().Elem())
				}
				f.Set(reflect.Append(f, e))
			})
			for i := range v.Len() {
				walk(fmt.Sprintf("%s[%d]", path, i), v.Index(i), func(change func(reflect.Value)) config.Upstream {
					return rebuild(func(f reflect.Value) {
						s := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
						reflect.Copy(s, f)
						f.Set(s)
						change(s.Index(i))
					})
				})
			}
		case reflect.Pointer:
			if v.IsNil() {
				check("set", func(f reflect.Value) { f.Set(reflect.New(f.Type().Elem())) })
				return
			}
			if !strings.HasSuffix(path, "]") { // a list holds no nil (a target)
				check("nil", func(f reflect.Value) { f.Set(reflect.Zero(f.Type())) })
			}
			walk(path, v.Elem(), func(change func(reflect.Value)) config.Upstream {
				return rebuild(func(f reflect.Value) {
					c := reflect.New(f.Type().Elem())
					c.Elem().Set(f.Elem())
					f.Set(c)
					change(c.Elem())
				})
			})
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[url.Userinfo]() {
				return // url.URL's, compared through its pointer
			}
			for i := range v.NumField() {
				sf := v.Type().Field(i)
				if !sf.IsExported() {
					t.Fatalf("%s.%s: unexported field of %s: teach this test to change it", path, sf.Name, v.Type())
				}
				walk(path+"."+sf.Name, v.Field(i), func(change func(reflect.Value)) config.Upstream {
					return rebuild(func(f reflect.Value) { change(f.Field(i)) })
				})
			}
		default:
			t.Fatalf("%s: a field of kind %s: teach this test to change it", path, v.Kind())
		}
	}
	walk("Upstream", reflect.ValueOf(a), func(change func(reflect.Value)) config.Upstream {
		b := parse()
		change(reflect.ValueOf(&b).Elem())
		return b
	})
	t.Logf("%d changes checked", changed)
}

// TestSwapSnapshotState: a reload builds the top-offender trackers into
// the new snapshot, carrying a policy's over when its name stays and
// dropping a removed one's, and Swaps from many goroutines at once (as a
// file watcher and the admin API may) leave one set in force whose
// snapshot is whole: every policy has its state, and Top lists exactly
// its policies.
func TestSwapSnapshotState(t *testing.T) {
	store := memstore.New(memstore.Options{})
	clock := newClock()
	compile := func(names ...string) *policy.Set {
		t.Helper()
		var b strings.Builder
		b.WriteString("[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:9\"]\n")
		for _, n := range names {
			fmt.Fprintf(&b, "[[policy]]\nname = %q\nupstream = \"app\"\nmatch = { path_prefix = \"/%s/\" }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1h\"\n", n, n)
		}
		cfg, err := config.Parse("swap.toml", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Compile(cfg, store, clock.now())
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	h := New(compile("a", "b"), Options{Now: clock.now})
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/a/x", nil))
	}
	rejected := func(policy string) uint64 {
		for _, l := range h.Top(10) {
			if l.Policy == policy {
				return l.Total
			}
		}
		return 0
	}
	if got := rejected("a"); got != 2 {
		t.Fatalf("before the reload: a rejected %d, want 2", got)
	}
	sets := []*policy.Set{compile("a", "c"), compile("a", "b", "c"), compile("c", "a")}
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := range 20 {
				h.Swap(sets[(i+j)%len(sets)])
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/c/x", nil))
				h.Top(3)
			}
		}()
	}
	for range 8 {
		<-done
	}
	final := compile("a", "c")
	h.Swap(final)
	snap := h.snap.Load()
	if snap.set != final || len(snap.policies) != len(final.Policies) {
		t.Fatalf("the snapshot in force is not the last set's, whole")
	}
	for _, p := range final.Policies {
		if ps := snap.policies[p]; ps == nil || ps.tracker == nil || ps.rejection == nil {
			t.Fatalf("policy %s has no state in the snapshot", p.Name)
		}
	}
	var names []string
	for _, l := range h.Top(10) {
		names = append(names, l.Policy)
	}
	if !reflect.DeepEqual(names, []string{"a", "c"}) {
		t.Errorf("Top lists %q, want [a c]", names)
	}
	if got := rejected("a"); got != 2 {
		t.Errorf("after the reloads: a rejected %d, want the 2 from before (its tracker carried over)", got)
	}
}
