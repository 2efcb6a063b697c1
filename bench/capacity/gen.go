package main

import (
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
)

// load is one open-loop run of bench/internal/loadgen against the arm at
// addr: GET /work at rate, for warm and then dur, every request given up
// timeout after its intended instant (its connection closed, and it
// counts as timed out), on a pool sized for every request of a timeout's
// worth being in flight at once (maxConns). Its outcomes are returned
// whole, for the caller to summarise over a window or second by second.
func load(addr string, rate float64, warm, dur, timeout time.Duration) loadgen.Load {
	return loadgen.Load{Addr: addr, Path: "/work", UserAgent: "capacity", Rate: rate, Warm: warm, Dur: dur,
		Timeout: timeout, MaxConns: maxConns(rate, timeout)}
}
