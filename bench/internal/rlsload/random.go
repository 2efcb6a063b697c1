package rlsload

import (
	"math/rand/v2"
	"slices"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// RandomCalls makes n calls of one or two descriptors from patterns (per
// domain, the descriptor patterns of its RLS policies: "KEY",
// "KEY=VALUE", "KEY=PREFIX*"), each a pattern filled in, with a value or
// an entry changed now and then, over few values: counters fill, and
// lookups fall between what the patterns take. The same seed makes the
// same calls.
func RandomCalls(patterns map[string][][]string, n int, seed uint64) []*rlsv3.RateLimitRequest {
	valueSet := map[string]bool{"": true, "zz": true}
	var domains []string
	for d, ps := range patterns {
		domains = append(domains, d)
		for _, p := range ps {
			for _, pat := range p {
				if _, v, ok := strings.Cut(pat, "="); ok {
					base := strings.TrimSuffix(v, "*")
					valueSet[base] = true
					valueSet[base+"x"] = true
				}
			}
		}
	}
	slices.Sort(domains)
	var values []string
	for v := range valueSet {
		values = append(values, v)
	}
	slices.Sort(values)
	r := rand.New(rand.NewPCG(seed, 28))
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	instantiate := func(pats []string) *rlcommon.RateLimitDescriptor {
		d := &rlcommon.RateLimitDescriptor{}
		for _, pat := range pats {
			k, v, _ := strings.Cut(pat, "=")
			switch {
			case r.IntN(4) == 0 || v == "":
				v = pick(values[:min(len(values), 6)])
			case strings.HasSuffix(v, "*"):
				v = strings.TrimSuffix(v, "*") + pick([]string{"", "a", "b"})
			}
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		switch r.IntN(10) {
		case 0:
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "extra", Value: "1"})
		case 1:
			if len(d.Entries) > 1 {
				d.Entries = d.Entries[:len(d.Entries)-1]
			}
		}
		return d
	}
	calls := make([]*rlsv3.RateLimitRequest, n)
	for i := range calls {
		domain := pick(domains)
		req := &rlsv3.RateLimitRequest{Domain: domain}
		for range 1 + r.IntN(2) {
			ps := patterns[domain]
			req.Descriptors = append(req.Descriptors, instantiate(ps[r.IntN(len(ps))]))
		}
		calls[i] = req
	}
	return calls
}
