package rls

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// joinedPolicy is an RLS policy of domain "j" as limitproxy import
// -joined-keys writes one: descriptor patterns, a minute's limit (0:
// none, the lookup ends there without one), and keyed by nothing for a
// share_threshold wildcard (shared).
func joinedPolicy(name string, limit int, shared bool, pats ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n[[policy]]\nname = %q\n", name)
	if shared {
		b.WriteString("key = []\n")
	}
	qs := make([]string, len(pats))
	for i, p := range pats {
		qs[i] = strconv.Quote(p)
	}
	fmt.Fprintf(&b, "[policy.match]\nrls_domain = \"j\"\ndescriptor = [%s]\n", strings.Join(qs, ", "))
	if limit > 0 {
		fmt.Fprintf(&b, "[[policy.limits]]\nalgorithm = \"fixed_window\"\nlimit = %d\nwindow = \"1m\"\n", limit)
	}
	return b.String()
}

// joinedPolicies is a tree of the reference's descriptors whose keys and
// values meet through '_': at the top, a=b_c (KEY_VALUE "a_b_c"), the
// wildcard a=b* ("a_b*"), the bare keys a_b and a, m=1 (without
// rate_limit, with m=1.k below it) and m, the share_threshold wildcard
// s=* (its literal copy ahead); below n, x=y_z and the bare key x_y;
// a second policy of m (never found: the first of a path is), the
// share_threshold wildcard p=q* with its copy and p_q=p_q* (whose
// count is the one p=q* counts an entry of key p_q under), and the
// share_threshold wildcard g=*h without a copy.
var joinedPolicies = joinedPolicy("j.a_b_c", 11, false, "a=b_c") +
	joinedPolicy("j.a_b-.literal", 12, false, `a=b\*`) +
	joinedPolicy("j.a_b-", 12, false, "a=b*") +
	joinedPolicy("j.a_b", 13, false, "a_b") +
	joinedPolicy("j.a", 14, false, "a") +
	joinedPolicy("j.m_1.k", 31, false, "m=1", "k") +
	joinedPolicy("j.m", 32, false, "m") +
	joinedPolicy("j.s_-.literal", 5, true, `s=\*`) +
	joinedPolicy("j.s_-", 5, true, "s=*") +
	joinedPolicy("j.n.x_y_z", 21, false, "n", "x=y_z") +
	joinedPolicy("j.n.x_y", 22, false, "n", "x_y") +
	joinedPolicy("j.m-again", 99, false, "m") +
	joinedPolicy("j.p_q-.literal", 6, true, `p=q\*`) +
	joinedPolicy("j.p_q-", 6, true, "p=q*") +
	joinedPolicy("j.p_q_p_q-", 7, false, `p_q=p_q\*`) +
	joinedPolicy("j.g_-h", 8, true, "g=*h")

// TestJoinedLookup: with lookup = "joined" an entry finds its policy as
// the reference's GetLimit finds a descriptor, by the entry's
// KEY_VALUE: first the descriptor of that KEY_VALUE (or bare KEY), of
// whatever key; then the first wildcard that matches it; then the
// descriptor of the entry's bare key; at every level, a limit only at
// the last entry, never back up a level. Each case names what a wrong
// order would find instead.
func TestJoinedLookup(t *testing.T) {
	rt := newRLSTWith(t, compat+"count_keys = \"joined\"\nlookup = \"joined\"\n", joinedPolicies)
	for _, c := range []struct {
		d     string
		limit uint32 // 0: none
		rem   uint32
	}{
		{"a_b=c", 11, 10},   // a=b_c exactly, not the wildcard a=b* (12) nor the bare a_b (13)
		{"a=b_c", 11, 9},    // the same descriptor, and the same count
		{"a_b=x", 12, 11},   // the wildcard a=b*, not the bare a_b (13)
		{"a_b_c=x", 12, 11}, // the wildcard: "a_b_c_x" matches "a_b*"; no bare a_b_c (its own count)
		{"a=b", 13, 12},     // the bare key a_b by KEY_VALUE, not the wildcard a=b* (12)
		{"a=z", 14, 13},     // the bare key a
		{"c=x", 0, 0},       // nothing
		{"a_b=c,z=1", 0, 0}, // a=b_c has nothing below it: no limit, not back up
		{"m=1", 0, 0},       // m=1 has no limit, and the bare m (32) is not tried
		{"m=2", 32, 31},
		{"m=1,k=v", 31, 30},
		{"m=1,q=v", 0, 0},
		{"n,x_y=z", 21, 20}, // below n: x=y_z exactly, not the bare x_y (22)
		{"n,x=y", 22, 21},   // the bare x_y by KEY_VALUE
		{"n,x_y=q", 22, 21}, // the bare x_y by its key (its own count)
		{"n,x=q", 0, 0},
		// s=* shares its threshold: the reference counts an entry matched
		// by it under the wildcard's KEY_VALUE less the entry's "KEY_":
		// "*" for key s, all of "s_*" for key s_t, and so s_t=u and s_t=w
		// together, s_v=u and s=... apart.
		{"s_t=u", 5, 4},
		{"s_t=w", 5, 3},
		{"s_v=u", 5, 4},
		{"s=q", 5, 4},
		{"s=r", 5, 3},
		{"s_t=u", 5, 2},
		// p=q* counts p_q=r under "p_q_" and "p_q*", p_q=p_q*'s count.
		{"p_q=r", 6, 5},
		{"p_q=p_q*", 7, 5},
		{"p_q=z", 6, 3},
		{"p=q1", 6, 5},
		// g=*h found by the bare key g_*h, not through the wildcard (its
		// KEY_VALUE does not end in h): counted by value.
		{"g_*h=v", 8, 7},
		{"g_*h=w", 8, 7},
		{"g=xh", 8, 7},
		{"g=yh", 8, 6},
	} {
		st := bare()
		if c.limit > 0 {
			st = rt.limited(ok, "", c.limit, minute, c.rem)
		}
		rt.expect(c.d, rt.call("j", dsc(c.d)), ok, st)
	}
	// The default lookup compares keys and values apart.
	rt = newRLSTWith(t, compat+"count_keys = \"joined\"\n", joinedPolicies)
	rt.expect("distinct: a_b=c", rt.call("j", dsc("a_b=c")), ok, rt.limited(ok, "", 13, minute, 12))
	rt.expect("distinct: a=b", rt.call("j", dsc("a=b")), ok, rt.limited(ok, "", 12, minute, 11))
}

