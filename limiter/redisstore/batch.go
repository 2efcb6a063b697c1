package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher batches concurrent decisions automatically. A decision joins
// the queue; if fewer than maxInFlight batches are in flight, its caller
// sends everything queued as one batch, and while a batch is in flight new
// decisions gather for the next. Under light load a batch holds one
// decision and nothing waits; under heavy load Redis answers many
// decisions per system call and per script call, which is where its
// throughput goes: on one node (or Sentinel's master) a batch is one
// EVALSHA deciding them all in order; on Redis Cluster, whose decisions
// live in different slots, it is one EVALSHA per master, sent to all at
// once, deciding that master's decisions whatever their slots (a decision
// whose slot is moving is sent again on its own). Either way a decision
// costs one round trip (two while its slot moves). No goroutine exists while
// nothing is queued. Safe for concurrent use.
type batcher struct {
	c       redis.UniversalClient
	timeout time.Duration
	slack   int                  // the script's TTL slack in ms (see decide.lua)
	cluster *redis.ClusterClient // nil unless Redis Cluster
	noCross atomic.Bool          // Redis cannot run decideCross: each decision alone
	// Script calls sent, decisions they carried, and decisions a
	// cross-slot call left to a call of their own (for tests).
	scripts, decided, moved atomic.Int64

	mu       sync.Mutex
	pending  []*call
	inFlight int
}

const (
	maxInFlight = 4   // batches in flight at once
	maxBatch    = 256 // decisions in one batch
)

// call is one queued decision: its keys, and its arguments as decide.lua
// takes them for one decision (a head, then one per limit).
type call struct {
	keys []string
	args []any
	res  []int64
	err  error
	done chan struct{}
}

