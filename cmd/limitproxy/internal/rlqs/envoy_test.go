package rlqs

// envoy is a model of Envoy's rate_limit_quota HTTP filter, as its source
// has it (envoyproxy/envoy, source/extensions/filters/http/rate_limit_quota/:
// filter.cc, global_client_impl.cc, quota_bucket_cache.h; and
// source/common/common/token_bucket_impl.cc for AtomicTokenBucketImpl),
// read for this service:
//
//   - A request whose bucket is new: the bucket is created, the request
//     decided by no_assignment_behavior (allowed unless it is a blanket
//     DENY_ALL; ALLOW_ALL when unset) and counted, and a report of that
//     bucket alone is sent at once (time_elapsed 0). The first bucket
//     starts the stream and the report timer: every reporting_interval
//     a report of every bucket, with the allowed and denied counts since
//     the last one (then reset) and time_elapsed in whole seconds
//     (truncated).
//   - A request of a known bucket: its assignment decides, or, without
//     one, its default action (no_assignment_behavior). ALLOW_ALL admits,
//     DENY_ALL refuses (429, counted denied), a token bucket admits if
//     consume(1) finds a whole token; requests_per_time_unit admits (a
//     warning: not supported).
//   - An answer's action for a bucket it does not hold, or without a
//     bucket id, is ignored. A quota assignment replaces the bucket's
//     action and restarts its expiry timer at assignment_time_to_live,
//     of which only the seconds are read. A requests_per_time_unit
//     assignment is dropped (logged), the previous action staying.
//   - A token bucket assignment builds an AtomicTokenBucketImpl of
//     max_tokens, filling at tokens_per_fill / fill_interval per second,
//     the interval truncated to whole seconds (0 s would divide by zero),
//     started full (init_fill; newer versions start it empty, with an
//     ENVOY_BUG, when max_tokens / rate exceeds the monotonic clock's
//     seconds). An assignment whose token bucket equals the bucket's
//     current one in max_tokens, tokens_per_fill and fill_interval's
//     nanos (its seconds are not compared) keeps the current bucket and
//     its tokens; any other starts a new, full one.
//   - At assignment_time_to_live: expired_assignment_behavior's
//     fallback_rate_limit for its timeout if set, else, and then, the
//     default action (no_assignment_behavior; ALLOW_ALL when unset).
//   - abandon_action: the bucket is erased; its next request creates it
//     anew (an immediate report, no_assignment_behavior).

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// envoyBucket is one bucket of the model.
type envoyBucket struct {
	id              map[string]string
	action          *typev3.RateLimitStrategy // nil: the default action
	expires         time.Time
	tb              *envoyTokens
	allowed, denied uint64
	lastReport      time.Time
}

// envoyTokens is AtomicTokenBucketImpl: the tokens are min(max, (now -
// t0) × rate); consuming one moves t0 by 1/rate.
type envoyTokens struct {
	max, rate float64
	t0        time.Time
	proto     *typev3.TokenBucket
}

func newEnvoyTokens(p *typev3.TokenBucket, now time.Time) *envoyTokens {
	sec := p.GetFillInterval().GetSeconds() // whole seconds, as Envoy reads it
	rate := float64(p.GetTokensPerFill().GetValue()) / float64(sec)
	t := &envoyTokens{max: float64(p.GetMaxTokens()), rate: rate, proto: p}
	t.t0 = now.Add(-time.Duration(t.max / rate * float64(time.Second))) // init_fill: full
	return t
}

func (t *envoyTokens) consume(now time.Time) bool {
	tokens := math.Min(t.max, now.Sub(t.t0).Seconds()*t.rate)
	if tokens < 1 {
		return false
	}
	t.t0 = now.Add(-time.Duration((tokens - 1) / t.rate * float64(time.Second)))
	return true
}

// sameTokens is Envoy's protoTokenBucketsEq.
func sameTokens(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() && a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}

// envoy is one Envoy's filter and its stream.
type envoy struct {
	domain    string
	interval  time.Duration
	noAssign  *typev3.RateLimitStrategy // no_assignment_behavior; nil: ALLOW_ALL
	mu        sync.Mutex
	buckets   map[string]*envoyBucket
	stream    rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	sendMu    sync.Mutex
	admitted  []time.Time
	started   bool
	responses int
}

func (e *envoy) allowDefault() bool {
	return e.noAssign.GetStrategy() == nil || e.noAssign.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL || e.noAssign.GetTokenBucket() != nil
}

