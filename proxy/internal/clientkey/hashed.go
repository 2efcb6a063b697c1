package clientkey

import (
	"net/http"
	"net/url"
	"strings"
)

// [log] access_replay = "hashed" logs what the key parts read without the
// values themselves: each value a key reads is replaced by its keyed hash
// (a function the caller gives; "" must stay ""), and everything else the
// key parts read is kept as it decides them, so that Keyed, run on what
// is logged, finds for every keyed name the same occurrences, in the same
// states, each value replaced by its hash: the same decision, and keys
// that are equal exactly where the live ones were. What a key does not
// read (other cookies, other query parameters, a header's other values)
// is left out.

// HeaderValue returns the value a header key part reads of the header
// name (canonical) in h, and whether it has one (firstHeaderValue).
func HeaderValue(h http.Header, name string) (string, bool) { return firstHeaderValue(h, name) }

// HashedCookies returns the Cookie field lines as the cookie parts named
// names read them, as one line: each pair that names one of them
// (sameName), with its name as sent and its value replaced by hash of the
// value it is keyed by, or by `"` where it is not a cookie-value (never
// one); and each pair of another name in which a word after white space
// or a comma names one, as `="` and those words' names. Pairs that name
// none are left out.
func HashedCookies(lines []string, names []string, hash func(string) string) string {
	var out []string
	for _, line := range lines {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			pair = strings.Trim(pair, " \t")
			if pair == "" {
				continue
			}
			n, v, eq := strings.Cut(pair, "=")
			named := namesAny(n, names)
			// The words of the pair, from its first white space or comma
			// on, that name a keyed cookie: occurrences of it wherever the
			// pair's own name does not name it.
			var words []string
			if i := strings.IndexAny(pair, " \t,"); i >= 0 {
				for _, w := range strings.FieldsFunc(pair[i:], func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
					if wn, _, _ := strings.Cut(w, "="); namesAny(wn, names) {
						words = append(words, wn)
					}
				}
			}
			if !named && len(words) == 0 {
				continue
			}
			var b strings.Builder
			none := false // the pair written holds no cookie-value
			switch {
			case !named:
				b.WriteString(`="`) // a name that names none, a value that is none
				none = true
			case !eq:
				b.WriteString(n)
			case validCookieValue(v):
				b.WriteString(n + "=" + hash(cookieKeyValue(v)))
			default:
				b.WriteString(n + `="`)
				none = true
			}
			if none && len(words) > 0 {
				// The words, after a value that is none already. (A valid
				// value has none: the pair's words are then in its name,
				// written as it is.)
				b.WriteString(" " + strings.Join(words, " "))
			}
			out = append(out, b.String())
		}
	}
	return strings.Join(out, "; ")
}

// HashedQuery returns the query rawQuery as the query parts named names
// read it: each '&'-separated pair that names one of them (in any of its
// ';'-separated pieces), the rest left out. A pair without ';' keeps its
// name as sent, and its value is replaced by hash of its decoded value,
// or by "%zz" where it does not decode (never a value); a pair with ';'
// (never a value) keeps only the names of its pieces that name one.
func HashedQuery(rawQuery string, names []string, hash func(string) string) string {
	var out []string
	for rest := rawQuery; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		if strings.Contains(pair, ";") {
			var kept []string
			for sub := range strings.SplitSeq(pair, ";") {
				if n, _, _ := strings.Cut(sub, "="); namesAny(n, names) {
					kept = append(kept, n)
				}
			}
			switch len(kept) {
			case 0:
			case 1:
				out = append(out, kept[0]+";")
			default:
				out = append(out, strings.Join(kept, ";"))
			}
			continue
		}
		n, v, _ := strings.Cut(pair, "=")
		if !namesAny(n, names) {
			continue
		}
		dv, err := url.QueryUnescape(v)
		if err != nil {
			out = append(out, n+"=%zz")
			continue
		}
		out = append(out, n+"="+hash(dv))
	}
	return strings.Join(out, "&")
}

// namesAny reports whether n may be read as one of names (sameName).
func namesAny(n string, names []string) bool {
	for _, name := range names {
		if sameName(n, name) {
			return true
		}
	}
	return false
}