// run decides through the batcher. The wait is bounded by the batch's
// deadline (the store's timeout from when it is sent; a decision queued
// behind batches in flight waits for one of them first, so at most about
// two timeouts in all) and by ctx.
func (b *batcher) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	c := &call{keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	lead := b.inFlight < maxInFlight
	if lead {
		b.inFlight++
	}
	b.mu.Unlock()
	if lead {
		b.flushNext()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// flushNext sends one batch of what is queued. If more has queued up
// meanwhile, it hands the rest to a goroutine that keeps flushing until
// the queue is empty, so that no caller waits for others' decisions.
// Called with one in-flight slot held, which it passes on or releases.
func (b *batcher) flushNext() {
	b.mu.Lock()
	batch := b.take()
	b.mu.Unlock()
	b.flush(batch)
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go func() {
		for {
			b.mu.Lock()
			batch := b.take()
			if len(batch) == 0 {
				b.inFlight--
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			b.flush(batch)
		}
	}()
}

// take removes up to maxBatch queued calls. Requires b.mu held.
func (b *batcher) take() []*call {
	n := min(len(b.pending), maxBatch)
	batch := b.pending[:n:n]
	b.pending = b.pending[n:]
	if len(b.pending) == 0 {
		b.pending = nil
	}
	return batch
}

// flush sends calls as one batch and hands each its reply. A script
// Redis does not know yet (a new or restarted server) is loaded, and the
// batch sent again.
func (b *batcher) flush(calls []*call) {
	if len(calls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	if b.cluster != nil {
		b.flushCluster(ctx, calls)
		return
	}
	keys, args := b.join(calls)
	b.scripts.Add(1)
	b.decided.Add(int64(len(calls)))
	res, err := decideScript.EvalSha(ctx, b.c, keys, args...).Int64Slice()
	if isNoScript(err) {
		res, err = decideScript.Eval(ctx, b.c, keys, args...).Int64Slice()
	}
	for _, c := range calls {
		// Each decision's reply: replyValues per limit and its instant.
		n := replyValues*len(c.keys) + 1
		switch {
		case err != nil:
			c.err = err
		case len(res) < n:
			c.err = errors.New("unexpected reply from the decide script")
		default:
			c.res, res = res[:n:n], res[n:]
		}
		close(c.done)
	}
}

// flushCluster sends calls to each master (by the client's slot map), to
// all at once: go-redis fails every command of a pipeline whose retry
// outlives its context, so one dead master would otherwise fail the
// decisions of the healthy ones sent with it. A master's decisions, whose
// keys are in many slots, are one script call (crossSlot); a decision
// alone, or one whose master the slot map does not know, is a call of its
// own, routed by its keys.
func (b *batcher) flushCluster(ctx context.Context, calls []*call) {
	byNode := map[*redis.Client][]*call{}
	var unknown []*call
	for _, c := range calls {
		m, err := b.cluster.MasterForKey(ctx, c.keys[0])
		if err != nil {
			unknown = append(unknown, c)
			continue
		}
		byNode[m] = append(byNode[m], c)
	}
	var wg sync.WaitGroup
	for m, group := range byNode {
		if len(group) == 1 || b.noCross.Load() {
			wg.Go(func() { b.each(ctx, group) })
			continue
		}
		wg.Go(func() { b.crossSlot(ctx, m, group) })
	}
	if len(unknown) > 0 {
		wg.Go(func() { b.each(ctx, unknown) })
	}
	wg.Wait()
}

// each decides calls with a script call each, sent at once, each routed
// by the Cluster client by its keys' slot (following MOVED and ASK). Not
// one pipeline: when the first command a node answers in a pipeline gets
// a retryable error (TRYAGAIN while a slot moves), go-redis sends the
// node's commands again, those that ran included, and a command it had
// already redirected may then run on two nodes: decisions counted twice.
// A command alone is sent again when a redirect, TRYAGAIN or NOSCRIPT
// says it did not run (and, as go-redis's Cluster client does for any
// command, after a connection error).
func (b *batcher) each(ctx context.Context, calls []*call) {
	b.scripts.Add(int64(len(calls)))
	b.decided.Add(int64(len(calls)))
	var wg sync.WaitGroup
	for _, c := range calls[1:] {
		wg.Go(func() { b.one(ctx, c) })
	}
	b.one(ctx, calls[0])
	wg.Wait()
}

// one decides c with a script call of its own.
func (b *batcher) one(ctx context.Context, c *call) {
	keys, args := b.join([]*call{c})
	res, err := decideScript.EvalSha(ctx, b.c, keys, args...).Int64Slice()
	if isNoScript(err) {
		res, err = decideScript.Eval(ctx, b.c, keys, args...).Int64Slice()
	}
	c.res, c.err = res, err
	close(c.done)
}

// crossSlot decides calls, whose keys the slot map puts on master m, with
// one script call there: their keys span slots, so they are passed as
// arguments and the script is flagged allow-cross-slot-keys (Redis 7).
// The script leaves undecided, writing nothing, a decision whose keys m
// does not serve (its slot moved or is moving: the slot map was behind);
// those, and all of them if m refuses the call before running it (a
// replica now, or a Redis without script flags), are decided by each.
func (b *batcher) crossSlot(ctx context.Context, m *redis.Client, calls []*call) {
	args := b.crossArgs(calls)
	b.scripts.Add(1)
	b.decided.Add(int64(len(calls)))
	res, err := decideCross.EvalSha(ctx, m, nil, args...).Int64Slice()
	if isNoScript(err) {
		res, err = decideCross.Eval(ctx, m, nil, args...).Int64Slice()
	}
	if err != nil {
		if unsupported(err) {
			b.noCross.Store(true)
		}
		if unsupported(err) || refusedBeforeRun(err) {
			b.each(ctx, calls)
			return
		}
	}
	var again []*call
	for _, c := range calls {
		n := replyValues*len(c.keys) + 1
		switch {
		case err != nil:
			c.err = err
		case len(res) < n:
			c.err = errors.New("unexpected reply from the decide script")
		case res[n-1] == -1: // not served there
			res = res[n:]
			again = append(again, c)
			continue
		default:
			c.res, res = res[:n:n], res[n:]
		}
		close(c.done)
	}
	if len(again) > 0 {
		b.moved.Add(int64(len(again)))
		b.each(ctx, again)
	}
}

// crossArgs makes the arguments of one crossSlot call deciding calls in
// order: the keys' count, the keys, then join's arguments.
func (b *batcher) crossArgs(calls []*call) []any {
	nk, na := 0, 3
	for _, c := range calls {
		nk += len(c.keys)
		na += len(c.keys) + len(c.args)
	}
	args := make([]any, 0, na)
	args = append(args, nk)
	for _, c := range calls {
		for _, k := range c.keys {
			args = append(args, k)
		}
	}
	args = append(args, b.slack, len(calls))
	for _, c := range calls {
		args = append(args, c.args...)
	}
	return args
}

// refusedBeforeRun reports whether err is Redis refusing a script call
// before running any of it: a node that became a replica (READONLY), or
// one that is loading or busy.
func refusedBeforeRun(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "READONLY") || strings.HasPrefix(msg, "LOADING") || strings.HasPrefix(msg, "BUSY") ||
		strings.HasPrefix(msg, "MASTERDOWN")
}

// unsupported reports whether err is a Redis that cannot compile the
// cross-slot script (before Redis 7, which reads a script's flags from its
// first line): nothing ran, and the store decides each decision alone from
// then on.
func unsupported(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "Error compiling script")
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// join makes the keys and arguments of one script call deciding calls in
// order.
func (b *batcher) join(calls []*call) ([]string, []any) {
	nk, na := 0, 2
	for _, c := range calls {
		nk += len(c.keys)
		na += len(c.args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 0, na)
	args = append(args, b.slack, len(calls))
	for _, c := range calls {
		keys = append(keys, c.keys...)
		args = append(args, c.args...)
	}
	return keys, args
}
