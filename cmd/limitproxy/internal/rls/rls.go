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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitproxy/limitproxy/limiter"
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

// StreamWorkers is the goroutines per GOMAXPROCS that serve calls, kept
// from one call to the next, and MinStreamWorkers the fewest whatever
// GOMAXPROCS; ConnWindow is the bytes of calls a connection may send
// ahead of the server's reading (the HTTP/2 connection window; a
// stream's is max_message_bytes, 64 KiB at least and 1 MiB at most);
// ReadBuffer is the bytes a connection's reader takes from the socket at
// once (gRPC's ReadBufferSize; 32 KiB by default).
//
// A connection's reader hands each call it reads to a worker waiting for
// one, or, when none waits, to a new goroutine, whose stack then grows
// (2 KiB to 16 KiB, three copies) as it serves the call: a cost far
// above the call's own, paid when the server has fallen behind and can
// least afford it. The reader runs until its socket has nothing left, so
// with one CPU (GOMAXPROCS 1) it hands out every call it has read before
// any worker runs; it yields before each read (yieldConn) and reads at
// most ReadBuffer (about 14 calls of one descriptor), so that the calls
// handed out between two yields of every connection's reader fit the
// workers waiting.
const (
	StreamWorkers    = 16
	MinStreamWorkers = 64
	ConnWindow       = 1 << 20
	ReadBuffer       = 1 << 10
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
		// Calls go to goroutines kept for them, whose stacks have grown
		// already, instead of a new goroutine per call (one whose stack
		// grows on each call); when all are busy (calls waiting on
		// Redis or a leaky bucket's turn), a call gets a new goroutine as
		// before.
		grpc.NumStreamWorkers(uint32(max(StreamWorkers*runtime.GOMAXPROCS(0), MinStreamWorkers))),
		grpc.ReadBufferSize(ReadBuffer),
		// Fixed flow-control windows: a stream's holds a whole message,
		// and without the dynamic windows the transport sends no
		// bandwidth-estimation PING for each burst of calls.
		grpc.StaticStreamWindowSize(int32(min(max(c.MaxMessageBytes+5, 64<<10), 1<<20))),
		grpc.StaticConnWindowSize(ConnWindow),
	}
	if c.CertFile != "" {
		tc, err := TLSConfig(c.CertFile, c.KeyFile, c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
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

// TLSConfig is the TLS of a gRPC listener serving certFile and keyFile
// (PEM), requiring a client certificate signed by one of clientCAFile's
// PEM certificates when it is not "": [rls]'s, and [rlqs]'s.
func TLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		b, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client_ca_file: %w", err)
		}
		tc.ClientCAs = x509.NewCertPool()
		if !tc.ClientCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("client_ca_file %s holds no PEM certificate", clientCAFile)
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Serve serves s on ln until GracefulStop or Stop; it returns nil then.
// Its connections' readers yield before each read (yieldListener).
func Serve(s *grpc.Server, ln net.Listener) error {
	if err := s.Serve(yieldListener{ln}); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// yieldListener accepts yieldConns.
type yieldListener struct{ net.Listener }

// Accept returns the next connection, as a yieldConn.
func (l yieldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return yieldConn{c}, nil
}

// yieldConn is a connection whose reads first yield the processor
// (runtime.Gosched), so that the calls its reader has just handed to
// workers run before it reads more: with one CPU the reader would hand
// out every call waiting in the socket first, more than there are
// workers, and the rest would each get a new goroutine (StreamWorkers).
// About 0.2 µs a read.
type yieldConn struct{ net.Conn }

// Read yields, then reads.
func (c yieldConn) Read(p []byte) (int, error) {
	runtime.Gosched()
	return c.Conn.Read(p)
}

// service is the RateLimitService.
type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	h      *proxy.Handler
	cfg    config.RLS
	log    *zap.Logger
	limits limitCache
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
	// The answer's parts in a few allocations whatever the number of
	// descriptors: the statuses, their durations, the pointers to them.
	// One allocation for a call of one descriptor (most), four for more.
	n := len(verdicts)
	parts := &struct {
		resp rlsv3.RateLimitResponse
		ptr  [1]*rlsv3.RateLimitResponse_DescriptorStatus
		st   [1]rlsv3.RateLimitResponse_DescriptorStatus
		dur  [1]durationpb.Duration
	}{}
	resp := &parts.resp
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	resp.Statuses = parts.ptr[:0]
	sts, durs := parts.st[:], parts.dur[:]
	if n > 1 {
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, 0, n)
		sts = make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
		durs = make([]durationpb.Duration, n)
	}
	compat := s.cfg.Compatibility == config.CompatEnvoy
	// The call is OVER_LIMIT when a descriptor that is no quota is, or
	// when it has quotas and every one is (docs/envoy.md, quota_mode).
	overLimits, quotas, quotasOver := 0, 0, 0
	for i, v := range verdicts {
		st := &sts[i]
		st.Code = rlsv3.RateLimitResponse_OK
		if v.Over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		quota := !v.Unlimited && (v.QuotaMode || s.cfg.QuotaMode)
		switch {
		case quota && v.Over:
			quotas++
			quotasOver++
		case quota:
			quotas++
		case v.Over:
			overLimits++
		}
		switch {
		case v.Unlimited:
			st.LimitRemaining = math.MaxUint32
		case v.Limited:
			if compat {
				st.CurrentLimit = s.limits.get(limitKey{v.NameKey, v.Quota, v.Window, v.Calendar, true})
			} else {
				st.CurrentLimit = s.limits.get(limitKey{v.LimitName, v.Quota, v.Window, v.Calendar, false})
			}
			st.LimitRemaining = uint32(min(v.Remaining, math.MaxUint32))
			d := &durs[i]
			d.Seconds, d.Nanos = int64(v.ResetAfter/time.Second), int32(v.ResetAfter%time.Second)
			st.DurationUntilReset = d
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if overLimits > 0 || quotas > 0 && quotas == quotasOver {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	switch s.cfg.ResponseHeaders {
	case config.RLSHeadersRateLimit:
		resp.ResponseHeadersToAdd = headerValues(fields)
	case config.RLSHeadersEnvoy:
		resp.ResponseHeadersToAdd = s.envoyHeaders(resp.Statuses, verdicts)
	}
	if s.cfg.ShadowMode {
		// SHADOW_MODE: the statuses say what the limits decided, the
		// call is OK.
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	if s.cfg.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, resp.Statuses, verdicts)
	}
	return resp, nil
}

// dynamicMetadata is envoyproxy/ratelimit's dynamic_metadata of an
// answer (RESPONSE_DYNAMIC_METADATA, its ratelimitToMetadata): the
// domain; the descriptors, each its entries as "KEY=VALUE", its limit as
// the protobuf's String() (text whose spacing Go's protobuf varies from
// build to build, on purpose) and its hits_addend when set; the call's
// hits_addend when not 0; and the metadata of the descriptors with a
// limit that are not unlimited nor OVER_LIMIT, merged in their order
// (mergeMetadata: a key already there stays, unless both are tables,
// which merge).
func dynamicMetadata(req *rlsv3.RateLimitRequest, sts []*rlsv3.RateLimitResponse_DescriptorStatus, verdicts []proxy.DescriptorVerdict) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	ds := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		es := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			es = append(es, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: es})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: ds})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, v := range verdicts {
		if v.Unlimited || v.Metadata == nil || sts[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		if m, err := structpb.NewStruct(v.Metadata); err == nil {
			mergeMetadata(passed, m)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata is the reference's: src's keys that dest lacks are
// added; a key both have stays dest's, unless both are tables, which
// merge.
func mergeMetadata(dest, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		if dv, ok := dest.Fields[k]; ok {
			if ds, ss := dv.GetStructValue(), v.GetStructValue(); ds != nil && ss != nil {
				mergeMetadata(ds, ss)
			}
			continue
		}
		dest.Fields[k] = v
	}
}

// envoyHeaders are envoyproxy/ratelimit's three response headers
// (LIMIT_RESPONSE_HEADERS_ENABLED) of the descriptor closest to its
// limit, as it picks it: of the statuses with a current limit, the first
// with the fewest remaining, unless one over its limit (not a quota's)
// comes later, the last of those; none without such a status.
func (s *service) envoyHeaders(sts []*rlsv3.RateLimitResponse_DescriptorStatus, verdicts []proxy.DescriptorVerdict) []*corev3.HeaderValue {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range sts {
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = st, st.LimitRemaining
		}
		v := &verdicts[i]
		if v.Over && !v.Unlimited && !v.QuotaMode && !s.cfg.QuotaMode {
			pick, least = st, 0
		}
	}
	if pick == nil || pick.CurrentLimit == nil {
		return nil
	}
	reset := pick.GetDurationUntilReset().AsDuration()
	return []*corev3.HeaderValue{
		{Key: s.cfg.LimitHeader, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: s.cfg.RemainingHeader, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: s.cfg.ResetHeader, Value: strconv.FormatInt(int64((reset+time.Second-1)/time.Second), 10)},
	}
}

// limitCache holds the CurrentLimit messages of the limits answered, to
// answer each with the same message (the transport only reads it, and
// protobuf messages may be marshalled concurrently): a limit's name,
// quota and window are the policies' (and the per-key overrides'), so
// few; past maxCachedLimits, CurrentLimit builds one per answer.
type limitCache struct {
	mu sync.RWMutex
	m  map[limitKey]*rlsv3.RateLimitResponse_RateLimit
}

// limitKey is a CurrentLimit's arguments; compat asks for
// CompatibleLimit's message.
type limitKey struct {
	name   string
	quota  int64
	window time.Duration
	cal    limiter.Calendar
	compat bool
}

// maxCachedLimits bounds the limitCache.
const maxCachedLimits = 4096

// get is CurrentLimit (or CompatibleLimit) of k, the same message each
// time.
func (c *limitCache) get(k limitKey) *rlsv3.RateLimitResponse_RateLimit {
	c.mu.RLock()
	rl, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return rl
	}
	if k.compat {
		rl = CompatibleLimit(k.name, k.quota, k.window, k.cal)
	} else {
		rl = CurrentLimit(k.name, k.quota, k.window, k.cal)
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[limitKey]*rlsv3.RateLimitResponse_RateLimit{}
	}
	if len(c.m) < maxCachedLimits {
		c.m[k] = rl
	}
	c.mu.Unlock()
	return rl
}

