package envoyimport

import "strings"

// A value of the reference's descriptors with '*' is a wildcard: each '*'
// stands for any run of characters, none included, anywhere in the value
// (envoyproxy/ratelimit's wildcardMatch, since its commit 6bcd4d2; before
// it, a trailing '*' only). A value without '*' is itself.

// globMatch reports whether value matches pattern.
func globMatch(pattern, value string) bool {
	return globsMeet(pattern, strings.ReplaceAll(value, "*", "\x00"))
}

// globsMeet reports whether some value matches both patterns a and b:
// whether the lookup may find either for one value. '\x00' in a stands
// for a literal '*' of a value (globMatch's); no pattern holds it.
func globsMeet(a, b string) bool {
	type pos struct{ i, j int }
	memo := map[pos]bool{}
	var meet func(i, j int) bool
	meet = func(i, j int) bool {
		if i == len(a) && j == len(b) {
			return true
		}
		k := pos{i, j}
		if v, ok := memo[k]; ok {
			return v
		}
		memo[k] = false // a cycle adds nothing
		r := false
		switch {
		case i < len(a) && a[i] == '*':
			// a's star matches nothing more, or takes what b has next
			// (a character, or what b's star takes).
			r = meet(i+1, j) || j < len(b) && meet(i, j+1)
		case j < len(b) && b[j] == '*':
			r = meet(i, j+1) || i < len(a) && meet(i+1, j)
		case i < len(a) && j < len(b):
			r = a[i] == b[j] && meet(i+1, j+1)
		}
		memo[k] = r
		return r
	}
	return meet(0, 0)
}
