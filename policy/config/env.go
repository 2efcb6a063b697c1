package config

import (
	"fmt"
	"os"
	"strings"
)

// Environment placeholders, Caddy's convention: in any string value of a
// configuration file, {$NAME} is replaced by the environment variable
// NAME, and {$NAME:default} by NAME, or default when NAME is unset. NAME
// is a letter or underscore then letters, digits and underscores; the
// default runs to the first "}". {$$ writes a literal {$. An unset
// variable without a default is an error at its key. A variable set but
// empty gives "". Anything else, a "{$" not followed by a name and "}"
// included, is left as written.
//
// Expansion happens in the values as they are decoded, never in the
// file's text, so a variable's value cannot add keys or break the TOML
// around it, and errors keep their key's position.

// expandData returns data, a decoded TOML value, with the placeholders of
// every string in it (also inside arrays) expanded.
func expandData(data any) (any, error) {
	switch d := data.(type) {
	case string:
		return expandEnv(d, os.LookupEnv)
	case []any:
		out := make([]any, len(d))
		for i, e := range d {
			x, err := expandData(e)
			if err != nil {
				if len(d) > 1 {
					return nil, fmt.Errorf("element %d: %w", i, err)
				}
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	}
	return data, nil
}

// expandEnv replaces the placeholders of s, looking variables up with
// lookup.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "{$") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "{$")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		s = s[i:]
		if strings.HasPrefix(s, "{$$") {
			b.WriteString("{$")
			s = s[3:]
			continue
		}
		n := envNameLen(s[2:])
		rest := s[2+n:]
		if n == 0 || rest == "" || (rest[0] != '}' && rest[0] != ':') {
			b.WriteString("{$")
			s = s[2:]
			continue
		}
		name := s[2 : 2+n]
		def, hasDef := "", false
		if rest[0] == ':' {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				b.WriteString("{$")
				s = s[2:]
				continue
			}
			def, hasDef, rest = rest[1:end], true, rest[end:]
		}
		v, ok := lookup(name)
		switch {
		case ok:
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			return "", fmt.Errorf("environment variable %s is unset, and {$%s} has no default (write {$%s:default} for one, {$$%s} for the text itself)", name, name, name, name)
		}
		s = rest[1:]
	}
}

// envNameLen returns the length of the variable name s starts with: a
// letter or underscore, then letters, digits and underscores.
func envNameLen(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return i
		}
	}
	return len(s)
}
