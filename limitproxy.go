// Package limitproxy is a reverse proxy that enforces rate limits in front
// of HTTP upstreams. The command is cmd/limitproxy; the parts that can be
// used on their own are public packages:
//
//   - [github.com/limitproxy/limitproxy/limiter]: five exact, clock-free
//     rate-limit algorithms bound to a Store, with an in-memory store
//     (limiter/memstore), a Redis store (limiter/redisstore) and a
//     conformance suite any store can run (limiter/limitertest);
//   - [github.com/limitproxy/limitproxy/policy]: the TOML policies, read and
//     validated with file:line:col errors (policy/config) and compiled into
//     an immutable set that is swapped atomically on reload;
//   - [github.com/limitproxy/limitproxy/proxy]: the data path as an
//     http.Handler: canonical request, match, key, limits, then reject, wait
//     or forward.
//
// This package holds only the example configuration.
package limitproxy

import _ "embed"

// ExampleConfig is config.example.toml: every key, commented. The demo
// command runs it, and it is a starting point for a configuration file.
//
//go:embed config.example.toml
var ExampleConfig []byte
