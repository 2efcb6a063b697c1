package logread

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"

	"github.com/limitproxy/limitproxy/internal/httptoken"
)

// Combined is nginx's predefined combined format, the default.
const Combined = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`

// escapeMode is a log_format's escape= parameter: how nginx wrote
// variables' values.
type escapeMode uint8

const (
	// escapeDefault: '"', '\' and bytes below 0x20 or above 0x7e as \xHH.
	escapeDefault escapeMode = iota
	// escapeJSON: JSON string escapes.
	escapeJSON
	// escapeNone: as they are.
	escapeNone
)

// varKind is what a variable means to a Record.
type varKind uint8

const (
	varOther varKind = iota // kept in Record.Extra
	varRemoteAddr
	varRealIPRemoteAddr
	varRemoteUser
	varTimeLocal
	varTimeISO8601
	varMsec
	varRequest
	varRequestMethod
	varRequestURI
	varURI
	varArgs
	varServerProtocol
	varHost
	varHTTPHost
	varServerName
	varStatus
	varBodyBytesSent
	varBytesSent
	varRequestTime
	varHeader // $http_NAME other than $http_host
)

var varKinds = map[string]varKind{
	"remote_addr":        varRemoteAddr,
	"realip_remote_addr": varRealIPRemoteAddr,
	"remote_user":        varRemoteUser,
	"time_local":         varTimeLocal,
	"time_iso8601":       varTimeISO8601,
	"msec":               varMsec,
	"request":            varRequest,
	"request_method":     varRequestMethod,
	"request_uri":        varRequestURI,
	"uri":                varURI,
	"document_uri":       varURI,
	"args":               varArgs,
	"query_string":       varArgs,
	"server_protocol":    varServerProtocol,
	"host":               varHost,
	"http_host":          varHTTPHost,
	"server_name":        varServerName,
	"status":             varStatus,
	"body_bytes_sent":    varBodyBytesSent,
	"bytes_sent":         varBytesSent,
	"request_time":       varRequestTime,
}

// variable is one $name of a format.
type variable struct {
	name   string // without '$'
	kind   varKind
	header string // varHeader: the canonical header name
}

// segment is a variable and the literal text that follows it ("" for a
// variable that ends the format).
type segment struct {
	v     variable
	after string
}

// LogFormat is a compiled nginx log_format: literal text and variables.
// The zero value is not usable; ParseLogFormat makes one. Immutable and
// safe for concurrent use.
type LogFormat struct {
	src    string
	escape escapeMode
	prefix string    // literal text before the first variable
	segs   []segment // each variable with the text after it
}

// String returns the format as it was given.
func (f *LogFormat) String() string { return f.src }

// has reports whether the format has a variable of kind k.
func (f *LogFormat) has(k varKind) bool {
	for _, s := range f.segs {
		if s.v.kind == k {
			return true
		}
	}
	return false
}

// ParseLogFormat compiles an nginx log format: either the format string
// alone (Combined, say), with escape=default, or a whole log_format
// directive copied from nginx.conf, whose name is ignored and whose
// escape= parameter (default, json or none) applies:
//
//	log_format lb escape=json '$http_x_forwarded_for - [$time_local] '
//	                          '"$request" $status $request_time';
//
// Variables are $name or ${name}. Two variables with nothing between them
// are an error, since a line could not be split between them.
func ParseLogFormat(s string) (*LogFormat, error) {
	f := &LogFormat{src: s}
	text := s
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "log_format") && len(t) > 10 && isSpace(t[10]) {
		var err error
		text, f.escape, err = directive(t[10:])
		if err != nil {
			return nil, err
		}
	}
	if err := f.compile(text); err != nil {
		return nil, err
	}
	return f, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// directive reads the rest of a log_format directive: the name, an
// optional escape=, then the format's pieces, quoted or not, up to an
// optional ';'. Quoted pieces take nginx's escapes (\", \', \\, \t, \r,
// \n).
func directive(s string) (text string, esc escapeMode, err error) {
	var (
		words []string
		b     strings.Builder
	)
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case isSpace(c):
			i++
		case c == ';':
			if strings.TrimSpace(s[i+1:]) != "" {
				return "", 0, fmt.Errorf("log_format: text after ';': %q", strings.TrimSpace(s[i+1:]))
			}
			i = len(s)
		case c == '"' || c == '\'':
			b.Reset()
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
					switch s[j] {
					case 't':
						b.WriteByte('\t')
					case 'r':
						b.WriteByte('\r')
					case 'n':
						b.WriteByte('\n')
					case '"', '\'', '\\':
						b.WriteByte(s[j])
					default:
						b.WriteByte('\\')
						b.WriteByte(s[j])
					}
					continue
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return "", 0, fmt.Errorf("log_format: unterminated %c string", c)
			}
			words = append(words, b.String())
			i = j + 1
		default:
			j := i
			for j < len(s) && !isSpace(s[j]) && s[j] != ';' {
				j++
			}
			words = append(words, "\x00"+s[i:j]) // \x00: an unquoted word
			i = j
		}
	}
	if len(words) == 0 {
		return "", 0, errors.New("log_format: no name")
	}
	words = words[1:] // the name
	if len(words) > 0 && strings.HasPrefix(words[0], "\x00escape=") {
		switch v := strings.TrimPrefix(words[0], "\x00escape="); v {
		case "default":
			esc = escapeDefault
		case "json":
			esc = escapeJSON
		case "none":
			esc = escapeNone
		default:
			return "", 0, fmt.Errorf("log_format: unknown escape=%s (default, json or none)", v)
		}
		words = words[1:]
	}
	if len(words) == 0 {
		return "", 0, errors.New("log_format: no format string")
	}
	for i, w := range words {
		words[i] = strings.TrimPrefix(w, "\x00")
	}
	return strings.Join(words, ""), esc, nil
}

func isVarChar(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// compile splits text into literals and variables.
func (f *LogFormat) compile(text string) error {
	var lit strings.Builder
	first := true
	for i := 0; i < len(text); {
		if text[i] != '$' {
			lit.WriteByte(text[i])
			i++
			continue
		}
		var name string
		switch {
		case i+1 < len(text) && text[i+1] == '{':
			end := strings.IndexByte(text[i+2:], '}')
			if end < 0 {
				return fmt.Errorf("log format: unterminated ${ at byte %d", i)
			}
			name = text[i+2 : i+2+end]
			i += end + 3
		default:
			j := i + 1
			for j < len(text) && isVarChar(text[j]) {
				j++
			}
			name = text[i+1 : j]
			i = j
		}
		if name == "" || strings.IndexFunc(name, func(r rune) bool { return r > 0x7f || !isVarChar(byte(r)) }) >= 0 {
			return fmt.Errorf("log format: invalid variable name %q", "$"+name)
		}
		if first {
			f.prefix = lit.String()
			first = false
		} else {
			prev := &f.segs[len(f.segs)-1]
			if lit.Len() == 0 {
				return fmt.Errorf("log format: $%s and $%s have nothing between them, so a line cannot be split", prev.v.name, name)
			}
			prev.after = lit.String()
		}
		lit.Reset()
		f.segs = append(f.segs, segment{v: newVariable(name)})
	}
	if first {
		return errors.New("log format: no variables")
	}
	f.segs[len(f.segs)-1].after = lit.String()
	return nil
}

func newVariable(name string) variable {
	name = strings.ToLower(name) // nginx's variable names are case-insensitive
	v := variable{name: name}
	if k, ok := varKinds[name]; ok {
		v.kind = k
	} else if h, ok := strings.CutPrefix(name, "http_"); ok {
		v.kind = varHeader
		v.header = textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(h, "_", "-"))
	}
	return v
}

// find returns the index of the first lit in s at or after from that is
// not escaped by a backslash (which nginx's escape=default never leaves
// unescaped, and Apache's format writes before a quote), or -1.
func (f *LogFormat) find(s string, from int, lit string) int {
	for {
		j := strings.Index(s[from:], lit)
		if j < 0 {
			return -1
		}
		j += from
		if f.escape == escapeNone || !escaped(s, from, j) {
			return j
		}
		from = j + 1
	}
}

// escaped reports whether s[j] follows an odd number of backslashes, none
// before from.
func escaped(s string, from, j int) bool {
	n := 0
	for k := j - 1; k >= from && s[k] == '\\'; k-- {
		n++
	}
	return n%2 == 1
}

// unescape decodes a value nginx escaped. escape=default writes \xHH;
// the \" and \\ of Apache's format are decoded too, and any other
// backslash is kept. It allocates only when there is something to decode.
func (f *LogFormat) unescape(v string) string {
	if f.escape == escapeNone || strings.IndexByte(v, '\\') < 0 {
		return v
	}
	if f.escape == escapeJSON {
		if s, _, ok := jsonString(`"`+v+`"`, 0); ok {
			return s
		}
		return v
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\\' && i+1 < len(v) {
			switch v[i+1] {
			case 'x':
				if i+3 < len(v) {
					hi, ok1 := httptoken.Unhex(v[i+2])
					lo, ok2 := httptoken.Unhex(v[i+3])
					if ok1 && ok2 {
						b = append(b, hi<<4|lo)
						i += 3
						continue
					}
				}
			case '"', '\\':
				b = append(b, v[i+1])
				i++
				continue
			}
		}
		b = append(b, c)
	}
	return string(b)
}
