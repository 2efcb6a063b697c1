package logread

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// limitproxy's access line, as proxy's (*Handler).logAccess
// writes it through the logger cmd/limitproxy/internal/server's newLogger builds (zap,
// production encoder config, ISO8601TimeEncoder, seconds for durations):
//
//	{"level":"info","ts":"2026-11-22T18:46:44.475Z","logger":"access","msg":"request","method":"GET","host":"127.0.0.1:8080","path":"/reports","status":200,"duration":0.201485348,"policy":"reports","decision":"queued","upstream":"legacy","queue_wait":0.200049031}
//
// and with [log] format = "console", the same fields after a tab-separated
// head:
//
//	2026-11-22T18:46:44.475Z	INFO	access	request	{"method": "GET", "host": …}
//
// Access lines are those with logger "access" and msg "request"; the other
// lines of the stream (start, reload, upstream errors) are skipped.

// Access-line field names.
const (
	keyLevel      = "level"
	keyTS         = "ts"
	keyLogger     = "logger"
	keyMsg        = "msg"
	keyCaller     = "caller"
	keyStacktrace = "stacktrace"

	accessLogger = "access"
	accessMsg    = "request"
)

// LimitproxyReader reads limitproxy's own access log (see Record for the
// fields). Not safe for concurrent use.
type LimitproxyReader struct {
	lines *lines
	st    Stats
	clk   clock
	in    interner
	fl    fields
	extra []Field // scratch for Record.Extra

	host, policy, upstream string // the last interned, for interner.cached
}

// NewLimitproxyReader returns a reader of limitproxy's access log, in its
// JSON or console encoding, from r. name is the file name records and
// errors carry. Of o, only MaxLineBytes applies. r is not closed.
func NewLimitproxyReader(r io.Reader, name string, o Options) *LimitproxyReader {
	lr := &LimitproxyReader{in: interner{}}
	lr.lines = newLines(r, name, o.MaxLineBytes, &lr.st)
	return lr
}

// Stats returns the reader's counts so far.
func (r *LimitproxyReader) Stats() Stats { return r.st }

// Next returns the next access line's record; see Reader.
func (r *LimitproxyReader) Next() (Record, error) {
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
		access, msg := r.parse(&rec, string(b))
		if msg != "" {
			return Record{}, r.lines.errorf("%s", msg)
		}
		if !access {
			r.st.Skipped++
			continue
		}
		rec.File, rec.Line, rec.Format = r.lines.name, r.lines.n, Limitproxy
		r.st.Records++
		return rec, nil
	}
}

// parse reads one line. access is false for a line of another logger; msg
// says what is wrong with a malformed one.
func (r *LimitproxyReader) parse(rec *Record, line string) (access bool, msg string) {
	i := skipSpace(line, 0)
	var ts, logger, message string
	if i < len(line) && line[i] == '{' {
		return r.object(rec, line, i, "", "", "")
	}
	// The console encoding: ts, LEVEL, logger, msg, then the fields.
	ts, rest, ok := strings.Cut(line[i:], "\t")
	if !ok || !looksLikeISO(ts) {
		return false, "neither a JSON object nor a console-encoded log line"
	}
	_, rest, _ = strings.Cut(rest, "\t") // the level
	logger, rest, _ = strings.Cut(rest, "\t")
	if logger != accessLogger {
		return false, ""
	}
	message, rest, _ = strings.Cut(rest, "\t")
	if message != accessMsg {
		return false, ""
	}
	j := skipSpace(rest, 0)
	if j >= len(rest) || rest[j] != '{' {
		return false, "console access line without its fields"
	}
	// rest ends line: the object's columns are the line's.
	return r.object(rec, line, len(line)-len(rest)+j, ts, accessLogger, accessMsg)
}

// looksLikeISO reports whether s starts like an ISO 8601 date.
func looksLikeISO(s string) bool {
	return len(s) >= 19 && isDigit(s[0]) && isDigit(s[3]) && s[4] == '-' && s[7] == '-'
}

// The fields an access line must have: without them it says too little to
// be replayed.
const (
	seenTS = 1 << iota
	seenMethod
	seenHost
	seenPath
	seenStatus
	seenPolicy
	seenDecision
	seenAll = seenTS | seenMethod | seenHost | seenPath | seenStatus | seenPolicy | seenDecision
)

var seenNames = [...]string{"ts", "method", "host", "path", "status", "policy", "decision"}

