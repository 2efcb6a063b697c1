package logread

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/proxy"
)

// Pick says which address of a list (X-Forwarded-For) is the client's.
type Pick uint8

const (
	// RightmostUntrusted, the zero value, reads the list by the rules the
	// live proxy reads its client_ip_header by behind a trusted peer
	// (proxy.ClientFromHeader): with NginxOptions.TrustedHops = 0, walked
	// from the right (the hop nearest the logging server) past the
	// addresses inside NginxOptions.TrustedProxies to the first that is
	// not one; with no trusted proxies, the rightmost address: the one
	// the last proxy saw, which a client cannot forge. An element that is
	// not an address stops the walk: the last address passed (a trusted
	// proxy) is taken, or Peer if there was none. If every address is
	// trusted, the leftmost is taken. With TrustedHops = N > 0, the N-th
	// element from the right, or Peer if there are fewer or it is not an
	// address. $http_forwarded is read as RFC 7239 Forwarded (each
	// element's for=, commas inside quotes kept), any other variable as a
	// comma-separated list of addresses.
	RightmostUntrusted Pick = iota
	// Leftmost takes the first element that is an address: the client's
	// own claim, which anyone can forge by sending the header. Use it
	// only for logs whose proxy replaced the header rather than appended
	// to it.
	Leftmost
)

// NginxOptions configures the reading of nginx logs.
type NginxOptions struct {
	// LogFormat is the log_format the lines were written in, as
	// ParseLogFormat takes it; "" means Combined.
	LogFormat string
	// ClientVar is the variable whose value is Record.Client, with or
	// without '$'; "" means $remote_addr. A $remote_addr or
	// $realip_remote_addr holds one address (a port is dropped); any other
	// variable ($http_x_forwarded_for, $http_x_real_ip,
	// $proxy_protocol_addr, or $http_forwarded, whose elements' for=
	// addresses count) holds a comma-separated list read by ForwardedFor,
	// and when it is empty ("-") Client is Peer. It must be a variable of
	// the format.
	ClientVar string
	// ForwardedFor picks the client from a list; the zero value is
	// RightmostUntrusted.
	ForwardedFor Pick
	// TrustedProxies are the addresses RightmostUntrusted walks past:
	// the load balancers and proxies in front of the logging server.
	TrustedProxies []netip.Prefix
	// TrustedHops, when > 0, makes RightmostUntrusted take the
	// TrustedHops-th element from the right instead, as [server]
	// trusted_hops does live (Envoy's xff_num_trusted_hops): the number
	// of proxies in front of the logging server that append to the list.
	// 0 walks past TrustedProxies.
	TrustedHops int
}

// NginxReader reads an nginx access log in a log_format (see Record for
// what each variable becomes). Not safe for concurrent use.
type NginxReader struct {
	lines     *lines
	st        Stats
	f         *LogFormat
	o         NginxOptions
	client    int // the index in f.segs of ClientVar
	single    bool
	forwarded bool // ClientVar is $http_forwarded
	clk       clock
	in        interner
	fl        fields
	scratch   []Field // for Record.Header
	extra     []Field // for Record.Extra
}

// NewNginxReader returns a reader of an nginx access log from r. name is
// the file name records and errors carry. It fails if o.Nginx's LogFormat
// does not compile, has no time variable ($msec, $time_iso8601 or
// $time_local) or lacks ClientVar. r is not closed.
func NewNginxReader(r io.Reader, name string, o Options) (*NginxReader, error) {
	no := o.Nginx
	src := no.LogFormat
	if src == "" {
		src = Combined
	}
	f, err := ParseLogFormat(src)
	if err != nil {
		return nil, err
	}
	if !f.has(varMsec) && !f.has(varTimeISO8601) && !f.has(varTimeLocal) {
		return nil, errors.New("log format has no time variable ($msec, $time_iso8601 or $time_local): requests cannot be replayed in time")
	}
	cv := strings.ToLower(strings.Trim(no.ClientVar, "${}"))
	if cv == "" {
		cv = "remote_addr"
	}
	nr := &NginxReader{f: f, o: no, client: -1, in: interner{}}
	for i, s := range f.segs {
		if s.v.name == cv {
			nr.client = i
			nr.single = s.v.kind == varRemoteAddr || s.v.kind == varRealIPRemoteAddr
			nr.forwarded = cv == "http_forwarded"
			break
		}
	}
	if nr.client < 0 {
		return nil, fmt.Errorf("client variable $%s is not in the log format %q", cv, src)
	}
	nr.lines = newLines(r, name, o.MaxLineBytes, &nr.st)
	return nr, nil
}

