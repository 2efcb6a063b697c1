package rls

import (
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// countPolicies are RLS policies as limitproxy import writes them: keys
// one and two deep, a share_threshold wildcard with its literal copy
// ahead of the wildcards.
const countPolicies = `
[[policy]]
name = "c.a"
[policy.match]
rls_domain = "c"
descriptor = ["a"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 10
window = "1m"

[[policy]]
name = "c.a.b"
[policy.match]
rls_domain = "c"
descriptor = ["a", "b"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 10
window = "1m"

[[policy]]
name = "c.w_x-.literal"
key = []
[policy.match]
rls_domain = "c"
descriptor = ["w=x\\*"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 3
window = "1m"

[[policy]]
name = "c.w_-"
[policy.match]
rls_domain = "c"
descriptor = ["w=*y*"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 10
window = "1m"

[[policy]]
name = "c.w_x-"
key = []
[policy.match]
rls_domain = "c"
descriptor = ["w=x*"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 3
window = "1m"
`

// TestCountKeys: with compatibility a descriptor's count is named by
// its domain, keys and values, not by the policy that finds it. With
// count_keys = "joined", as the reference names its Redis key (joined
// with '_'), a=x_b_y and (a=x, b=y) are one count, though two policies
// find them; with "distinct" (the default) they are two.
func TestCountKeys(t *testing.T) {
	for _, tc := range []struct {
		keys   string
		second uint32 // limit_remaining of the second descriptor
	}{{`count_keys = "joined"`, 8}, {`count_keys = "distinct"`, 9}, {"", 9}} {
		rt := newRLSTWith(t, compat+tc.keys+"\n", countPolicies)
		rt.expect(tc.keys+": a=x_b_y", rt.call("c", dsc("a=x_b_y")), ok, rt.limited(ok, "", 10, minute, 9))
		rt.expect(tc.keys+": a=x,b=y", rt.call("c", dsc("a=x,b=y")), ok, rt.limited(ok, "", 10, minute, tc.second))
		rt.expect(tc.keys+": a=x,b=z", rt.call("c", dsc("a=x,b=z")), ok, rt.limited(ok, "", 10, minute, 9))
	}
	if _, err := config.Parse("c.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\ncount_keys = \"joined\"\n"+countPolicies)); err == nil {
		t.Error(`count_keys = "joined" without compatibility accepted`)
	}
}

// TestShareThresholdLiteral: a value equal to a share_threshold wildcard
// as written ("x*") finds its literal copy, ahead of the wildcards; the
// copy counts with the wildcard, under the pattern, as the reference
// counts the two under one key. Without compatibility each policy counts
// its own.
func TestShareThresholdLiteral(t *testing.T) {
	rt := newRLSTWith(t, compat, countPolicies)
	rt.expect("x* (the literal copy)", rt.call("c", dsc("w=x*")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.expect("xa (the wildcard x*)", rt.call("c", dsc("w=xa")), ok, rt.limited(ok, "", 3, minute, 1))
	rt.expect("xya (the wildcard *y*, ahead)", rt.call("c", dsc("w=xya")), ok, rt.limited(ok, "", 10, minute, 9))
	rt.expect("xb (x*)", rt.call("c", dsc("w=xb")), ok, rt.limited(ok, "", 3, minute, 0))
	rt.expect("x* again: over", rt.call("c", dsc("w=x*")), over, rt.limited(over, "", 3, minute, 0))
	rt.expect("za (no wildcard): OK without a limit", rt.call("c", dsc("w=za")), ok, bare())
	rt = newRLSTWith(t, "", countPolicies)
	for _, v := range []string{"x*", "xa"} {
		if r := rt.call("c", dsc("w="+v)); r.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("without compatibility, %s: %v", v, r)
		}
	}
}