// object reads the JSON object at line[i]. ts, logger and message are the
// console head's, if any.
func (r *LimitproxyReader) object(rec *Record, line string, i int, ts, logger, message string) (access bool, msg string) {
	var (
		seen     int
		tsIsNum  bool
		fieldErr string
		extra    = r.extra[:0]
	)
	if ts != "" {
		seen |= seenTS
	}
	i = skipSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		i++
	} else {
		for {
			if i >= len(line) || line[i] != '"' {
				return false, fmt.Sprintf("column %d: expected a field name", i+1)
			}
			key, next, ok := jsonString(line, i)
			if !ok {
				return false, fmt.Sprintf("column %d: malformed field name", i+1)
			}
			i = skipSpace(line, next)
			if i >= len(line) || line[i] != ':' {
				return false, fmt.Sprintf("column %d: expected ':' after %q", i+1, key)
			}
			i = skipSpace(line, i+1)
			if i >= len(line) {
				return false, fmt.Sprintf("field %q has no value", key)
			}
			var (
				val   string
				isStr = line[i] == '"'
			)
			if isStr {
				val, next, ok = jsonString(line, i)
			} else {
				next, ok = skipValue(line, i)
				if ok {
					val = line[i:next]
				}
			}
			if !ok {
				return false, fmt.Sprintf("column %d: malformed value of %q", i+1, key)
			}
			// A field's error counts only on an access line: other lines
			// may have fields of the same names and other types.
			if m := r.field(rec, key, val, isStr, &seen, &tsIsNum, &ts, &logger, &message, &extra); m != "" && fieldErr == "" {
				fieldErr = m
			}
			i = skipSpace(line, next)
			if i < len(line) && line[i] == ',' {
				i = skipSpace(line, i+1)
				continue
			}
			if i < len(line) && line[i] == '}' {
				i++
				break
			}
			return false, fmt.Sprintf("column %d: expected ',' or '}'", i+1)
		}
	}
	if i = skipSpace(line, i); i != len(line) {
		return false, fmt.Sprintf("column %d: text after the object", i+1)
	}
	r.extra = extra[:0]
	if logger != accessLogger || message != accessMsg {
		return false, ""
	}
	if fieldErr != "" {
		return false, fieldErr
	}
	if seen != seenAll {
		for k, name := range seenNames {
			if seen&(1<<k) == 0 {
				return false, "access line without " + name
			}
		}
	}
	var (
		ok  bool
		res time.Duration
	)
	if tsIsNum {
		rec.End, res, ok = epoch(ts)
		res = max(res, time.Millisecond) // zap writes floats: below it is noise
	} else {
		rec.End, res, ok = r.clk.iso(ts)
	}
	if !ok {
		return false, fmt.Sprintf("ts: %q is not a time", ts)
	}
	rec.Has |= HasTime | HasOutcome
	rec.Resolution = res
	rec.Time = rec.End
	if rec.Has&HasDuration != 0 {
		rec.Time = rec.End.Add(-rec.Duration)
	}
	// [log] access_replay's fields (docs/replay.md): received, the exact
	// instant the limits decided at; h:NAME, a request header's field
	// lines joined by "\n"; c:PATH, a verified claim's JSON text; with
	// access_replay = "hashed", h#:NAME and c#:PATH, the keyed hash of
	// what a key read (a claim's as a JSON string).
	kept := extra[:0]
	var hdr, claims []Field
	for _, f := range extra {
		switch {
		case f.Name == "received":
			t, err := time.Parse(time.RFC3339Nano, f.Value)
			if err != nil {
				return false, fmt.Sprintf("received: %q is not a time", f.Value)
			}
			rec.Time, rec.Resolution = t, time.Nanosecond
			rec.Has |= HasReplayFields
			if rec.Has&HasDuration != 0 {
				// ts is truncated to the millisecond: the end is
				// received plus the duration, to the nanosecond.
				rec.End = t.Add(rec.Duration)
			}
		case strings.HasPrefix(f.Name, "h:"), strings.HasPrefix(f.Name, "h#:"):
			name, hashed := strings.CutPrefix(f.Name, "h#:")
			if !hashed {
				name = f.Name[2:]
			}
			for v := range strings.SplitSeq(unescapeReplay(f.Value), "\n") {
				hdr = append(hdr, Field{Name: name, Value: v, Hashed: hashed})
			}
		case strings.HasPrefix(f.Name, "c#:"):
			v, _ := json.Marshal(unescapeReplay(f.Value))
			claims = append(claims, Field{Name: f.Name[3:], Value: string(v), Hashed: true})
		case strings.HasPrefix(f.Name, "c:"):
			v := unescapeReplay(f.Value)
			if !json.Valid([]byte(v)) {
				return false, fmt.Sprintf("%s: %q is not JSON", f.Name, f.Value)
			}
			claims = append(claims, Field{Name: f.Name[2:], Value: v})
		case f.Name == "target":
			rec.Target = unescapeReplay(f.Value)
		default:
			kept = append(kept, f)
		}
	}
	if hdr != nil {
		rec.Header = r.fl.clone(hdr)
	}
	if claims != nil {
		rec.Claims = r.fl.clone(claims)
	}
	rec.Extra = r.fl.clone(kept)
	return true, ""
}

