// Package logread reads access logs for `limitproxy replay`:
// limitproxy's own access log and nginx's, one Record per request, in file
// order, and Merge puts several files in time order.
//
// # Formats
//
// limitproxy's access log is what proxy's (*Handler).logAccess
// writes through the zap logger cmd/limitproxy/internal/server's newLogger builds: in
// JSON (the default), one object per line,
//
//	{"level":"info","ts":"2026-11-22T18:46:44.475Z","logger":"access","msg":"request","method":"GET","host":"127.0.0.1:8080","path":"/reports","status":200,"duration":0.201485348,"policy":"reports","decision":"queued","upstream":"legacy","queue_wait":0.200049031}
//
// with an "error" field on a failed exchange; with [log] format =
// "console", the same fields after "ts<TAB>LEVEL<TAB>access<TAB>request<TAB>".
// Lines of other loggers in the same stream are skipped. The log has no
// client address, no query and no headers (docs/metrics.md), and rejected
// requests are written at debug level only, so a log written at the
// default info level lacks them: a replay that must reproduce decisions
// needs level = "debug", and keys other than host, method and path cannot
// be rebuilt from it. zap writes invalid UTF-8 as U+FFFD, so such a path
// does not come back byte for byte. The livelog directory's test runs a
// real limitproxy and reads its log back, so that a change to the log's
// fields breaks a test here.
//
// nginx's log is read by its log_format (NginxOptions.LogFormat; Combined
// by default). These variables are interpreted (others go to Record.Extra):
//
//	$remote_addr, $realip_remote_addr   Peer, and Client if ClientVar
//	$http_x_forwarded_for, any $http_NAME  Header (and Client if ClientVar)
//	$remote_user                        User
//	$msec, $time_iso8601, $time_local   End, in this order of preference
//	$request                            Request, Method, Target, Path, RawQuery, Proto
//	$request_method, $request_uri       Method, Target (when there is no $request)
//	$uri, $args (or $query_string)      Path, RawQuery (when there is no target)
//	$server_protocol                    Proto
//	$host, $http_host, $server_name     Host, in this order, after an absolute URI's host
//	$status, $body_bytes_sent, $bytes_sent, $request_time
//
// Values are decoded as the format's escape= wrote them (\xHH by default;
// the \" and \\ of Apache-style logs too), and "-" is an absent value.
//
// # Time
//
// Both formats write a line when its request ends. Record.Time is the
// arrival, End minus the logged duration when there is one; see Record
// for the resolution each format gives. Lines are therefore out of
// arrival order by up to the longest request; Merge sorts them within a
// window (MergeOptions.Slack).
//
// # Errors
//
// A line that cannot be read is a *LineError naming file:line and what was
// wrong; the reader moves past it, so a caller that wants to skip bad
// lines calls Next again (and finds their number in Stats.Malformed). Any
// other error is final. Records of a line whose request line is not one
// (TLS handshakes nginx logs with status 400) are not errors: their
// Method is "".
//
// # Cost
//
// A reader makes one string of each line and slices the record's values
// from it (more only for values that had escapes to decode); times are
// parsed by hand, with the second cached across lines. The benchmarks
// (BenchmarkReadJSON, BenchmarkReadCombined) report lines per second and
// allocations per line.
//
// Readers and Mergers are not safe for concurrent use; a LogFormat is.
package logread
