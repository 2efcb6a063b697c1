package proxy

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/internal/httptoken"
)

// TestReadAgreesWithOracle: read, which works in place in one buffer, gives
// for random paths and every combination of rules what the plain reading
// (split, decode, replace, trim, resolve: readOracle, the first
// implementation) gives.
func TestReadAgreesWithOracle(t *testing.T) {
	pieces := []string{"/", "/", "a", "A", ".", "..", ";", ";x=1", "%5C", "%5c", "\\", "%2F", "%2e", "%20", " ", "%", "%4", "%zz", "b.", "..;", "%C3%89", "\xc3\x89", "~", "//", "/\\", "..."}
	rng := rand.New(rand.NewPCG(1, 2))
	var buf []byte
	for range 20000 {
		var b strings.Builder
		b.WriteString([]string{"/", "//", "/\\"}[rng.IntN(3)])
		for range rng.IntN(8) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		sent := b.String()
		for n := range 1 << ruleCount {
			rs := rule(n)
			want, wantOK := readOracle(sent, rs)
			got, ok := read(buf, sent, rs)
			if ok != wantOK || ok && string(got) != want {
				t.Fatalf("read(%q, %06b) = %q, %v; the oracle %q, %v", sent, rs, got, ok, want, wantOK)
			}
			buf = got
		}
	}
}

// read returns the decoded path an upstream reading by the rules rs sees
// in sent (escaped, as it receives it), and false if, so read, the path
// climbs above the root.
func readOracle(sent string, rs rule) (string, bool) {
	url := rs&ruleURL != 0 && rs&ruleVerbatim == 0
	if url {
		// WHATWG URL: a bare backslash is a slash, and two at the start
		// begin a host, which ends at the next.
		sent = strings.ReplaceAll(sent, `\`, "/")
		if strings.HasPrefix(sent, "//") {
			rest := strings.TrimLeft(sent, "/")
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				sent = rest[i:]
			} else {
				sent = ""
			}
		}
	}
	var b strings.Builder
	b.Grow(len(sent))
	// Segments of the escaped form, so that only a bare ';' starts
	// parameters (an upstream decodes after cutting them).
	for i, seg := range strings.Split(sent, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		if rs&ruleParams != 0 {
			seg, _, _ = strings.Cut(seg, ";")
		}
		b.WriteString(unescapeAnyOracle(seg))
	}
	p := b.String()
	if rs&ruleBackslash != 0 {
		p = strings.ReplaceAll(p, `\`, "/")
	}
	if url {
		p = resolveURLOracle(p, rs&ruleTrailing != 0)
	} else if rs&ruleTrailing != 0 {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if s != "." && s != ".." {
				segs[i] = strings.TrimRight(s, ". ")
			}
		}
		p = strings.Join(segs, "/")
	}
	if rs&ruleVerbatim == 0 && !url {
		var ok bool
		if p, ok = resolveDotsOracle(p); !ok {
			return "", false
		}
	}
	if rs&ruleSlash != 0 && len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	if rs&ruleAddSlash != 0 && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p, true
}

// unescapeAny decodes the percent-encodings of s that are well formed and
// leaves the rest as they are.
func unescapeAnyOracle(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := httptoken.Unhex(s[i+1])
			lo, ok2 := httptoken.Unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// resolveDots resolves the "." and ".." segments of a decoded path and
// merges repeated slashes, keeping a trailing slash; false if it climbs
// above the root.
func resolveDotsOracle(p string) (string, bool) {
	var segs []string
	trailing := false
	for _, s := range strings.Split(p, "/")[1:] {
		switch s {
		case "", ".":
			trailing = true
			continue
		case "..":
			if len(segs) == 0 {
				return "", false
			}
			segs = segs[:len(segs)-1]
			trailing = true
			continue
		}
		segs = append(segs, s)
		trailing = false
	}
	out := "/" + strings.Join(segs, "/")
	if trailing && len(segs) > 0 {
		out += "/"
	}
	return out, true
}

// resolveURLOracle resolves the dot segments of a decoded path as WHATWG
// URL does (".." at the root stays there), keeping empty segments; with
// trim, trailing dots and spaces are dropped from each other segment
// first, and one that is then empty is merged.
func resolveURLOracle(p string, trim bool) string {
	var segs []string
	parts := strings.Split(p, "/")
	if len(parts) > 0 && parts[0] == "" {
		parts = parts[1:]
	}
	for i, s := range parts {
		last := i == len(parts)-1
		switch {
		case s == "":
			segs = append(segs, "")
		case s == ".":
			if last {
				segs = append(segs, "")
			}
		case s == "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			if last {
				segs = append(segs, "")
			}
		case trim && strings.TrimRight(s, ". ") == "":
			if last {
				segs = append(segs, "")
			}
		default:
			if trim {
				s = strings.TrimRight(s, ". ")
			}
			segs = append(segs, s)
		}
	}
	return "/" + strings.Join(segs, "/")
}
