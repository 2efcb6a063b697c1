package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
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
// live in different slots, it is a pipeline of one EVALSHA per decision.
// Either way a decision costs one round trip. No goroutine exists while
// nothing is queued. Safe for concurrent use.
type batcher struct {
	c       redis.UniversalClient
	timeout time.Duration
	slack   int                  // the script's TTL slack in ms (see decide.lua)
	cluster *redis.ClusterClient // nil unless Redis Cluster

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

// flushCluster sends calls as one pipeline per master (by the client's
// slot map), all at once: go-redis fails every command of a pipeline
// whose retry outlives its context, so one dead master would otherwise
// fail the decisions of the healthy ones sent with it.
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
	send := func(calls []*call) {
		cmds := b.pipeline(ctx, calls, false)
		for _, cmd := range cmds {
			if isNoScript(cmd.Err()) {
				cmds = b.pipeline(ctx, calls, true)
				break
			}
		}
		for i, c := range calls {
			c.res, c.err = cmds[i].Int64Slice()
			close(c.done)
		}
	}
	for _, group := range byNode {
		wg.Go(func() { send(group) })
	}
	if len(unknown) > 0 {
		wg.Go(func() { send(unknown) })
	}
	wg.Wait()
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

// pipeline sends one script call per decision as one pipeline (Redis
// Cluster routes each by its keys' slot).
func (b *batcher) pipeline(ctx context.Context, calls []*call, full bool) []*redis.Cmd {
	pipe := b.c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i := range calls {
		keys, args := b.join(calls[i : i+1])
		if full {
			cmds[i] = decideScript.Eval(ctx, pipe, keys, args...)
		} else {
			cmds[i] = decideScript.EvalSha(ctx, pipe, keys, args...)
		}
	}
	pipe.Exec(ctx) // errors are per command
	return cmds
}
