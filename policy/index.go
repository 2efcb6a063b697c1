package policy

import (
	"net/http"
	"slices"
	"strings"

	"github.com/limitproxy/limitproxy/policy/config"
)

// index finds the first policy that matches a request without trying
// every policy in turn: each policy is filed under the one condition that
// narrows it most — its exact path, else its path prefix, else its exact
// hosts — and the rest (wildcard hosts only, a regex, headers, methods, or
// nothing) are always candidates. A request's candidates are the policies
// filed under its path, under every prefix of its path, and under its
// host, plus those; they are tried in file order, as Set.Match promises,
// so the first that matches is the one a linear scan finds. With a
// thousand policies told apart by path or host, a match costs about what
// it does with one (BenchmarkMatch).
//
// An index is built once with its Set and never changes.
type index struct {
	exact  map[string][]int // path → policies whose match has that path
	prefix prefixes         // path_prefix → policies
	hosts  map[string][]int // exact host → policies with hosts and no path condition
	always []int            // every other policy
}

// prefixes files policies by path prefix: a map per prefix, and the
// distinct lengths of the prefixes, so that a path's prefixes are looked
// up once per length (a few, however many policies).
type prefixes struct {
	byPrefix map[string][]int
	lengths  []int // ascending
}

func (p *prefixes) add(prefix string, i int) {
	if p.byPrefix == nil {
		p.byPrefix = map[string][]int{}
	}
	if _, ok := p.byPrefix[prefix]; !ok && !slices.Contains(p.lengths, len(prefix)) {
		p.lengths = append(p.lengths, len(prefix))
		slices.Sort(p.lengths)
	}
	p.byPrefix[prefix] = append(p.byPrefix[prefix], i)
}

func newIndex(ps []*Policy) *index {
	x := &index{exact: map[string][]int{}, hosts: map[string][]int{}}
	for i, p := range ps {
		m := &p.Match
		switch {
		case m.RLS():
			// Never an HTTP request's: not a candidate.
		case m.HasPath:
			x.exact[m.Path] = append(x.exact[m.Path], i)
		case m.PathPrefix != "":
			x.prefix.add(m.PathPrefix, i)
		case len(m.Hosts) > 0 && !slices.ContainsFunc(m.Hosts, isWildcard):
			for _, h := range m.Hosts {
				x.hosts[h] = append(x.hosts[h], i)
			}
		default:
			x.always = append(x.always, i)
		}
	}
	return x
}

func isWildcard(h string) bool { return strings.HasPrefix(h, "*") }

// candidates appends to buf the indexes of the policies that may match r,
// in ascending order and without repeats.
func (x *index) candidates(r *http.Request, buf []int) []int {
	path := r.URL.Path
	buf = append(buf, x.exact[path]...)
	for _, l := range x.prefix.lengths {
		if l > len(path) {
			break
		}
		buf = append(buf, x.prefix.byPrefix[path[:l]]...)
	}
	if len(x.hosts) > 0 {
		buf = append(buf, x.hosts[strings.ToLower(config.HostName(r.Host))]...)
	}
	buf = append(buf, x.always...)
	slices.Sort(buf)
	return slices.Compact(buf)
}
