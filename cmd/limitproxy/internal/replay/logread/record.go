package logread

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Format names an access-log format.
type Format string

// The formats a Reader reads. Auto is the zero value of Options.Format:
// detect the format from the first non-empty line.
const (
	Auto Format = ""
	// Limitproxy is limitproxy's own access log, in either encoding [log]
	// format selects: "json" (one object per line) or "console".
	Limitproxy Format = "limitproxy"
	// Nginx is an nginx access log in a log_format (NginxOptions.LogFormat;
	// combined by default).
	Nginx Format = "nginx"
)

// Has says which of a Record's optional values its line carried. A value
// whose bit is clear is the zero value and means "not logged", not zero.
type Has uint16

// The bits of Has.
const (
	HasTime      Has = 1 << iota // End (and so Time) came from the line
	HasDuration                  // Duration: limitproxy's duration or nginx's $request_time
	HasStatus                    // Status
	HasBodyBytes                 // BodyBytes: nginx's $body_bytes_sent
	HasBytesSent                 // BytesSent: nginx's $bytes_sent
	HasOutcome                   // Policy, Decision, Upstream, QueueWait: limitproxy's log only
	// HasMaskedClient: limitproxy's client field was there but not an
	// address ([log] client_address = "masked" or "hashed"); Client is
	// the zero Addr.
	HasMaskedClient
	// HasReplayFields: limitproxy's line carried [log] access_replay's
	// fields (received, target, h:NAME): Time is exact, Target and the
	// headers the policies read are there.
	HasReplayFields
)

// Field is one named value of a Record: a request header (Record.Header)
// or a value the reader does not interpret (Record.Extra).
type Field struct {
	Name, Value string
	// Hashed reports that Value is the keyed hash of what the request
	// held ([log] access_replay = "hashed": an h#:NAME or c#:PATH field):
	// equal where the values were, and keyed by as they were, but not
	// the value a match compares.
	Hashed bool
}

// Record is one request of an access log, as a replay needs it. Its
// strings share the memory of the line they came from (one allocation per
// line); a caller that keeps one string of many records for long should
// copy it (strings.Clone) so that it does not keep whole lines alive. The
// low-cardinality strings (Method, Proto, Host, Policy, Decision,
// Upstream) are interned and never do.
type Record struct {
	// File is the name the reader was given for its input; Line is the
	// line's number in it, from 1.
	File string
	Line int
	// Format is the format the line was read in.
	Format Format
	// Has says which optional values the line carried.
	Has Has

	// Time is the best estimate of the instant the request arrived, which
	// is the instant the proxy's limiters saw. Both formats log the end
	// of the request (the line is written then), so Time is End minus
	// Duration when the line has a duration, and End otherwise:
	//   - limitproxy: ts - duration. ts is truncated to the millisecond,
	//     so Time is up to 1 ms before the true arrival.
	//   - nginx: $msec (ms), else $time_iso8601 or $time_local (whole
	//     seconds, truncated), minus $request_time when logged. With
	//     $time_local and $request_time, Time is up to 1 s before the
	//     true arrival; without $request_time it is the end, late by the
	//     request's duration.
	// The zero Time means the line had none (Has&HasTime == 0).
	Time time.Time
	// End is the time the line records, as logged (with the logged UTC
	// offset; $msec in UTC).
	End time.Time
	// Resolution is the granularity of End: 1 ms for limitproxy's ts and
	// nginx's $msec, 1 s for $time_local and $time_iso8601, 0 if none.
	Resolution time.Duration

	// Client is the address the request is attributed to: for nginx, the
	// address in NginxOptions.ClientVar (see there); for limitproxy's
	// log, its remote_ip field, which the proxy does not write today, so
	// Client is the zero (invalid) Addr. IPv4-mapped IPv6 addresses are
	// unmapped and ports dropped.
	Client netip.Addr
	// Peer is the address of the connection's other end, as the logging
	// server saw it: nginx's $realip_remote_addr if logged, else
	// $remote_addr; limitproxy's remote_addr field if present (it is not
	// written today). A replay that applies its own trusted_proxies uses
	// Peer as RemoteAddr together with the X-Forwarded-For header.
	Peer netip.Addr
	// User is nginx's $remote_user ("" for "-").
	User string

	// Method is the request method as sent. It is "" for nginx's lines
	// whose $request is not a request line (TLS handshakes sent to a
	// plain-text port, scanners' garbage; nginx logs them with status
	// 400): a replay skips those, as limitproxy's HTTP server refuses them
	// before any policy sees them.
	Method string
	// Host is the request's host: limitproxy's host field (canonical,
	// port kept); for nginx, the authority of an absolute-form target if
	// there is one, else $host, else $http_host, else $server_name.
	Host string
	// Request is nginx's $request, the request line as logged (with \x
	// escapes decoded); "" for limitproxy's log.
	Request string
	// Target is the request-target as logged: nginx's from $request or
	// $request_uri (path and query, or an absolute URI). limitproxy logs
	// only the decoded path, so Target is "" for its lines.
	Target string
	// Path is the path, percent-decoded as net/url decodes URL.Path (if
	// it does not decode, it is left as logged); limitproxy's path field
	// as logged (already canonical and decoded). A replay builds requests
	// from Method, Host, Path, RawQuery and Header, and may use Target
	// for the path exactly as sent.
	Path string
	// RawQuery is the query without its '?', as sent; limitproxy never
	// logs the query, so it is "" there (unless a query field is present).
	RawQuery string
	// Proto is the protocol from the request line ("HTTP/1.1"), or nginx's
	// $server_protocol; "" when not logged.
	Proto string
	// Header holds the request headers the line carries, under canonical
	// names: one per nginx $http_NAME variable ($http_user_agent as
	// User-Agent, $http_x_forwarded_for as X-Forwarded-For), in format
	// order, omitted when logged as "-"; limitproxy's, with [log]
	// access_replay, those its policies read (h:NAME fields, and with
	// "hashed" h#:NAME fields, Hashed).
	Header []Field
	// Claims holds, by claim path, the JSON text of each claim of the
	// request's verified token that its policies read (limitproxy's
	// c:PATH fields, with [log] access_replay and an [identity]; a c#:PATH
	// field's hash as a JSON string, Hashed); none for a request without
	// a valid token.
	Claims []Field

	// Status is the status sent to the client (HasStatus).
	Status int
	// BodyBytes is nginx's $body_bytes_sent and BytesSent its $bytes_sent,
	// in bytes (HasBodyBytes, HasBytesSent).
	BodyBytes, BytesSent int64
	// Duration is how long the request took, from arrival to the end of
	// the response: limitproxy's duration (queue wait included), nginx's
	// $request_time (ms resolution). HasDuration says if it was logged.
	Duration time.Duration

	// Policy, Decision, Upstream, QueueWait and Error are limitproxy's
	// outcome fields exactly as it logged them (HasOutcome): the policy
	// that matched ("" if none); the decision, the proxy's constant
	// (proxy.Allowed …: "allowed", "queued", "rejected",
	// "shadow_rejected", "shed", "unmatched", "invalid", "skipped", and
	// any value a later version adds, passed through unchanged); the
	// upstream it was forwarded to ("" if none); the time spent in a
	// leaky-bucket queue; and the error field of a failed exchange (""
	// if none). Fields of the access line not named here (a later
	// version's "cost", say) are in Extra.
	Policy, Decision, Upstream string
	QueueWait                  time.Duration
	Error                      string

	// Extra holds the line's values this package does not interpret, in
	// line order: for limitproxy's log, fields other than the known ones
	// (a string field's value decoded, any other value as its JSON text);
	// for nginx, the variables other than those listed in the package
	// documentation, under the variable's name without '$'
	// ("upstream_addr", "cookie_session", "arg_page"), "-" as "".
	Extra []Field
}

