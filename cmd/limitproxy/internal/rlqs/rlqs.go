// Package rlqs serves Envoy's rate limit quota service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService, docs/envoy.md
// "Envoy's rate limit quota service (RLQS)") from the RLS policies: each
// Envoy reports, per bucket, what it admitted and denied; each report is
// answered with an assignment per bucket, a blanket rule or a token bucket
// funded by a lease of the bucket's limits (limiter/leases, Store.Lease)
// sized by that Envoy's demand. Every unit an Envoy is assigned was
// counted by the store first, so the Envoys together admit no more than
// the global tier's bound allows (the package's Bound, docs/envoy.md).
//
// What Envoy's filter does with the answers, which the assignments are
// built for, is written down in envoy_test.go, the model of Envoy's filter
// the tests run.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/rls"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/leases"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// MaxMessageBytes is the largest report read (gRPC's MaxRecvMsgSize): a
// report of max_buckets buckets of a few entries fits.
const MaxMessageBytes = 4 << 20

// Options configures a Service.
type Options struct {
	// Handler holds the policies (its Set, reloaded with it); required.
	Handler *proxy.Handler
	// Leases funds the assignments: the global tier over Redis, or one
	// over the memory store; required.
	Leases *leases.Store
	// Config is [rlqs] (validated).
	Config config.RLQS
	// Logger receives the service's errors; nil: none.
	Logger *zap.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Kind is what an assignment says, as limitproxy_rlqs_assignments_total
// counts it.
type Kind int

// The kinds of assignments.
const (
	// TokenBucket is a lease's units as a token bucket.
	TokenBucket Kind = iota
	// Denied is DENY_ALL: nothing left to lease.
	Denied
	// Unmatched is ALLOW_ALL for a bucket no policy of its domain matches.
	Unmatched
	// Unlimited is ALLOW_ALL for an unlimited policy, one without
	// limits, or one in shadow mode.
	Unlimited
	// Unsupported is DENY_ALL for a policy with a leaky bucket, which
	// Envoy cannot queue on.
	Unsupported
	// Failed is no action: the store could not lease (Envoy keeps its
	// assignment until it expires, then follows its own rules).
	Failed
	kinds
)

// String is the kind's label value.
func (k Kind) String() string {
	return [...]string{"token_bucket", "deny_all", "allow_all_unmatched", "allow_all_unlimited", "deny_all_unsupported", "error"}[k]
}

// Stats are a Service's counters since it started.
type Stats struct {
	// Streams is the streams open now; StreamsTotal those opened, and
	// Refused those refused (max_streams).
	Streams, StreamsTotal, Refused int64
	// Reports counts the usage reports received, Buckets the bucket
	// usages they carried.
	Reports, Buckets uint64
	// Assignments counts the bucket actions answered, by Kind.
	Assignments [kinds]uint64
	// LeasedUnits counts the units of the token buckets assigned.
	LeasedUnits uint64
}

// Service is the RateLimitQuotaService. It is safe for concurrent use.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	h   *proxy.Handler
	ls  *leases.Store
	cfg config.RLQS
	log *zap.Logger
	now func() time.Time

	gen      atomic.Uint64 // makes each token bucket differ from the last
	stopping chan struct{}
	stopOnce sync.Once

	streams, streamsTotal, refused atomic.Int64
	reports, buckets, units        atomic.Uint64
	assignments                    [kinds]atomic.Uint64
}

// NewService returns the service of o.
func NewService(o Options) (*Service, error) {
	if o.Handler == nil || o.Leases == nil {
		return nil, errors.New("rlqs: a handler and a leases store are required")
	}
	s := &Service{h: o.Handler, ls: o.Leases, cfg: o.Config, log: o.Logger, now: o.Now, stopping: make(chan struct{})}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.cfg.AssignmentTTL < time.Second {
		s.cfg.AssignmentTTL = config.DefaultRLQSAssignmentTTL
	}
	if !(s.cfg.MaxShare > 0) || s.cfg.MaxShare > 1 {
		s.cfg.MaxShare = config.DefaultRLQSMaxShare
	}
	if s.cfg.MaxBuckets <= 0 {
		s.cfg.MaxBuckets = config.DefaultRLQSMaxBuckets
	}
	if s.cfg.MaxStreams <= 0 {
		s.cfg.MaxStreams = config.DefaultRLQSMaxStreams
	}
	return s, nil
}

