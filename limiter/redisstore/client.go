package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions are the connection settings of NewClient.
type ClientOptions struct {
	// Addrs: one address is a single node; several are seed nodes of a
	// Redis Cluster; with MasterName, Sentinels.
	Addrs []string
	// MasterName, if set, is the master's name for Sentinel.
	MasterName string
	// Username and Password authenticate; "" means none.
	Username, Password string
	// DB selects the database (not on Cluster).
	DB int
	// TLS, if not nil, is the TLS configuration of every connection.
	TLS *tls.Config
	// Timeout bounds reads and writes (a decision's context bounds the
	// whole call); dialing gets at least a second.
	Timeout time.Duration
}

// SlotMapInterval is how often a Cluster client reads the slot map again
// while it is used. It is also read again after every failure to reach a
// node (connection refused or timed out, MOVED, CLUSTERDOWN), so that
// decisions follow a replica's promotion within about this long.
const SlotMapInterval = time.Second

// NewClient returns the client limitproxy decides on: a single node, a
// Cluster client (several addresses) or a Sentinel failover client
// (MasterName). Calls are never retried past their context, and a
// Cluster client reads its slot map every SlotMapInterval.
func NewClient(o ClientOptions) redis.UniversalClient {
	u := &redis.UniversalOptions{
		Addrs: o.Addrs, MasterName: o.MasterName, Username: o.Username, Password: o.Password, DB: o.DB,
		TLSConfig: o.TLS, DialTimeout: max(o.Timeout, time.Second), ReadTimeout: o.Timeout, WriteTimeout: o.Timeout,
		ContextTimeoutEnabled: true, MaxRetries: -1,
		// One dial per attempt: a refused connection is not retried
		// after 100ms backoffs that a decision has no time for (and
		// that would keep a Cluster client reading its slot map from a
		// dead node rather than moving on to the next).
		DialerRetries: 1,
	}
	if o.MasterName == "" && len(o.Addrs) > 1 {
		co := u.Cluster()
		// go-redis reads the map again on MOVED, and otherwise once a
		// minute: a dead master's slots would stay on it for up to a
		// minute after its replica took over.
		co.ClusterStateReloadInterval = SlotMapInterval
		return redis.NewClusterClient(co)
	}
	return redis.NewUniversalClient(u)
}

// ErrClusterNode is wrapped by the error of a single-node client whose
// server is a Redis Cluster node: each key not in its slots would be
// answered MOVED, which a single-node client takes for a failure.
var ErrClusterNode = errors.New("is a Redis Cluster node, but one address makes a single-node client, which takes every MOVED reply for a failure: list at least two of the cluster's nodes")

// single returns c's address if it is a single-node client (not Cluster,
// not Sentinel), else "".
func single(c redis.UniversalClient) string {
	if rc, ok := c.(*redis.Client); ok && rc.Options().Addr != "FailoverClient" {
		return rc.Options().Addr
	}
	return ""
}

// Verify checks that Redis answers within the store's timeout, and that a
// single address is not a Redis Cluster node (an error wrapping
// ErrClusterNode, naming the address).
func (s *Store) Verify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.single == "" {
		return s.c.Ping(ctx).Err()
	}
	info, err := s.c.Info(ctx, "cluster").Result()
	if err != nil {
		return err
	}
	if strings.Contains(info, "cluster_enabled:1") {
		return fmt.Errorf("redis at %s %w", s.single, ErrClusterNode)
	}
	return nil
}

// Ready reports whether decisions are shared: Redis answers within the
// store's timeout (on Cluster, every master the slot map names does), no
// master's breaker is open, and a single address is not a Cluster node.
// Its error names the node at fault.
func (s *Store) Ready(ctx context.Context) error {
	if s.cluster == nil {
		if err := s.Verify(ctx); err != nil {
			return err
		}
		if s.Degraded() {
			return errors.New("redis: circuit breaker open: decisions follow on_error")
		}
		return nil
	}
	// Reading the slot map may meet a dead node first: a second for it,
	// the store's timeout for each master's PING.
	ctx, cancel := context.WithTimeout(ctx, max(s.timeout, time.Second))
	defer cancel()
	var mu sync.Mutex
	var masters []string
	err := s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		masters = append(masters, c.Options().Addr)
		mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("cluster master %s: %w", c.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	open := map[string]bool{}
	for _, n := range s.breakers.states() {
		open[n.Node] = n.Open
	}
	for _, m := range masters {
		if open[m] {
			return fmt.Errorf("cluster master %s: circuit breaker open: decisions on its keys follow on_error", m)
		}
	}
	return nil
}

// Nodes returns the state of every node's circuit breaker that decisions
// asked within the last 10s, sorted by node: on Cluster one per master,
// else one. Safe for concurrent use.
func (s *Store) Nodes() []NodeState { return s.breakers.states() }

// node returns the name of the node that holds clientKey's state: on
// Cluster, the address of its slot's master in the client's slot map
// ("cluster" while there is none); else the single node's address, or
// "sentinel".
func (s *Store) node(ctx context.Context, clientKey string) string {
	if s.cluster == nil {
		return s.name
	}
	// Bounded: with no slot map yet (at start-up) it is read first.
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var buf [40]byte
	// The hash tag alone: every key of clientKey shares its slot.
	m, err := s.cluster.MasterForKey(ctx, string(appendKey(buf[:0], "", clientKey, "")))
	if err != nil {
		return "cluster"
	}
	return m.Options().Addr
}

// explain adds to err what an operator needs to act on it: a single-node
// client answered MOVED or ASK talks to a Cluster node.
func (s *Store) explain(err error) error {
	var re redis.Error
	if s.single == "" || !errors.As(err, &re) {
		return err
	}
	if msg := re.Error(); strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ") || strings.HasPrefix(msg, "CLUSTERDOWN") {
		return fmt.Errorf("%w (redis at %s %w)", err, s.single, ErrClusterNode)
	}
	return err
}

// failed records the outcome of a call to Redis that br allowed at now as
// a probe or not, and reports whether the decision must follow on_error.
// err is nil, or wraps limiter.ErrStoreUnavailable. A call whose caller
// left (ctx done: a client that disconnected) tells nothing about Redis:
// it is neither counted in Errors nor held against the breaker. A failure
// on Cluster has the slot map read again, so that a promoted replica is
// found at once.
func (s *Store) failed(ctx context.Context, br *breaker, now time.Time, probe bool, err error) bool {
	switch {
	case err == nil:
		br.done(now, probe, nil)
		return false
	case ctx.Err() != nil:
		br.abandon(probe)
		return true
	}
	err = s.explain(err)
	br.done(now, probe, err)
	s.errors.Add(1)
	s.lastErr.Store(&err)
	if s.cluster != nil {
		s.cluster.ReloadState(context.Background())
	}
	return true
}
