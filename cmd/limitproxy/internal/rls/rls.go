// Package rls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService, docs/envoy.md) from a
// proxy.Handler: each ShouldRateLimit call's descriptors are decided by
// Handler.DecideDescriptors, the proxy's own decision path, and answered
// in the service's types. It is the process's wiring of that method to
// gRPC (bounds, keepalive, TLS), which is why it is internal: a library
// user calls DecideDescriptors.
package rls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// The connection bounds of the listener (docs/envoy.md "Bad input"): a
// keepalive ping every KeepaliveTime, answered within KeepaliveTimeout;
// an idle connection closed after MaxConnectionIdle; a connection (and so
// a call that never sends its message) lasts at most MaxConnectionAge
// plus MaxConnectionAgeGrace; a client pinging more often than
// MinPingInterval is sent GOAWAY.
const (
	KeepaliveTime         = 2 * time.Minute
	KeepaliveTimeout      = 20 * time.Second
	MaxConnectionIdle     = 5 * time.Minute
	MaxConnectionAge      = 10 * time.Minute
	MaxConnectionAgeGrace = 30 * time.Second
	MinPingInterval       = 10 * time.Second
)

// Options configures a Server.
type Options struct {
	// Handler decides the descriptors; required.
	Handler *proxy.Handler
	// Config is [rls] (validated: its bounds are set).
	Config config.RLS
	// Logger receives the server's errors; nil: none.
	Logger *zap.Logger
}

// New returns a gRPC server serving the rate limit service with o's
// bounds, and TLS when o.Config names a certificate. Serve it on a
// listener; Stop or GracefulStop it.
func New(o Options) (*grpc.Server, error) {
	if o.Handler == nil {
		return nil, errors.New("rls: no handler")
	}
	c := o.Config
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.MaxMessageBytes),
		grpc.MaxConcurrentStreams(uint32(c.MaxConcurrentStreams)),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: KeepaliveTime, Timeout: KeepaliveTimeout, MaxConnectionIdle: MaxConnectionIdle,
			MaxConnectionAge: MaxConnectionAge, MaxConnectionAgeGrace: MaxConnectionAgeGrace,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinPingInterval}),
		// Bounded header lists: a descriptor travels in the message.
		grpc.MaxHeaderListSize(16 << 10),
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if c.ClientCAFile != "" {
			b, err := os.ReadFile(c.ClientCAFile)
			if err != nil {
				return nil, fmt.Errorf("rls: client_ca_file: %w", err)
			}
			tc.ClientCAs = x509.NewCertPool()
			if !tc.ClientCAs.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("rls: client_ca_file %s holds no PEM certificate", c.ClientCAFile)
			}
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	s := grpc.NewServer(opts...)
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	rlsv3.RegisterRateLimitServiceServer(s, &service{h: o.Handler, cfg: c, log: log})
	// gRPC health checking (Envoy's grpc_health_check): SERVING while the
	// server runs, for the whole server ("") and the service.
	hs := health.NewServer()
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	return s, nil
}

// Serve serves s on ln until GracefulStop or Stop; it returns nil then.
func Serve(s *grpc.Server, ln net.Listener) error {
	if err := s.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// service is the RateLimitService.
type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	h   *proxy.Handler
	cfg config.RLS
	log *zap.Logger
}

// ShouldRateLimit decides req's descriptors (docs/envoy.md).
func (s *service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ds, err := s.descriptors(req)
	if err != nil {
		return nil, err
	}
	verdicts, fields, err := s.h.DecideDescriptors(ctx, req.GetDomain(), ds)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(verdicts))}
	for i, v := range verdicts {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		if v.Over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if v.Limited {
			st.CurrentLimit = CurrentLimit(v.LimitName, v.Quota, v.Window)
			st.LimitRemaining = uint32(min(v.Remaining, math.MaxUint32))
			st.DurationUntilReset = durationpb.New(v.ResetAfter)
		}
		resp.Statuses[i] = st
	}
	resp.ResponseHeadersToAdd = headerValues(fields)
	return resp, nil
}

// descriptors checks req against the bounds and converts its
// descriptors; the error is INVALID_ARGUMENT, and then nothing is
// counted.
func (s *service) descriptors(req *rlsv3.RateLimitRequest) ([]proxy.Descriptor, error) {
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, format, args...)
	}
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return nil, bad("rate limit domain must not be empty")
	case n == 0:
		return nil, bad("rate limit descriptor list must not be empty")
	case n > s.cfg.MaxDescriptors:
		return nil, bad("%d descriptors; at most %d (rls.max_descriptors)", n, s.cfg.MaxDescriptors)
	}
	out := make([]proxy.Descriptor, len(req.Descriptors))
	for i, d := range req.Descriptors {
		es := d.GetEntries()
		switch {
		case len(es) == 0:
			return nil, bad("descriptor %d has no entries", i)
		case len(es) > s.cfg.MaxEntries:
			return nil, bad("descriptor %d has %d entries; at most %d (rls.max_entries)", i, len(es), s.cfg.MaxEntries)
		case d.GetIsNegativeHits():
			return nil, bad("descriptor %d: is_negative_hits is not accepted: quota is never given back by a caller", i)
		}
		cost := uint64(req.GetHitsAddend())
		checkOnly := false
		if d.GetHitsAddend() != nil {
			// The descriptor's own, which may be 0: check, count nothing.
			cost = d.GetHitsAddend().GetValue()
			checkOnly = cost == 0
		}
		if cost > uint64(s.cfg.MaxHitsAddend) {
			return nil, bad("descriptor %d: hits_addend %d is above %d (rls.max_hits_addend)", i, cost, s.cfg.MaxHitsAddend)
		}
		entries := make([]policy.DescriptorEntry, len(es))
		for j, e := range es {
			if e.GetKey() == "" {
				return nil, bad("descriptor %d, entry %d: the key is empty", i, j)
			}
			entries[j] = policy.DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()}
		}
		out[i] = proxy.Descriptor{Entries: entries, Cost: int64(cost), CheckOnly: checkOnly}
	}
	return out, nil
}

// units are the RateLimit units of a fixed length, longest first.
var units = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
}

// CurrentLimit returns a limit of quota per window, named name, as
// Envoy's RateLimit: quota per the longest unit that divides window,
// with the unit_multiplier the quotient ("30/5m": 30 per 5 MINUTE); a
// window that is not whole seconds is given per SECOND, rounded down.
func CurrentLimit(name string, quota int64, window time.Duration) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	q := uint32(min(max(quota, 0), math.MaxUint32))
	if window <= 0 || window%time.Second != 0 {
		if window > 0 {
			per := float64(quota) * float64(time.Second) / float64(window)
			q = uint32(min(per, math.MaxUint32))
		}
		rl.RequestsPerUnit = q
		return rl
	}
	for _, u := range units {
		if window%u.d == 0 {
			rl.Unit, rl.RequestsPerUnit = u.unit, q
			if m := window / u.d; m > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(int64(m), math.MaxUint32)))
			}
			break
		}
	}
	return rl
}

// headerValues returns h's fields as Envoy's header values, names in
// lower case, sorted.
func headerValues(h http.Header) []*corev3.HeaderValue {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []*corev3.HeaderValue
	for _, name := range names {
		for _, v := range h[name] {
			out = append(out, &corev3.HeaderValue{Key: strings.ToLower(name), Value: v})
		}
	}
	return out
}
