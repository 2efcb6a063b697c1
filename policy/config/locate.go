package config

import (
	"strconv"
	"strings"
)

// pos is a 1-based line and column in a configuration file.
type pos struct{ line, col int }

// locate maps each key path of a TOML document ("server.listen",
// "policy[2].limits[0].rate", "policy[0].match.path") and each table
// ("policy[2]") to where it is written. BurntSushi/toml keeps key positions
// private, so this scanner finds them itself; it needs to understand only
// enough TOML to find keys (headers, key = value lines, inline tables,
// multi-line arrays and strings), because the decoder, not this, is the
// authority on syntax. A path it cannot place is reported without a
// position.
func locate(src string) map[string]pos {
	out := map[string]pos{}
	arrays := map[string]int{} // concrete array path → elements so far
	cur := ""                  // concrete path of the current table
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		raw := lines[i]
		line := stripComment(raw)
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		switch {
		case trimmed == "":
		case strings.HasPrefix(trimmed, "[["):
			name := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(trimmed, "[["), "]]"))
			parent, last := splitLast(name)
			base := join(resolve(parent, arrays), last)
			idx := arrays[base]
			arrays[base] = idx + 1
			cur = base + "[" + strconv.Itoa(idx) + "]"
			out[cur] = pos{i + 1, indent + 1}
		case strings.HasPrefix(trimmed, "["):
			name := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(trimmed, "["), "]"))
			cur = resolve(name, arrays)
			out[cur] = pos{i + 1, indent + 1}
		default:
			key, rest, ok := cutKey(trimmed)
			if !ok {
				continue
			}
			path := join(cur, key)
			out[path] = pos{i + 1, indent + 1}
			rest = strings.TrimSpace(rest)
			switch {
			case strings.HasPrefix(rest, "{"):
				inline(out, path, line, strings.Index(line, "{"), i+1)
			case strings.HasPrefix(rest, "["):
				for depth := brackets(rest); depth > 0 && i+1 < len(lines); {
					i++
					depth += brackets(stripComment(lines[i]))
				}
			case strings.HasPrefix(rest, `"""`) || strings.HasPrefix(rest, `'''`):
				q := rest[:3]
				if strings.Count(rest, q) < 2 {
					for i+1 < len(lines) {
						i++
						if strings.Contains(lines[i], q) {
							break
						}
					}
				}
			}
		}
	}
	return out
}

// inline records the keys of an inline table that opens at column open of
// line (a table on one line, as TOML requires).
func inline(out map[string]pos, path, line string, open, lineNo int) {
	depth, start := 0, -1
	for j := open; j < len(line); j++ {
		switch line[j] {
		case '"', '\'':
			j = skipString(line, j)
		case '{':
			depth++
			start = j + 1
		case '[':
			depth++
		case ']', '}':
			depth--
		case ',':
			if depth == 1 {
				start = j + 1
			}
		case '=':
			if depth == 1 && start >= 0 {
				key := unquote(strings.TrimSpace(line[start:j]))
				at := start + len(line[start:j]) - len(strings.TrimLeft(line[start:j], " \t"))
				out[join(path, key)] = pos{lineNo, at + 1}
				start = -1
			}
		}
	}
}

// cutKey splits "key = value" (the key may be quoted or dotted).
func cutKey(s string) (key, rest string, ok bool) {
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '"', '\'':
			j = skipString(s, j)
		case '=':
			k := strings.TrimSpace(s[:j])
			if k == "" {
				return "", "", false
			}
			parts := strings.Split(k, ".")
			for n := range parts {
				parts[n] = unquote(strings.TrimSpace(parts[n]))
			}
			return strings.Join(parts, "."), s[j+1:], true
		}
	}
	return "", "", false
}

// resolve turns a dotted table name into a concrete path, indexing every
// array of tables along it by its current element.
func resolve(name string, arrays map[string]int) string {
	p := ""
	for _, seg := range strings.Split(name, ".") {
		p = join(p, unquote(strings.TrimSpace(seg)))
		if n, ok := arrays[p]; ok {
			p += "[" + strconv.Itoa(n-1) + "]"
		}
	}
	return p
}

func splitLast(name string) (parent, last string) {
	if i := strings.LastIndex(name, "."); i >= 0 {
		return name[:i], unquote(strings.TrimSpace(name[i+1:]))
	}
	return "", unquote(strings.TrimSpace(name))
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		if u, err := strconv.Unquote(`"` + s[1:len(s)-1] + `"`); err == nil {
			return u
		}
		return s[1 : len(s)-1]
	}
	return s
}

// skipString returns the index of the quote closing the string at j.
func skipString(s string, j int) int {
	q := s[j]
	for k := j + 1; k < len(s); k++ {
		if q == '"' && s[k] == '\\' {
			k++
			continue
		}
		if s[k] == q {
			return k
		}
	}
	return len(s)
}

// stripComment removes a # comment that is not inside a string.
func stripComment(s string) string {
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '"', '\'':
			j = skipString(s, j)
		case '#':
			return s[:j]
		}
	}
	return s
}

// brackets returns the change in [ ] nesting along s, outside strings.
func brackets(s string) int {
	d := 0
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '"', '\'':
			j = skipString(s, j)
		case '[':
			d++
		case ']':
			d--
		}
	}
	return d
}
