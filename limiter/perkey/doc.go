// Package perkey holds the per-client features a store offers beside
// rate limits, each an interface that limiter/memstore and
// limiter/redisstore implement: Bans (a penalty box that bans a client
// key that broke a limit, escalating for repeat offenders), Overrides
// (live replacements of one client key's limits) and Slots (requests in
// flight per client key, for a concurrency limit). The proxy uses them;
// a caller of limiter.Limiter alone never needs them, and a third store
// may implement none, some or all (limitertest has a suite for each:
// RunBans, RunOverrides, RunSlots).
//
// They are apart from package limiter because they are not rate limits:
// each has its own state and records, keyed by policy name and client
// key, and none changes what Limiter.Allow decides. The name says what
// they share: state per client key.
package perkey