// Stats returns the reader's counts so far.
func (r *NginxReader) Stats() Stats { return r.st }

// Next returns the next line's record; see Reader.
func (r *NginxReader) Next() (Record, error) {
	for {
		b, err := r.lines.next()
		if err != nil {
			return Record{}, err
		}
		if blank(b) {
			r.st.Skipped++
			continue
		}
		var rec Record
		if msg := r.parse(&rec, string(b)); msg != "" {
			return Record{}, r.lines.errorf("%s", msg)
		}
		rec.File, rec.Line, rec.Format = r.lines.name, r.lines.n, Nginx
		r.st.Records++
		return rec, nil
	}
}

// values holds what parse gathers before it can decide what wins.
type values struct {
	remoteAddr, realIP, client         string
	timeLocal, timeISO, msec           string
	host, httpHost, serverName         string
	method, uri, decodedURI, args      string
	haveHost, haveHTTPHost, haveServer bool
}

func dash(v string) string {
	if v == "-" {
		return ""
	}
	return v
}

// parse reads one line and returns its record, or what is wrong with it.
func (r *NginxReader) parse(rec *Record, line string) (msg string) {
	f := r.f
	if !strings.HasPrefix(line, f.prefix) {
		return fmt.Sprintf("does not begin with %q, as the log format does", f.prefix)
	}
	var v values
	hdr, extra := r.scratch[:0], r.extra[:0]
	pos := len(f.prefix)
	last := len(f.segs) - 1
	for i, sg := range f.segs {
		var raw string
		switch {
		case sg.after == "":
			raw, pos = line[pos:], len(line)
		case i == last:
			end := len(line) - len(sg.after)
			if end < pos || line[end:] != sg.after {
				return fmt.Sprintf("does not end with %q after $%s, as the log format does", sg.after, sg.v.name)
			}
			raw, pos = line[pos:end], len(line)
			if f.escape == escapeDefault && sg.after[0] == '"' && f.find(raw, 0, `"`) >= 0 {
				// nginx escapes quotes in values: the line has a field
				// after this one that the format has not.
				return fmt.Sprintf("$%s holds a quote that nginx would have escaped: does the line have more fields than the log format?", sg.v.name)
			}
		default:
			j := f.find(line, pos, sg.after)
			if j < 0 {
				return fmt.Sprintf("no %q after $%s at column %d", sg.after, sg.v.name, pos+1)
			}
			raw, pos = line[pos:j], j+len(sg.after)
		}
		val := f.unescape(raw)
		if i == r.client {
			v.client = val
		}
		switch sg.v.kind {
		case varRemoteAddr:
			v.remoteAddr = val
		case varRealIPRemoteAddr:
			v.realIP = val
		case varRemoteUser:
			rec.User = dash(val)
		case varTimeLocal:
			v.timeLocal = val
		case varTimeISO8601:
			v.timeISO = val
		case varMsec:
			v.msec = val
		case varRequest:
			rec.Request = dash(val)
		case varRequestMethod:
			v.method = dash(val)
		case varRequestURI:
			v.uri = dash(val)
		case varURI:
			v.decodedURI = dash(val)
		case varArgs:
			v.args = dash(val)
		case varServerProtocol:
			rec.Proto = r.in.get(dash(val))
		case varHost:
			v.host, v.haveHost = dash(val), true
		case varHTTPHost:
			v.httpHost, v.haveHTTPHost = dash(val), true
		case varServerName:
			v.serverName, v.haveServer = dash(val), true
		case varStatus:
			if val == "-" {
				break
			}
			n, ok := digits(val)
			if !ok || n > 999 {
				return fmt.Sprintf("$status: %q is not a status", val)
			}
			rec.Status = n
			rec.Has |= HasStatus
		case varBodyBytesSent, varBytesSent:
			if val == "-" {
				break
			}
			n, ok := digits(val)
			if !ok {
				return fmt.Sprintf("$%s: %q is not a number of bytes", sg.v.name, val)
			}
			if sg.v.kind == varBodyBytesSent {
				rec.BodyBytes = int64(n)
				rec.Has |= HasBodyBytes
			} else {
				rec.BytesSent = int64(n)
				rec.Has |= HasBytesSent
			}
		case varRequestTime:
			if val == "-" {
				break
			}
			d, _, ok := seconds(val)
			if !ok {
				return fmt.Sprintf("$request_time: %q is not a number of seconds", val)
			}
			rec.Duration = d
			rec.Has |= HasDuration
		case varHeader:
			if val != "-" && val != "" {
				hdr = append(hdr, Field{Name: sg.v.header, Value: val})
			}
		default:
			extra = append(extra, Field{Name: sg.v.name, Value: dash(val)})
		}
	}
	r.scratch, r.extra = hdr[:0], extra[:0]
	if m := r.finish(rec, &v); m != "" {
		return m
	}
	rec.Header = r.fl.clone(hdr)
	rec.Extra = r.fl.clone(extra)
	return ""
}