// New returns a gRPC server serving svc (with gRPC health checking), with
// TLS when svc's [rlqs] names a certificate, and the connection bounds of
// [rls]'s listener. Serve it with rls.Serve; Drain svc before
// GracefulStop, whose streams would otherwise last until Envoy ends them.
func New(svc *Service) (*grpc.Server, error) {
	c := svc.cfg
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: rls.KeepaliveTime, Timeout: rls.KeepaliveTimeout, MaxConnectionIdle: rls.MaxConnectionIdle,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: rls.MinPingInterval, PermitWithoutStream: true}),
		grpc.MaxHeaderListSize(16 << 10),
	}
	if c.CertFile != "" {
		tc, err := rls.TLSConfig(c.CertFile, c.KeyFile, c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("rlqs: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	srv := grpc.NewServer(opts...)
	rlqsv3.RegisterRateLimitQuotaServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return srv, nil
}

// Serve serves srv on ln until it stops; nil then.
func Serve(srv *grpc.Server, ln net.Listener) error { return rls.Serve(srv, ln) }

// Drain ends every stream (UNAVAILABLE: Envoy opens a new one, to another
// server or later) and refuses new ones, so that a GracefulStop does not
// wait on streams that never end by themselves.
func (s *Service) Drain() { s.stopOnce.Do(func() { close(s.stopping) }) }

// Stats returns s's counters.
func (s *Service) Stats() Stats {
	st := Stats{Streams: s.streams.Load(), StreamsTotal: s.streamsTotal.Load(), Refused: s.refused.Load(),
		Reports: s.reports.Load(), Buckets: s.buckets.Load(), LeasedUnits: s.units.Load()}
	for i := range st.Assignments {
		st.Assignments[i] = s.assignments[i].Load()
	}
	return st
}

// Bound returns the most a key of limit l can be admitted beyond an exact
// decision, in any window of the limit, with n Envoys reporting its
// bucket, as a fraction of its quota: n × MaxLease units (an Envoy holds
// one assignment at a time), 0 for a fixed window (an assignment ends
// with its window).
func (s *Service) Bound(l *driver.Limit, n int) float64 {
	if l.Algorithm() == driver.FixedWindow {
		return 0
	}
	q, _ := l.Quota()
	return float64(n) * float64(s.MaxLease(l)*l.Cost()) / float64(q)
}

// MaxLease is the largest lease one Envoy gets of l, in requests of
// weight 1 (at least 1): max_share of its quota, divided by its cost.
func (s *Service) MaxLease(l *driver.Limit) int64 {
	q, _ := l.Quota()
	return max(1, int64(math.Floor(s.cfg.MaxShare*float64(q)))/l.Cost())
}

// stream is one Envoy's stream: its buckets' state.
type stream struct {
	buckets map[string]*bucket
}

// bucket is what a stream's bucket keeps from one report to the next.
type bucket struct {
	// deniedUntil: no lease is asked for before then, the store having
	// said nothing would be free sooner.
	deniedUntil time.Time
}

// StreamRateLimitQuotas answers each usage report of an Envoy with an
// assignment for each bucket it reports.
func (s *Service) StreamRateLimitQuotas(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	if s.streams.Add(1) > int64(s.cfg.MaxStreams) {
		s.streams.Add(-1)
		s.refused.Add(1)
		return status.Errorf(codes.ResourceExhausted, "%d streams already (rlqs.max_streams)", s.cfg.MaxStreams)
	}
	defer s.streams.Add(-1)
	s.streamsTotal.Add(1)
	ctx := st.Context()
	type received struct {
		r   *rlqsv3.RateLimitQuotaUsageReports
		err error
	}
	in := make(chan received, 1)
	go func() {
		for {
			r, err := st.Recv()
			select {
			case in <- received{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	state := &stream{buckets: map[string]*bucket{}}
	for {
		var m received
		select {
		case <-s.stopping:
			return status.Error(codes.Unavailable, "the server is shutting down")
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case m = <-in:
		}
		if m.err != nil {
			if errors.Is(m.err, io.EOF) || status.Code(m.err) == codes.Canceled {
				return nil
			}
			return m.err
		}
		resp, err := s.answer(ctx, state, m.r)
		if err != nil {
			return err
		}
		if len(resp.BucketAction) == 0 {
			continue
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// answer returns the assignments answering report r on stream st.
func (s *Service) answer(ctx context.Context, st *stream, r *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	s.reports.Add(1)
	domain := r.GetDomain()
	if domain == "" {
		return nil, status.Error(codes.InvalidArgument, "the report's domain is empty")
	}
	now := s.now()
	set := s.h.Set()
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for _, u := range r.GetBucketQuotaUsages() {
		s.buckets.Add(1)
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			continue // Envoy ignores an action without a bucket id
		}
		entries := sortedEntries(id)
		name := bucketName(entries)
		b := st.buckets[name]
		if b == nil {
			if len(st.buckets) >= s.cfg.MaxBuckets {
				return nil, status.Errorf(codes.ResourceExhausted, "more than %d buckets on one stream (rlqs.max_buckets)", s.cfg.MaxBuckets)
			}
			b = &bucket{}
			st.buckets[name] = b
		}
		demand := int64(min(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied(), math.MaxInt32))
		kind, strategy, ttl := s.assign(ctx, set, domain, entries, b, demand, now)
		s.assignments[kind].Add(1)
		if strategy == nil {
			continue
		}
		resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: u.GetBucketId(),
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(ttl),
					RateLimitStrategy:    strategy,
				},
			},
		})
	}
	return resp, nil
}

// sortedEntries are a bucket id's entries, sorted by key.
func sortedEntries(id map[string]string) []policy.DescriptorEntry {
	entries := make([]policy.DescriptorEntry, 0, len(id))
	for k, v := range id {
		entries = append(entries, policy.DescriptorEntry{Key: k, Value: v})
	}
	slices.SortFunc(entries, func(a, b policy.DescriptorEntry) int { return strings.Compare(a.Key, b.Key) })
	return entries
}

// bucketName is a bucket's entries (sorted by key) as one string.
func bucketName(entries []policy.DescriptorEntry) string {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(e.Key), e.Key, len(e.Value), e.Value)
	}
	return b.String()
}

// blanket is a blanket rule.
func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// assign decides the bucket of entries in domain, whose Envoy asked for
// demand units in its last interval: the assignment's kind, strategy (nil
// for no action) and time to live.
func (s *Service) assign(ctx context.Context, set *policy.Set, domain string, entries []policy.DescriptorEntry, b *bucket, demand int64, now time.Time) (Kind, *typev3.RateLimitStrategy, time.Duration) {
	ttl := s.cfg.AssignmentTTL
	p, ordered, ok := set.MatchBucket(domain, entries)
	switch {
	case !ok:
		return Unmatched, blanket(typev3.RateLimitStrategy_ALLOW_ALL), ttl
	case p.RLS.Unlimited || p.Limiter == nil || len(p.Limits) == 0 || p.Mode == config.Shadow:
		return Unlimited, blanket(typev3.RateLimitStrategy_ALLOW_ALL), ttl
	}
	limits := p.Limiter.Limits()
	for _, l := range limits {
		if l.Algorithm() == limiter.LeakyBucket {
			return Unsupported, blanket(typev3.RateLimitStrategy_DENY_ALL), ttl
		}
	}
	if now.Before(b.deniedUntil) {
		return Denied, blanket(typev3.RateLimitStrategy_DENY_ALL), max(ttl, ceilSeconds(b.deniedUntil.Sub(now)))
	}
	var keys [limiter.MaxLimits]string
	proxy.DescriptorKeys(p, ordered, keys[:])
	ds := make([]driver.Limit, len(limits))
	want := max(demand, 1)
	for i := range limits {
		ds[i] = limits[i].Driver()
		want = min(want, s.MaxLease(&ds[i]))
	}
	// Each limit leases want units (fewer when a window's limit has
	// fewer left; the later limits then lease as many): the Envoy may
	// admit the fewest. What an earlier limit leased beyond is lost.
	expires := now.Add(ttl)
	for i := range ds {
		g, err := s.ls.Lease(ctx, &ds[i], keys[i], now, want)
		if err != nil {
			s.log.Warn("rlqs: the store could not lease; no assignment", zap.String("policy", p.Name), zap.Error(err))
			return Failed, nil, 0
		}
		if g.Units == 0 {
			wait := g.Decision.RetryAfter
			if wait == driver.Never || wait <= 0 {
				wait = ttl
			}
			b.deniedUntil = now.Add(wait)
			return Denied, blanket(typev3.RateLimitStrategy_DENY_ALL), max(ttl, ceilSeconds(wait))
		}
		want = min(want, g.Units)
		if ds[i].Algorithm() == driver.FixedWindow && g.Decision.ResetAt.Before(expires) {
			// A fixed window's lease ends with its window: the store's
			// ResetAt once counted (not Grant.Expires, which the tier's
			// own lease_time also caps).
			expires = g.Decision.ResetAt
		}
	}
	life := expires.Sub(now).Truncate(time.Second)
	if life < time.Second {
		// Less than a second of the window left: Envoy reads whole
		// seconds, and a TTL of 0 would leave the Envoy to its own
		// rules at once. The lease is forgone.
		return Denied, blanket(typev3.RateLimitStrategy_DENY_ALL), ttl
	}
	s.units.Add(uint64(want))
	return TokenBucket, s.tokenBucket(want, life), life
}

// tokenBucket is the token bucket that admits units requests within ttl
// (whole seconds) on Envoy, and no more: Envoy's bucket starts full, at
// max_tokens = units, and refills tokens_per_fill = 1 each fill_interval
// of ttl + 1 seconds, less than one token within the assignment's life, so
// none whole. Each bucket's fill_interval differs from the last in its
// nanoseconds (which Envoy reads for equality, not for the rate): Envoy
// keeps a bucket an identical assignment names, and this one must start
// full (envoy_test.go).
func (s *Service) tokenBucket(units int64, ttl time.Duration) *typev3.RateLimitStrategy {
	nanos := int32(1 + s.gen.Add(1)%999_999_998)
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(min(units, math.MaxUint32)),
		TokensPerFill: wrapperspb.UInt32(1),
		FillInterval:  &durationpb.Duration{Seconds: int64(ttl/time.Second) + 1, Nanos: nanos},
	}}}
}

// ceilSeconds is d rounded up to whole seconds, at least one.
func ceilSeconds(d time.Duration) time.Duration {
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}
