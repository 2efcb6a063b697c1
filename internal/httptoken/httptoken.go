// Package httptoken reads the tokens of HTTP header fields the way Go's
// net/http server does (and not with Unicode case folding, under which
// "cloſe", with a long s, would be "close"): the proxy's request writer
// and its HTTP/1.1 front must agree with net/http on what a Connection
// field says.
package httptoken

// Has reports whether token (lower case) is in v, a comma- or
// space-separated list, ASCII letters of either case alike: net/http's
// server's test for "close" in a response's Connection field.
func Has(v, token string) bool {
	for sp := 0; sp+len(token) <= len(v); sp++ {
		if sp > 0 && !isBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !isBoundary(v[end]) {
			continue
		}
		if EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

// EqualFold reports whether s and t are equal with ASCII letters of
// either case alike (and no Unicode folding).
func EqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

func isBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

// Unhex returns the value of the hexadecimal digit c (either case), as a
// percent-encoding's digits are read; false if c is none.
func Unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
