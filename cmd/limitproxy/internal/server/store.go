package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/leases"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
	"github.com/limitproxy/limitproxy/policy/config"
)

// stores is what serve decides with: the store the policies are bound to,
// and the memory store (the store itself, or Redis's on_error "local"
// fallback), whose janitor serve runs and whose state reloads release.
type stores struct {
	decide limiter.Store
	memory *memstore.Store
	redis  *redisstore.Store // nil for the memory backend
	// leases is the global tier in front of Redis (decide is it): limits
	// with accuracy "bounded" are decided from its leases. nil for the
	// memory backend.
	leases *leases.Store
	clock  func() time.Time // the limiters' clock
	// bans is the penalty box ([policy.ban]); run keeps it (the Redis
	// mirror's subscription, the memory records' sweep) until ctx ends.
	bans    perkey.Bans
	runBans func(ctx context.Context)
	// overrides are the per-key overrides; runOverrides keeps the Redis
	// mirror current until ctx ends (nothing to do in memory).
	overrides    perkey.Overrides
	runOverrides func(ctx context.Context)
	// persistence says where a stored override lives (see
	// overridePersistence).
	persistence func(ctx context.Context) (persisted bool, where string)
	close       func()
}

// banSweep is how often the memory penalty box drops expired records
// (they are never reported once expired; this frees their memory).
const banSweep = time.Minute

// newStores builds the [store] of cfg; clock is the one the limiters'
// instants come from. A Redis that does not answer at start-up is not an
// error: decisions follow on_error until it does, and the log says so.
func newStores(cfg config.Store, log *zap.Logger, clock func() time.Time) (*stores, error) {
	mem := memstore.New(memstore.Options{MaxKeys: cfg.MaxKeys, Clock: clock})
	if cfg.Backend != config.BackendRedis {
		return newMemoryStores(cfg, mem, clock)
	}
	st, err := newRedisStores(cfg.Redis, mem, log.Named("redis"), clock)
	if err != nil {
		return nil, err
	}
	lc := cfg.Leases
	st.leases = leases.New(st.redis, leases.Options{LeaseTime: lc.LeaseTime, MaxShare: lc.MaxShare, MinLease: lc.MinLease, MaxKeys: lc.MaxKeys})
	st.decide, st.clock = st.leases, clock
	return st, nil
}

// newMemoryStores builds the memory backend around mem: the penalty box
// swept every banSweep, the overrides kept in cfg's overrides_file if set.
func newMemoryStores(cfg config.Store, mem *memstore.Store, clock func() time.Time) (*stores, error) {
	ov, err := memstore.NewOverrides(memstore.OverrideOptions{Path: cfg.OverridesFile})
	if err != nil {
		return nil, fmt.Errorf("store.overrides_file: %w", err)
	}
	bans := memstore.NewBans(memstore.BanOptions{})
	return &stores{decide: mem, memory: mem, bans: bans, runBans: func(ctx context.Context) {
		t := time.NewTicker(banSweep)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				bans.Sweep(clock())
			}
		}
	}, overrides: ov, runOverrides: func(context.Context) {}, persistence: func(context.Context) (bool, string) {
		if cfg.OverridesFile == "" {
			return false, "memory"
		}
		return true, "file"
	}, close: func() {}}, nil
}

