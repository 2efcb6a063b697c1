package proxy

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// slotQueues are the requests waiting for a slot of a policy's
// [policy.concurrency], per policy and client key, first come first
// served: a slot given back wakes the head of its key's queue, and a
// newcomer joins the queue behind anyone waiting rather than taking a
// slot before them. The head also looks again every slotPoll, for slots
// that other instances give back through Redis. Entries exist only while
// requests wait: the map is bounded by the requests waiting.
type slotQueues struct {
	mu sync.Mutex
	q  map[slotQueueKey][]chan struct{}
}

type slotQueueKey struct{ policy, key string }

// slotPoll is how often the head of a queue tries again without being
// woken (a slot freed on another instance).
const slotPoll = 20 * time.Millisecond

// takeSlot takes a slot of p's concurrency limit for key, waiting in the
// key's queue (at most Queue others, at most MaxWait) if need be. It
// reports false when none could be had; err is ctx's when the client
// left while waiting.
func (h *Handler) takeSlot(ctx context.Context, p *policy.Policy, key string) (perkey.Slot, bool, error) {
	pc := p.Concurrency
	qk := slotQueueKey{p.Name, key}
	h.slotq.mu.Lock()
	waiting := len(h.slotq.q[qk]) > 0
	h.slotq.mu.Unlock()
	if !waiting {
		if s, ok, err := p.Slots.Take(ctx, p.Name, key, pc.Limit, h.now()); ok || err != nil {
			return s, ok, err
		}
	}
	if pc.Queue == 0 || pc.MaxWait <= 0 {
		return perkey.Slot{}, false, nil
	}
	me := make(chan struct{}, 1)
	h.slotq.mu.Lock()
	if h.slotq.q == nil {
		h.slotq.q = map[slotQueueKey][]chan struct{}{}
	}
	if len(h.slotq.q[qk]) >= pc.Queue {
		h.slotq.mu.Unlock()
		return perkey.Slot{}, false, nil
	}
	h.slotq.q[qk] = append(h.slotq.q[qk], me)
	h.slotq.mu.Unlock()
	defer h.leaveSlotQueue(qk, me)
	h.metrics.queued(p.Name, 1)
	queuedAt := h.now()
	defer func() {
		h.metrics.queued(p.Name, -1)
		h.metrics.waited(p.Name, h.now().Sub(queuedAt))
	}()

	deadline := time.NewTimer(pc.MaxWait)
	defer deadline.Stop()
	poll := time.NewTicker(slotPoll)
	defer poll.Stop()
	for {
		h.slotq.mu.Lock()
		head := h.slotq.q[qk][0] == me
		h.slotq.mu.Unlock()
		if head {
			if s, ok, err := p.Slots.Take(ctx, p.Name, key, pc.Limit, h.now()); ok || err != nil {
				return s, ok, err
			}
		}
		select {
		case <-me:
		case <-poll.C:
		case <-deadline.C:
			return perkey.Slot{}, false, nil
		case <-ctx.Done():
			return perkey.Slot{}, false, ctx.Err()
		}
	}
}

// leaveSlotQueue takes me out of qk's queue, waking the next if me was at
// its head.
func (h *Handler) leaveSlotQueue(qk slotQueueKey, me chan struct{}) {
	h.slotq.mu.Lock()
	defer h.slotq.mu.Unlock()
	q := h.slotq.q[qk]
	i := slices.Index(q, me)
	if i < 0 {
		return
	}
	q = slices.Delete(q, i, i+1)
	if len(q) == 0 {
		delete(h.slotq.q, qk)
		return
	}
	h.slotq.q[qk] = q
	if i == 0 {
		wake(q[0])
	}
}

// giveSlot gives s back to p's store and wakes the head of key's queue.
func (h *Handler) giveSlot(p *policy.Policy, key string, s perkey.Slot) {
	p.Slots.Give(s)
	h.slotq.mu.Lock()
	if q := h.slotq.q[slotQueueKey{p.Name, key}]; len(q) > 0 {
		wake(q[0])
	}
	h.slotq.mu.Unlock()
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// concurrencyGate applies p's [policy.concurrency] to r from key: it
// returns the slot's release, or, when no slot could be had, answers r
// (the policy's reject status with Retry-After: 1; in shadow mode it lets
// r through holding nothing) and reports false for a request not to be
// forwarded. decision is updated as the metrics count it.
func (h *Handler) concurrencyGate(x *exchange, p *policy.Policy, key string, rj *rejection, decision *Decision) (release func(), ok bool) {
	r, rec := x.req.r, &x.w
	s, taken, err := h.takeSlot(r.Context(), p, key)
	switch {
	case taken:
		return func() { h.giveSlot(p, key, s) }, true
	case r.Context().Err() != nil:
		rec.status = statusClientClosed
		return nil, false
	case err != nil:
		// The store failed in a way its on_error did not cover.
		h.log.Error("concurrency slots failed; request forwarded", zap.String("policy", p.Name), zap.Error(err))
		return func() {}, true
	case p.Mode == config.Shadow:
		*decision = ShadowRejected
		return func() {}, true
	}
	*decision = Rejected
	x.rec.err = "concurrency limit"
	readRefusedBody(rec, r, x.req.srv.ClientBodyTimeout)
	reject(rec, p, limiter.Decision{RetryAfter: time.Second, Index: -1}, rj)
	return nil, false
}
