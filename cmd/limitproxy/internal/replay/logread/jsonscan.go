package logread

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/limitproxy/limitproxy/internal/httptoken"
)

// A minimal JSON scanner for one flat object per line, which is what zap
// writes: it finds keys and values in place, without building anything, so
// that a line costs no allocation beyond its string (and one per string
// value that has escapes). Nested values are skipped over and kept as
// their JSON text.

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// jsonString reads the string whose opening quote is s[i]. It returns its
// value (a substring of s when it has no escapes) and the index past the
// closing quote; ok is false if the string is not well formed.
func jsonString(s string, i int) (v string, next int, ok bool) {
	i++
	// Most strings are short and have no escapes: one pass, byte by
	// byte, beats two IndexByte calls.
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"':
			return s[i:j], j + 1, true
		case '\\':
			return jsonStringSlow(s, i)
		}
	}
	return "", 0, false
}

// jsonStringSlow decodes a string with escapes from s[i], just past its
// opening quote.
func jsonStringSlow(s string, i int) (v string, next int, ok bool) {
	// The slow way: there are escapes, and the quote found may be one.
	var b []byte
	for k := i; k < len(s); {
		c := s[k]
		switch {
		case c == '"':
			return string(b), k + 1, true
		case c != '\\':
			b = append(b, c)
			k++
			continue
		}
		if k+1 >= len(s) {
			return "", 0, false
		}
		k += 2
		switch s[k-1] {
		case '"', '\\', '/':
			b = append(b, s[k-1])
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := hex4(s, k)
			if !ok {
				return "", 0, false
			}
			k += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if k+6 <= len(s) && s[k] == '\\' && s[k+1] == 'u' {
					r2, ok = hex4(s, k+2)
				}
				if ok {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						k += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", 0, false
		}
	}
	return "", 0, false
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		v, ok := httptoken.Unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// skipValue returns the index past the JSON value (not a string) that
// starts at s[i]: a number, true, false, null, or an object or array
// (strings inside are skipped correctly). The value is not validated
// beyond its extent.
func skipValue(s string, i int) (int, bool) {
	if i >= len(s) {
		return 0, false
	}
	if c := s[i]; c != '{' && c != '[' {
		j := i
		for j < len(s) && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' && s[j] != '\t' {
			j++
		}
		return j, j > i
	}
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case '"':
			_, next, ok := jsonString(s, j)
			if !ok {
				return 0, false
			}
			j = next - 1
		}
	}
	return 0, false
}