// field stores one field of an access line in rec and returns what is
// wrong with it, if anything.
func (r *LimitproxyReader) field(rec *Record, key, val string, isStr bool, seen *int, tsIsNum *bool,
	ts, logger, message *string, extra *[]Field) string {
	var (
		dur  *time.Duration // a number of seconds goes here
		want = true         // the value must be a string
	)
	switch key {
	case keyTS:
		*ts, *tsIsNum = val, !isStr
		*seen |= seenTS
		want = isStr
	case keyLogger:
		*logger = val
	case keyMsg:
		*message = val
	case keyLevel, keyCaller, keyStacktrace:
		want = isStr
	case "method":
		*seen |= seenMethod
		rec.Method = r.in.method(val)
	case "host":
		*seen |= seenHost
		rec.Host = r.in.cached(&r.host, val)
	case "path":
		*seen |= seenPath
		rec.Path = val
	case "status":
		*seen |= seenStatus
		n, ok := digits(val)
		if isStr || !ok || n > 999 {
			return fmt.Sprintf("status: %s is not a status", val)
		}
		rec.Status = n
		rec.Has |= HasStatus
		want = false
	case "duration":
		rec.Has |= HasDuration
		dur, want = &rec.Duration, false
	case "policy":
		*seen |= seenPolicy
		rec.Policy = r.in.cached(&r.policy, val)
	case "decision":
		*seen |= seenDecision
		rec.Decision = decision(val)
		if rec.Decision == "" && val != "" {
			rec.Decision = r.in.get(val)
		}
	case "upstream":
		rec.Upstream = r.in.cached(&r.upstream, val)
	case "queue_wait":
		dur, want = &rec.QueueWait, false
	case "error":
		rec.Error = val
	// client: the proxy's (remote_ip, remote_addr: read if a later
	// version adds them under these names, STYLE.md's remote_ip).
	case "client", "remote_ip", "remote_addr":
		if key == "client" && val == "" {
			break // no address (a unix socket)
		}
		a, ok := parseAddr(val)
		if key == "client" && isStr && !ok {
			// [log] client_address = "masked" ("203.0.113.0/24") or
			// "hashed": not an address to key by.
			rec.Has |= HasMaskedClient
			break
		}
		if !isStr || !ok {
			return fmt.Sprintf("%s: %s is not an address", key, val)
		}
		if key != "remote_addr" {
			rec.Client = a
		} else {
			rec.Peer = a
		}
	case "query":
		rec.RawQuery = val
	default:
		*extra = append(*extra, Field{Name: key, Value: val})
		want = isStr
	}
	if dur != nil {
		v, _, ok := seconds(val)
		if isStr || !ok {
			return fmt.Sprintf("%s: %s is not a number of seconds", key, val)
		}
		*dur = v
	}
	if want && !isStr {
		return fmt.Sprintf("%s: %s is not a string", key, val)
	}
	return ""
}

// decision returns the constant for one of the proxy's decisions, "" for
// another value.
func decision(v string) string {
	switch v {
	case "allowed":
		return "allowed"
	case "rejected":
		return "rejected"
	case "queued":
		return "queued"
	case "shadow_rejected":
		return "shadow_rejected"
	case "unmatched":
		return "unmatched"
	case "skipped":
		return "skipped"
	case "invalid":
		return "invalid"
	case "shed":
		return "shed"
	}
	return ""
}

// parseAddr parses a client address as logs write it: IPv4 or IPv6,
// optionally with a port ("203.0.113.7:52311", "[2001:db8::1]:443") or in
// brackets, with white space and double quotes around it trimmed.
// IPv4-mapped IPv6 addresses are unmapped.
func parseAddr(s string) (netip.Addr, bool) {
	for s != "" && (s[0] == ' ' || s[0] == '\t' || s[0] == '"') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t' || s[len(s)-1] == '"') {
		s = s[:len(s)-1]
	}
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 || (end != len(s)-1 && s[end+1] != ':') {
			return netip.Addr{}, false
		}
		if end != len(s)-1 {
			if _, ok := digits(s[end+2:]); !ok {
				return netip.Addr{}, false
			}
		}
		s = s[1:end]
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// One colon: IPv4 with a port.
		if _, ok := digits(s[i+1:]); !ok {
			return netip.Addr{}, false
		}
		s = s[:i]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// unescapeReplay reads back a value the proxy wrote escaped for replay
// ([log] access_replay): %XX is the byte XX ('%' itself is always %25).
func unescapeReplay(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+3 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}