// request is one request of bucket id at now: admitted or not.
func (e *envoy) request(ctx context.Context, t *testing.T, id map[string]string, now time.Time) bool {
	e.mu.Lock()
	name := bucketName(sortedEntries(id))
	b := e.buckets[name]
	if b == nil {
		b = &envoyBucket{id: id, lastReport: now}
		e.buckets[name] = b
		ok := e.allowDefault()
		e.count(b, ok, now)
		report := e.usage(b, now)
		start := !e.started
		e.started = true
		e.mu.Unlock()
		e.send(t, &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain, BucketQuotaUsages: report})
		if start {
			go e.reportEvery(ctx, t)
		}
		return ok
	}
	action := b.action
	if action != nil && !now.Before(b.expires) {
		action, b.action, b.tb = nil, nil, nil // expired: the default action
	}
	if action == nil {
		action = e.noAssign
	}
	ok := true
	switch {
	case action.GetTokenBucket() != nil:
		ok = b.tb.consume(now)
	case action.GetRequestsPerTimeUnit() != nil:
	case action.GetStrategy() != nil:
		ok = action.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
	}
	e.count(b, ok, now)
	e.mu.Unlock()
	return ok
}

func (e *envoy) count(b *envoyBucket, ok bool, now time.Time) {
	if ok {
		b.allowed++
		e.admitted = append(e.admitted, now)
	} else {
		b.denied++
	}
}

// usage is b's usage since its last report, which it resets.
func (e *envoy) usage(b *envoyBucket, now time.Time) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: b.id},
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
		NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
	}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u}
}

func (e *envoy) send(t *testing.T, r *rlqsv3.RateLimitQuotaUsageReports) {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	if err := e.stream.Send(r); err != nil && e.stream.Context().Err() == nil {
		t.Errorf("send: %v", err)
	}
}

// reportEvery sends a report of every bucket each interval.
func (e *envoy) reportEvery(ctx context.Context, t *testing.T) {
	tick := time.NewTicker(e.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		e.mu.Lock()
		r := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain}
		for _, b := range e.buckets {
			r.BucketQuotaUsages = append(r.BucketQuotaUsages, e.usage(b, now)...)
		}
		e.mu.Unlock()
		e.send(t, r)
	}
}

// receive applies each answer as Envoy's onQuotaResponseImpl does.
func (e *envoy) receive() {
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			return
		}
		now := time.Now()
		e.mu.Lock()
		e.responses++
		for _, a := range resp.GetBucketAction() {
			if len(a.GetBucketId().GetBucket()) == 0 {
				continue
			}
			name := bucketName(sortedEntries(a.GetBucketId().GetBucket()))
			b := e.buckets[name]
			if b == nil {
				continue
			}
			if a.GetAbandonAction() != nil {
				delete(e.buckets, name)
				continue
			}
			q := a.GetQuotaAssignmentAction()
			if q == nil {
				continue
			}
			st := q.GetRateLimitStrategy()
			switch {
			case st.GetTokenBucket() != nil:
				if b.tb == nil || b.action.GetTokenBucket() == nil || !sameTokens(st.GetTokenBucket(), b.tb.proto) {
					b.tb = newEnvoyTokens(st.GetTokenBucket(), now)
				}
			case st.GetRequestsPerTimeUnit() != nil, st.GetStrategy() == nil:
				continue
			default:
				b.tb = nil
			}
			b.action = st
			b.expires = now.Add(time.Duration(q.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
		}
		e.mu.Unlock()
	}
}

// run sends requests of bucket id at Poisson arrivals of rate per second
// until ctx ends.
func (e *envoy) run(ctx context.Context, t *testing.T, id map[string]string, rate float64, rnd *rand.Rand) {
	for ctx.Err() == nil {
		time.Sleep(time.Duration(rnd.ExpFloat64() / rate * float64(time.Second)))
		e.request(ctx, t, id, time.Now())
	}
}

// dialEnvoy opens an Envoy's stream to addr.
func dialEnvoy(ctx context.Context, t *testing.T, cc *grpc.ClientConn, domain string, interval time.Duration, noAssign *typev3.RateLimitStrategy) *envoy {
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &envoy{domain: domain, interval: interval, noAssign: noAssign, buckets: map[string]*envoyBucket{}, stream: st}
	go e.receive()
	return e
}