// finish decides what the gathered values make: time, request, host,
// addresses.
func (r *NginxReader) finish(rec *Record, v *values) string {
	var ok bool
	switch {
	case v.msec != "":
		rec.End, rec.Resolution, ok = epoch(v.msec)
		if !ok {
			return fmt.Sprintf("$msec: %q is not a time", v.msec)
		}
	case v.timeISO != "":
		rec.End, rec.Resolution, ok = r.clk.iso(v.timeISO)
		if !ok {
			return fmt.Sprintf("$time_iso8601: %q is not a time", v.timeISO)
		}
	default:
		rec.End, ok = r.clk.timeLocal(v.timeLocal)
		if !ok {
			return fmt.Sprintf("$time_local: %q is not a time", v.timeLocal)
		}
		rec.Resolution = time.Second
	}
	rec.Has |= HasTime
	rec.Time = rec.End
	if rec.Has&HasDuration != 0 {
		rec.Time = rec.End.Add(-rec.Duration)
	}

	// The request: $request if it is a request line, else the separate
	// variables.
	target := v.uri
	if rec.Request != "" {
		if m, t, p, ok := requestLine(rec.Request); ok {
			rec.Method, target = m, t
			if p != "" {
				rec.Proto = r.in.get(p)
			}
		}
	} else {
		rec.Method = v.method
	}
	rec.Method = r.in.get(rec.Method)
	var absHost string
	if target != "" {
		rec.Target = target
		var rawPath string
		absHost, rawPath, rec.RawQuery = splitTarget(target, rec.Method)
		rec.Path = decodePath(rawPath)
	} else {
		rec.Path, rec.RawQuery = v.decodedURI, v.args
	}
	switch {
	case absHost != "":
		rec.Host = absHost
	case v.haveHost:
		rec.Host = v.host
	case v.haveHTTPHost:
		rec.Host = v.httpHost
	default:
		rec.Host = v.serverName
	}
	rec.Host = r.in.get(rec.Host)

	// Addresses.
	peer := v.remoteAddr
	if v.realIP != "" && v.realIP != "-" {
		peer = v.realIP
	}
	var peerOK bool
	if peer != "" && peer != "-" {
		rec.Peer, peerOK = parseAddr(peer)
	}
	c := v.client
	switch {
	case r.single && c == peer && peerOK: // the usual $remote_addr, parsed once
		rec.Client = rec.Peer
	case r.single:
		a, ok := parseAddr(c)
		if !ok {
			return fmt.Sprintf("$%s: %q is not an IP address", r.f.segs[r.client].v.name, c)
		}
		rec.Client = a
	case c == "" || c == "-":
		rec.Client = rec.Peer
	default:
		a, ok := pick(c, r.o.ForwardedFor, r.forwarded, r.o.TrustedProxies, r.o.TrustedHops, rec.Peer)
		if !ok {
			return fmt.Sprintf("$%s: %q has no IP address", r.f.segs[r.client].v.name, c)
		}
		rec.Client = a
	}
	return ""
}

