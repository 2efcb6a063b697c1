package proxy

import (
	"context"
	"math"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
)

// Every face (the proxy's ServeHTTP, the forward-auth endpoint, Envoy's
// rate limit service, and the Evaluator that replays logs) decides a
// request with decide (decide.go), waits its leaky bucket's turn with
// await, settles what its answer owes the limits that read it with
// settle (charges.go), and records it with done or logAccess. A new face
// builds its exchange and ruling and calls these; what it answers is its
// own.

// await holds a request its ruling queued in its policy's leaky bucket
// until its turn comes, counting it in the queue metrics. maxWait is the
// longest the face waits (noMaxWait: as long as the turn takes): a turn
// further away is refused at once as over the limit (its place given
// back, Retry-After until the turn would be maxWait away), so that no
// request waits longer; 0 refuses every delay. It returns the time
// since start, and nil when the turn came (or o was refused); ctx's error
// when the caller left first, errShuttingDown when CloseQueues turned it
// away: either way it has left the queue.
func (h *Handler) await(ctx context.Context, o *ruling, start time.Time, maxWait time.Duration) (time.Duration, error) {
	p := o.p
	if o.d.Delay > maxWait {
		leaveQueue(p, o.d)
		o.d.RetryAfter = o.d.Delay - maxWait
		o.refuse(Rejected, replyLimit, p.Reject.Status)
		return 0, nil
	}
	h.metrics.queued(p.Name, 1)
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.closing, cancel)
	err := p.Limiter.Wait(wctx, o.d)
	stop()
	cancel()
	h.metrics.queued(p.Name, -1)
	wait := h.now().Sub(start)
	h.metrics.waited(p.Name, wait)
	switch {
	case err == nil:
		return wait, nil
	case ctx.Err() != nil:
		return wait, ctx.Err()
	}
	return wait, errShuttingDown
}

// noMaxWait is await's maxWait for a face that waits every turn out.
const noMaxWait = time.Duration(math.MaxInt64)

// leaveQueue gives back the place in p's leaky-bucket queue that d took,
// for a request that will not wait in it.
func leaveQueue(p *policy.Policy, d limiter.Decision) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	p.Limiter.Wait(gone, d)
}

// errShuttingDown is await's error for a request queued when CloseQueues
// was called.
var errShuttingDown = shutdownError{}

type shutdownError struct{}

func (shutdownError) Error() string { return "limitproxy is shutting down; retry" }
