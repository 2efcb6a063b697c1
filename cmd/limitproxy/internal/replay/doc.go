// Package replay is `limitproxy replay` (docs/replay.md): it
// runs access logs through a configuration's policies — the proxy's own
// canonical form, matcher, keys, penalty box and limits, through
// proxy.Evaluator — on the logs' clock, and reports per policy what would
// have been admitted, queued and rejected, and under which keys; beside a
// second configuration, what changed; and SVG plots of both over time.
//
// # The clock
//
// Each request is decided at the instant it arrived (logread's
// Record.Time: limitproxy's received field, which the log table's access_replay
// adds, or
// the logged end minus the logged duration), and what its
// answer owes limits that read answers (count, cost_from) is settled at
// the instant it ended (Record.End) with its logged status and cost: the
// answers of forwarded requests wait in a queue ordered by their end and
// are settled before the first request that arrives at or after it. Nothing
// sleeps and nothing reads the wall clock, so a replay of the same logs
// always gives the same decisions, and a day of logs replays in seconds.
//
// # What is and is not reproduced
//
// Each configuration gets a memory store of its own (store.max_keys
// keys, whatever its backend) with virtual leaky-bucket queues (a queued
// request's place on the schedule is decided, nobody waits in it) and a
// memory penalty box. Concurrency limits ([policy.concurrency]) are not
// replayed: they depend on how long requests were in flight against the
// upstream the replayed configuration would have had, which a log does
// not tell; such a policy's requests are decided by its rate limits
// alone. A request the replay forwards is answered as the log says it
// was, even where the logged proxy had refused it itself. Client
// addresses, query strings and headers are those the log holds: nginx's
// log_format decides (logread); limitproxy's own log holds them only
// with access_replay = true in its log table, and without them every request is
// replayed from Placeholder under one ip key (Report.Read.NoClient).
// Per-key overrides (admin API) and reloads within the logged period are
// not replayed.
//
// # Keys
//
// Client keys are reported hashed by default: 16 hex digits of
// HMAC-SHA-256 under a secret drawn for the run, as the admin API's top
// offenders are. The top keys are counted in Space-Saving summaries of
// 4096 counters (internal/topk): exact while a list has at most that many
// distinct keys, and never off by more than its total over 4096.
package replay