// pick chooses the client of an address list (see Pick), an RFC 7239
// Forwarded one if forwarded. ok is false if there is none and peer is
// not valid either.
func pick(list string, how Pick, forwarded bool, trusted []netip.Prefix, hops int, peer netip.Addr) (netip.Addr, bool) {
	if how == Leftmost {
		for rest := list; rest != ""; {
			var el string
			el, rest, _ = strings.Cut(rest, ",")
			if a, ok := parseHop(el); ok {
				return a, true
			}
		}
		return peer, peer.IsValid()
	}
	header := "X-Forwarded-For"
	if forwarded {
		header = "Forwarded"
	}
	lines := [1]string{list}
	client := proxy.ClientFromHeader(peer, lines[:], header, trusted, hops)
	return client, client.IsValid()
}

// parseHop parses one element of an address list: an address as
// parseAddr takes it, or an RFC 7239 Forwarded element
// (for=192.0.2.60;proto=https, for="[2001:db8::1]:4711"), whose for=
// address it takes.
func parseHop(el string) (netip.Addr, bool) {
	if strings.IndexByte(el, '=') < 0 {
		return parseAddr(el)
	}
	for rest := el; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, ";")
		k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
		if strings.EqualFold(k, "for") {
			return parseAddr(v)
		}
	}
	return netip.Addr{}, false
}

// requestLine splits a request line, "GET /path?q HTTP/1.1", as nginx
// logs it: the method, the target (which may hold spaces) and the
// protocol ("" for HTTP/0.9's "GET /path"). ok is false if it is not a
// request line: its method is not a token, its target is empty, or what
// follows the target is not an HTTP version.
func requestLine(s string) (method, target, proto string, ok bool) {
	method, rest, found := strings.Cut(s, " ")
	if !found || !isToken(method) || rest == "" {
		return "", "", "", false
	}
	if i := strings.LastIndexByte(rest, ' '); i >= 0 && strings.HasPrefix(rest[i+1:], "HTTP/") {
		target, proto = rest[:i], rest[i+1:]
	} else if i >= 0 {
		return "", "", "", false
	} else {
		target = rest
	}
	if target == "" {
		return "", "", "", false
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c < 0x20 || c == 0x7f {
			return "", "", "", false
		}
	}
	return method, target, proto, true
}

// isToken reports whether s is an RFC 9110 token (a method).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isVarChar(c) {
			continue
		}
		if strings.IndexByte("!#$%&'*+-.^`|~", c) < 0 {
			return false
		}
	}
	return true
}

// splitTarget splits a request-target into the host of an absolute URI
// (or of CONNECT's authority form), the raw path and the query.
func splitTarget(t, method string) (host, path, query string) {
	switch {
	case t[0] == '/' || t == "*":
	case hasPrefixFold(t, "http://") || hasPrefixFold(t, "https://"):
		rest := t[strings.Index(t, "://")+3:]
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		host = rest[:end]
		if at := strings.LastIndexByte(host, '@'); at >= 0 {
			host = host[at+1:]
		}
		t = rest[end:]
	case method == "CONNECT":
		return t, "", ""
	}
	path, query, _ = strings.Cut(t, "?")
	return host, path, query
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// decodePath percent-decodes a path as net/url does for URL.Path, or
// returns it as it is if it does not decode.
func decodePath(p string) string {
	if strings.IndexByte(p, '%') < 0 {
		return p
	}
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}
