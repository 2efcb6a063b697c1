package redisstore

import (
	"slices"
	"sync"
	"time"
)

// breaker stops calls to one Redis node after repeated failures, so that
// an outage costs one timeout per request only until it opens; then
// decisions whose state lives on that node follow on_error at once. After
// a pause it lets one call through as a probe: its success closes the
// breaker, its failure opens it again. Times are the instants callers
// pass to Decide (nothing here reads the clock). Safe for concurrent use.
type breaker struct {
	node   string
	after  int           // consecutive failures that open it
	pause  time.Duration // how long it stays open before a probe
	notify func(node string, open bool, err error)

	mu        sync.Mutex
	failures  int
	openUntil time.Time // zero while closed
	probing   bool
	used      time.Time // the last instant a call asked it (guarded by breakers.mu)
}

// allow reports whether a call may go to Redis at now, and whether it is
// the probe of an open breaker.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true, false
	case now.Before(b.openUntil) || b.probing:
		return false, false
	}
	b.probing = true
	return true, true
}

// retryAt returns when the next probe may happen (for a deny's Retry-After).
func (b *breaker) retryAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openUntil
}

// open reports whether the breaker is open.
func (b *breaker) open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero()
}

// abandon records a call allowed at now whose outcome says nothing about
// Redis (its caller left first): a probe's turn passes to the next call.
func (b *breaker) abandon(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// done records the outcome of a call allowed at now.
func (b *breaker) done(now time.Time, probe bool, err error) {
	b.mu.Lock()
	wasOpen := !b.openUntil.IsZero()
	if probe {
		b.probing = false
	}
	var changed, open bool
	switch {
	case err == nil:
		b.failures = 0
		if wasOpen {
			b.openUntil, changed, open = time.Time{}, true, false
		}
	case probe || wasOpen:
		b.openUntil = now.Add(b.pause)
	default:
		if b.failures++; b.failures >= b.after {
			b.failures = 0
			b.openUntil, changed, open = now.Add(b.pause), true, true
		}
	}
	notify := b.notify
	b.mu.Unlock()
	if changed && notify != nil {
		notify(b.node, open, err)
	}
}

// forgetAfter is how long a node's breaker is kept while no decision asks
// it: a master replaced in a failover owns no slot any more, and its open
// breaker must not report the store degraded for ever.
const forgetAfter = 10 * time.Second

// breakers holds a breaker per Redis node (per Cluster master; one for a
// single node or Sentinel's master), so that a dead master sends only the
// decisions whose keys it holds to on_error. Safe for concurrent use.
type breakers struct {
	after  int
	pause  time.Duration
	notify func(node string, open bool, err error)

	mu     sync.Mutex
	m      map[string]*breaker
	latest time.Time // the latest instant a call passed
}

// get returns node's breaker, asked at now.
func (bs *breakers) get(node string, now time.Time) *breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if now.After(bs.latest) {
		bs.latest = now
	}
	b := bs.m[node]
	if b == nil {
		bs.prune()
		if bs.m == nil {
			bs.m = map[string]*breaker{}
		}
		b = &breaker{node: node, after: bs.after, pause: bs.pause, notify: bs.notify}
		bs.m[node] = b
	}
	if now.After(b.used) {
		b.used = now
	}
	return b
}

// prune forgets the breakers no call asked for forgetAfter. Requires
// bs.mu held.
func (bs *breakers) prune() {
	for node, b := range bs.m {
		if b.used.Before(bs.latest.Add(-forgetAfter)) {
			delete(bs.m, node)
		}
	}
}

// NodeState is the state of one Redis node's circuit breaker.
type NodeState struct {
	// Node is the node's host:port (Cluster, single node), or "sentinel"
	// for Sentinel's master.
	Node string
	// Open is true while decisions on the node follow on_error.
	Open bool
}

// states returns the breakers' states, sorted by node.
func (bs *breakers) states() []NodeState {
	bs.mu.Lock()
	bs.prune()
	list := make([]*breaker, 0, len(bs.m))
	for _, b := range bs.m {
		list = append(list, b)
	}
	bs.mu.Unlock()
	out := make([]NodeState, 0, len(list))
	for _, b := range list {
		out = append(out, NodeState{Node: b.node, Open: b.open()})
	}
	slices.SortFunc(out, func(a, b NodeState) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out
}