// HeaderValue returns the value of the header name (canonical form, as
// "User-Agent") and whether the line carried it.
func (r *Record) HeaderValue(name string) (string, bool) {
	for _, f := range r.Header {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// ExtraValue returns the value of the extra field name and whether the
// line carried it.
func (r *Record) ExtraValue(name string) (string, bool) {
	for _, f := range r.Extra {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// Reader reads the records of access logs, in order. Readers are not safe
// for concurrent use.
type Reader interface {
	// Next returns the next record. At the end it returns io.EOF. A line
	// that cannot be read as a record gives a *LineError (errors.Is
	// ErrMalformed), after which Next may be called again to go on with
	// the next line; any other error (a failed read, a corrupt gzip
	// stream) is final and every later call returns it again.
	Next() (Record, error)
	// Stats returns the reader's counts so far.
	Stats() Stats
}

// Stats counts what a Reader has read.
type Stats struct {
	// Lines is the number of lines read, blank lines included.
	Lines int64
	// Records is the number of records returned.
	Records int64
	// Skipped is the number of lines that were neither a record nor an
	// error: blank lines, and in limitproxy's log every line that is not
	// an access line (start, reload and error messages).
	Skipped int64
	// Malformed is the number of *LineErrors returned.
	Malformed int64
	// Late is, for a Merge, the number of records that came out before
	// one with an earlier Time because they were further out of order
	// than MergeOptions.Slack. Readers of one file leave it 0.
	Late int64
}

func (s *Stats) add(o Stats) {
	s.Lines += o.Lines
	s.Records += o.Records
	s.Skipped += o.Skipped
	s.Malformed += o.Malformed
	s.Late += o.Late
}

// ErrMalformed is what every *LineError is (errors.Is).
var ErrMalformed = errors.New("malformed log line")

// LineError is a line that could not be read as a record: where it is and
// what was wrong. The reader has moved past it. Readers return it as a
// pointer; it is not changed after.
type LineError struct {
	File string // the reader's name for its input
	Line int    // the line's number, from 1
	Msg  string // what was wrong: lowercase, no final period
}

// Error returns "file:line: msg".
func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Is reports whether target is ErrMalformed.
func (e *LineError) Is(target error) bool { return target == ErrMalformed }
