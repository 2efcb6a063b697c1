package proxy

import (
	"bufio"
	"errors"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/limitproxy/limitproxy/internal/httptoken"
)

// writeHead writes the head of req, a request without a body (what
// syncTransport.handles accepts), to w: byte for byte what
// (*http.Request).Write writes for it (reqhead_test.go holds it to that),
// without Write's allocations (fmt, a transfer writer, a sorted copy of
// the header, the request-URI string). keys is scratch space for the
// header's names, returned for the next call.
func writeHead(w *bufio.Writer, req *http.Request, keys []string) ([]string, error) {
	// The Host header: as Request.write finds and cleans it.
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	host, err := httpguts.PunycodeHostPort(host)
	if err != nil {
		return keys, err
	}
	if !httpguts.ValidHostHeader(host) {
		host = ""
	}
	host = removeZone(host)

	// The request-URI, URL.RequestURI without building it.
	path, query := "", ""
	if req.URL.Opaque != "" {
		path = req.URL.RequestURI() // rare: not worth avoiding the string
	} else {
		if path = req.URL.EscapedPath(); path == "" {
			path = "/"
		}
		if req.URL.ForceQuery || req.URL.RawQuery != "" {
			query = req.URL.RawQuery
		}
	}
	if hasCTL(path) || hasCTL(query) {
		return keys, errors.New("net/http: can't write control character in Request.URL")
	}

	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(path)
	if req.URL.Opaque == "" && (req.URL.ForceQuery || req.URL.RawQuery != "") {
		w.WriteByte('?')
		w.WriteString(query)
	}
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")

	// User-Agent: Go's default unless the header has one (ReverseProxy
	// sets an empty one, which sends none).
	ua := "Go-http-client/1.1"
	if v, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(v) > 0 {
			ua = v[0]
		}
	}
	if ua != "" {
		w.WriteString("User-Agent: ")
		writeHeaderValue(w, ua)
		w.WriteString("\r\n")
	}

	// What Request.write's transfer writer adds for a request without a
	// body: Connection: close when asked for and the first Connection
	// line lacks it; Content-Length: 0 for the methods servers expect it
	// with.
	if req.Close {
		if c := req.Header["Connection"]; len(c) == 0 || !httptoken.Has(c[0], "close") {
			w.WriteString("Connection: close\r\n")
		}
	}
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		w.WriteString("Content-Length: 0\r\n")
	}

	// The header, sorted by name, less what Request.write leaves out.
	keys = keys[:0]
	for k := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range req.Header[k] {
			w.WriteString(k)
			w.WriteString(": ")
			writeHeaderValue(w, v)
			w.WriteString("\r\n")
		}
	}
	_, err = w.WriteString("\r\n")
	return keys, err
}

// writeHeaderValue writes v as net/http writes a header value: CR and LF
// replaced by spaces, then leading and trailing spaces and tabs trimmed
// (the same as trimming the four of them first).
func writeHeaderValue(w *bufio.Writer, v string) {
	v = strings.Trim(v, " \t\r\n")
	for {
		i := strings.IndexAny(v, "\r\n")
		if i < 0 {
			w.WriteString(v)
			return
		}
		w.WriteString(v[:i])
		w.WriteByte(' ')
		v = v[i+1:]
	}
}

// hasCTL reports whether s holds an ASCII control character (below space,
// or DEL), which a request line may not.
func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

// removeZone drops an IPv6 zone from a bracketed host, as RFC 6874 asks
// of anything forwarding a URI (and Request.write does).
func removeZone(host string) string {
	if !strings.HasPrefix(host, "[") {
		return host
	}
	i := strings.LastIndex(host, "]")
	if i < 0 {
		return host
	}
	j := strings.LastIndex(host[:i], "%")
	if j < 0 {
		return host
	}
	return host[:j] + host[i:]
}