// descriptors checks req against the bounds and converts its
// descriptors; the error is INVALID_ARGUMENT (UNKNOWN for an empty domain
// or no descriptors with compatibility), and then nothing is counted.
func (s *service) descriptors(req *rlsv3.RateLimitRequest) ([]proxy.Descriptor, error) {
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, format, args...)
	}
	// envoyproxy/ratelimit answers an empty domain and a call without
	// descriptors with a plain error, which gRPC sends as UNKNOWN, with
	// these messages (its service's checkServiceErr): with compatibility,
	// so does the service.
	compat := s.cfg.Compatibility == config.CompatEnvoy
	code := codes.InvalidArgument
	if compat {
		code = codes.Unknown
	}
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return nil, status.Error(code, "rate limit domain must not be empty")
	case n == 0:
		return nil, status.Error(code, "rate limit descriptor list must not be empty")
	case n > s.cfg.MaxDescriptors:
		return nil, bad("%d descriptors; at most %d (rls.max_descriptors)", n, s.cfg.MaxDescriptors)
	}
	total := 0
	for _, d := range req.Descriptors {
		total += len(d.GetEntries())
	}
	// One array for every descriptor's entries (bounded: max_entries
	// each, checked below before any is written), and one allocation for
	// a call of one descriptor of a few entries (most).
	var (
		out     []proxy.Descriptor
		entries []policy.DescriptorEntry
	)
	if len(req.Descriptors) == 1 && total <= 4 {
		one := &struct {
			d [1]proxy.Descriptor
			e [4]policy.DescriptorEntry
		}{}
		out, entries = one.d[:], one.e[:0]
	} else {
		out = make([]proxy.Descriptor, len(req.Descriptors))
		if total <= s.cfg.MaxDescriptors*s.cfg.MaxEntries {
			entries = make([]policy.DescriptorEntry, 0, total)
		}
	}
	// envoyproxy/ratelimit answers a descriptor without entries (OK, or
	// by its own limit), one with an empty key, and counts negative hits
	// as hits: with compatibility, so does the service.
	for i, d := range req.Descriptors {
		es := d.GetEntries()
		switch {
		case len(es) == 0 && !compat:
			return nil, bad("descriptor %d has no entries", i)
		case len(es) > s.cfg.MaxEntries:
			return nil, bad("descriptor %d has %d entries; at most %d (rls.max_entries)", i, len(es), s.cfg.MaxEntries)
		case d.GetIsNegativeHits() && !compat:
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
		var own *proxy.DescriptorLimit
		if l := d.GetLimit(); l != nil && compat {
			// By number, as the reference reads it (the request's unit is
			// envoy.type.v3.RateLimitUnit, numbered as the answer's).
			w, ok := UnitWindow(rlsv3.RateLimitResponse_RateLimit_Unit(l.GetUnit()))
			if !ok {
				return nil, bad("descriptor %d: its limit's unit %v is not SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", i, l.GetUnit())
			}
			own = &proxy.DescriptorLimit{RequestsPerUnit: int64(l.GetRequestsPerUnit()), Unit: w}
		}
		first := len(entries)
		for j, e := range es {
			if e.GetKey() == "" && !compat {
				return nil, bad("descriptor %d, entry %d: the key is empty", i, j)
			}
			entries = append(entries, policy.DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()})
		}
		out[i] = proxy.Descriptor{Entries: entries[first:len(entries):len(entries)], Cost: int64(cost), CheckOnly: checkOnly, Limit: own}
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

// calendarUnits are Envoy's RateLimit units of the calendar windows.
var calendarUnits = map[limiter.Calendar]rlsv3.RateLimitResponse_RateLimit_Unit{
	limiter.CalendarDay:   rlsv3.RateLimitResponse_RateLimit_DAY,
	limiter.CalendarWeek:  rlsv3.RateLimitResponse_RateLimit_WEEK,
	limiter.CalendarMonth: rlsv3.RateLimitResponse_RateLimit_MONTH,
	limiter.CalendarYear:  rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// CurrentLimit returns a limit of quota per window, named name, as
// Envoy's RateLimit: quota per the longest unit that divides window,
// with the unit_multiplier the quotient ("30/5m": 30 per 5 MINUTE); a
// window that is not whole seconds is given per SECOND, rounded down. A
// calendar window (cal not 0) is quota per its unit: a month is MONTH,
// not its nominal length.
func CurrentLimit(name string, quota int64, window time.Duration, cal limiter.Calendar) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	q := uint32(min(max(quota, 0), math.MaxUint32))
	if u, ok := calendarUnits[cal]; ok {
		rl.Unit, rl.RequestsPerUnit = u, q
		return rl
	}
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

// referenceUnits are envoyproxy/ratelimit's units and the windows it
// counts them in (its UnitToDivider: a month is 30 days, a year 365).
var referenceUnits = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// CompatibleLimit is the current_limit envoyproxy/ratelimit gives a limit
// of quota per window, named name ("" for none): quota per the unit whose
// window is window, without unit_multiplier; CurrentLimit's for a window
// that is no unit's, and for a calendar window (cal, which the reference
// has not: its units are lengths).
func CompatibleLimit(name string, quota int64, window time.Duration, cal limiter.Calendar) *rlsv3.RateLimitResponse_RateLimit {
	if cal != 0 {
		return CurrentLimit(name, quota, window, cal)
	}
	for _, u := range referenceUnits {
		if window == u.d {
			return &rlsv3.RateLimitResponse_RateLimit{Name: name, Unit: u.unit, RequestsPerUnit: uint32(min(max(quota, 0), math.MaxUint32))}
		}
	}
	return CurrentLimit(name, quota, window, 0)
}

// UnitWindow is the window envoyproxy/ratelimit counts a unit in; false
// for UNKNOWN or a unit it does not know.
func UnitWindow(u rlsv3.RateLimitResponse_RateLimit_Unit) (time.Duration, bool) {
	for _, r := range referenceUnits {
		if r.unit == u {
			return r.d, true
		}
	}
	return 0, false
}

// headerValues returns h's fields as Envoy's header values, names in
// lower case, sorted.
func headerValues(h http.Header) []*corev3.HeaderValue {
	if len(h) == 0 {
		return nil
	}
	var stack [8]string
	names := stack[:0]
	count := 0
	for name, vs := range h {
		names = append(names, name)
		count += len(vs)
	}
	slices.Sort(names)
	vals := make([]corev3.HeaderValue, count)
	out := make([]*corev3.HeaderValue, 0, count)
	for _, name := range names {
		lower := lowerName(name)
		for _, v := range h[name] {
			hv := &vals[len(out)]
			hv.Key, hv.Value = lower, v
			out = append(out, hv)
		}
	}
	return out
}

// lowerNames are the lower-case forms of the fields an answer carries.
var lowerNames = func() map[string]string {
	m := map[string]string{}
	for _, name := range []string{
		"Ratelimit", "Ratelimit-Policy", "Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset",
		"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After",
	} {
		m[name] = strings.ToLower(name)
	}
	return m
}()

// lowerName is strings.ToLower(name), without allocating for the
// fields an answer usually carries.
func lowerName(name string) string {
	if l, ok := lowerNames[name]; ok {
		return l
	}
	return strings.ToLower(name)
}
