package redisstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher pipelines concurrent decisions automatically. A decision joins
// the queue; if fewer than maxInFlight pipelines are in flight, its caller
// sends everything queued as one pipeline (each decision still one EVALSHA,
// one round trip), and while a pipeline is in flight new decisions gather
// for the next. Under light load a pipeline holds one decision and nothing
// waits; under heavy load Redis reads and answers many decisions per
// system call, which is where its throughput goes. No goroutine exists
// while nothing is queued. Safe for concurrent use.
type batcher struct {
	c       redis.UniversalClient
	timeout time.Duration

	mu       sync.Mutex
	pending  []*call
	inFlight int
}

const (
	maxInFlight = 4   // pipelines in flight at once
	maxBatch    = 256 // decisions in one pipeline
)

// call is one queued decision.
type call struct {
	keys []string
	args []any
	res  []int64
	err  error
	done chan struct{}
}

// run decides through the batcher. The wait is bounded by the pipeline's
// deadline (the store's timeout from when it is sent; a decision queued
// behind pipelines in flight waits for one of them first, so at most about
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

// flushNext sends one pipeline of what is queued. If more has queued up
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

// flush sends calls as one pipeline and hands each its reply. A script
// Redis does not know yet (a new or restarted server) is loaded, and the
// pipeline sent again.
func (b *batcher) flush(calls []*call) {
	if len(calls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	cmds := b.send(ctx, calls, false)
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			cmds = b.send(ctx, calls, true)
			break
		}
	}
	for i, c := range calls {
		c.res, c.err = cmds[i].Int64Slice()
		close(c.done)
	}
}

func (b *batcher) send(ctx context.Context, calls []*call, full bool) []*redis.Cmd {
	pipe := b.c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if full {
			cmds[i] = decideScript.Eval(ctx, pipe, c.keys, c.args...)
		} else {
			cmds[i] = decideScript.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	}
	pipe.Exec(ctx) // errors are per command
	return cmds
}