// metricPolicy is joinedPolicy with metadata {"p": name} and
// value_to_metric entries (nil: the key left out).
func metricPolicy(name string, toMetric []string, pats ...string) string {
	p := joinedPolicy(name, 5, false, pats...)
	extra := fmt.Sprintf("metadata = { p = %q }\n", name)
	if toMetric != nil {
		qs := make([]string, len(toMetric))
		for i, k := range toMetric {
			qs[i] = strconv.Quote(k)
		}
		extra += "value_to_metric = [" + strings.Join(qs, ", ") + "]\n"
	}
	return strings.Replace(p, "[policy.match]", extra+"[policy.match]", 1)
}

// TestValueToMetricMetadata: with value_to_metric, a policy's metadata is
// sent as the reference's GetLimit keeps it: its value_to_metric key of
// the entries (an entry found by its KEY_VALUE: the KEY_VALUE; through
// a wildcard: the key and, with value_to_metric, the value, else the
// wildcard less "KEY_"; by a bare key: the key and, with value_to_metric,
// the value) must be the descriptor's own, so a bare key with
// value_to_metric sends it for an empty value only. Under lookup =
// "joined", a wildcard of a shorter key drops it too.
func TestValueToMetricMetadata(t *testing.T) {
	policies := metricPolicy("bare", []string{"k"}, "k") +
		metricPolicy("exact", []string{"e"}, "e=x") +
		metricPolicy("literal", []string{"w"}, `w=x\*`) +
		metricPolicy("wild", []string{"w"}, "w=x*") +
		metricPolicy("nested", []string{"n#2"}, "n=1", "n") +
		metricPolicy("plain", nil, "p") +
		metricPolicy("longkey", []string{}, "a_b=c*") +
		metricPolicy("joinedwild", []string{}, "a=b*")
	sent := func(rt *rlsT, d string) bool {
		t.Helper()
		r := rt.call("j", dsc(d))
		return r.GetDynamicMetadata().GetFields()["metadata"] != nil
	}
	for _, lookup := range []string{"", "lookup = \"joined\"\n"} {
		rt := newRLSTWith(t, compat+"dynamic_metadata = true\n"+lookup, policies)
		for _, c := range []struct {
			d    string
			want bool
		}{
			{"k=", true}, {"k=v", false},
			{"e=x", true},
			{"w=x*", true}, {"w=xa", false},
			{"n=1,n=", true}, {"n=1,n=z", false},
			{"p=v", true},
			{"a=bc", true},
			{"a=b_cd", true}, // joined: a_b=c*, the wildcard less "a_": "b_c*"
		} {
			if got := sent(rt, c.d); got != c.want {
				t.Errorf("%s%s: metadata sent %v, want %v", lookup, c.d, got, c.want)
			}
		}
	}
	rt := newRLSTWith(t, compat+"dynamic_metadata = true\nlookup = \"joined\"\n", policies)
	if sent(rt, "a_b=x") {
		t.Errorf(`lookup = "joined", a_b=c through a=b*: metadata sent`)
	}
	// Without compatibility, as written.
	rt = newRLSTWith(t, "dynamic_metadata = true\n", policies)
	if !sent(rt, "k=v") {
		t.Error("without compatibility, k=v: metadata not sent")
	}
	if _, err := config.Parse("m.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\n"+metricPolicy("x", []string{"q"}, "k"))); err == nil {
		t.Error("value_to_metric of no entry accepted")
	}
}

// TestJoinedLookupKeys: a policy found through a descriptor of another
// key reads its descriptor:KEY parts from the entries as its patterns
// see them: t_u=x and t_u=y found through t=u* are t=u_x and t=u_y, two
// keys of a policy that counts by its key (two limits: not shaped as a
// rule of the reference, so not counted by descriptor).
func TestJoinedLookupKeys(t *testing.T) {
	two := strings.Replace(joinedPolicy("j.t", 3, false, "t=u*"), "[[policy.limits]]", "[[policy.limits]]\nalgorithm = \"fixed_window\"\nlimit = 9\nwindow = \"1h\"\n[[policy.limits]]", 1)
	rt := newRLSTWith(t, compat+"lookup = \"joined\"\n", two)
	rt.expect("t_u=x", rt.call("j", dsc("t_u=x")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.expect("t_u=x again", rt.call("j", dsc("t_u=x")), ok, rt.limited(ok, "", 3, minute, 1))
	rt.expect("t_u=y: a key of its own", rt.call("j", dsc("t_u=y")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.expect("t=u_x: t_u=x's key", rt.call("j", dsc("t=u_x")), ok, rt.limited(ok, "", 3, minute, 0))
}