// newRedisStores builds the Redis backend of rc, with mem as on_error
// "local"'s fallback; its penalty box and overrides are mirrored from
// Redis while their run functions run.
func newRedisStores(rc config.Redis, mem *memstore.Store, log *zap.Logger, clock func() time.Time) (*stores, error) {
	client, err := newRedisClient(rc)
	if err != nil {
		return nil, err
	}
	routeRedisLogs(log)
	rs, err := redisstore.New(client, redisstore.Options{
		Prefix: rc.Prefix, Timeout: rc.Timeout, OnError: string(rc.OnError), Fallback: mem,
		OnBreaker: func(node string, open bool, err error) {
			if open {
				log.Error("redis unreachable: decisions on its keys follow on_error until it answers again", zap.String("node", node), zap.String("on_error", string(rc.OnError)), zap.Error(err))
			} else {
				log.Info("redis reachable again: limits on its keys are shared again", zap.String("node", node))
			}
		},
	})
	if err != nil {
		client.Close()
		return nil, err
	}
	if err := rs.Verify(context.Background()); errors.Is(err, redisstore.ErrClusterNode) {
		client.Close()
		return nil, fmt.Errorf("store.redis.addrs: %w", err)
	} else if err != nil {
		log.Warn("redis does not answer at start-up; decisions follow on_error until it does", zap.Strings("addrs", rc.Addrs), zap.Error(err))
	}
	bans := redisstore.NewBans(client, redisstore.BanOptions{Prefix: rc.Prefix, Timeout: rc.Timeout, Clock: clock})
	run := func(ctx context.Context) {
		if err := bans.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("the penalty box's subscription to Redis stopped", zap.Error(err))
		}
	}
	ov := redisstore.NewOverrides(client, redisstore.OverrideOptions{Prefix: rc.Prefix, Timeout: max(rc.Timeout, time.Second)})
	runOv := func(ctx context.Context) {
		if err := ov.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("the overrides' subscription to Redis stopped", zap.Error(err))
		}
	}
	persistence := func(ctx context.Context) (bool, string) {
		durable, how, err := ov.Persistence(ctx)
		if err != nil {
			how = "unknown"
		}
		return durable, "redis " + how
	}
	return &stores{decide: rs, memory: mem, redis: rs, bans: bans, runBans: run, overrides: ov, runOverrides: runOv,
		persistence: persistence, close: func() { client.Close() }}, nil
}

// newRedisClient returns the client of rc. One address: a single node;
// several: Redis Cluster; master_name: Sentinel. Every call is bounded by
// the decision's context (store.redis.timeout), and never retried past it.
func newRedisClient(rc config.Redis) (redis.UniversalClient, error) {
	password, err := secretEnv(rc.PasswordEnv)
	if err != nil {
		return nil, fmt.Errorf("store.redis.password_env: %w", err)
	}
	var tlsConfig *tls.Config
	if rc.TLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return redisstore.NewClient(redisstore.ClientOptions{
		Addrs: rc.Addrs, MasterName: rc.MasterName, Username: rc.Username, Password: password, DB: rc.DB,
		TLS: tlsConfig, Timeout: rc.Timeout,
	}), nil
}

// redisLogs routes go-redis's own log lines (connection-pool trouble,
// cluster topology changes), which it writes with the standard logger by
// default, through zap at warn level.
type redisLogs struct{ log atomic.Pointer[zap.Logger] }

func (r *redisLogs) Printf(_ context.Context, format string, v ...any) {
	r.log.Load().Warn("go-redis: " + fmt.Sprintf(format, v...))
}

var redisLogger redisLogs

// routeRedisLogs sends go-redis's log lines to log. go-redis has one
// logger for the whole process (redis.SetLogger), so it is installed once
// and points at the logger of the latest Redis store.
func routeRedisLogs(log *zap.Logger) {
	if redisLogger.log.Swap(log) == nil {
		redis.SetLogger(&redisLogger)
	}
}

// ready reports whether the store decides as configured: always for
// memory; for Redis, when it answers within its timeout (on Cluster every
// master does), no node's circuit breaker is open (decisions follow
// on_error there), and one address is not a Cluster node.
func (s *stores) ready(ctx context.Context) error {
	if s.redis == nil {
		return nil
	}
	if err := s.redis.Ready(ctx); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// CheckStore connects to the store cfg configures, as serving would, and
// reports whether it decides as configured: the memory store always does;
// Redis must answer within its timeout (on Cluster, every master must),
// and one address must not be a Cluster node. For `limitproxy check
// -connect`.
func CheckStore(ctx context.Context, cfg config.Store) error {
	if cfg.Backend != config.BackendRedis {
		return nil
	}
	st, err := newStores(cfg, zap.NewNop(), time.Now)
	if err != nil {
		return err
	}
	defer st.close()
	if err := st.ready(ctx); err != nil {
		return fmt.Errorf("store.redis: %w", err)
	}
	return nil
}
