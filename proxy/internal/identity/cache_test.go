package identity

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

func TestCacheWindow(t *testing.T) {
	c := newCache(4)
	h := sha256.Sum256([]byte("t"))
	from, until := t0, t0.Add(time.Hour)
	c.put(h, entry{claims: Claims{m: map[string]any{"sub": "a"}}, from: from, until: until}, 0, t0)
	for _, step := range []struct {
		now time.Time
		hit bool
	}{
		{from.Add(-time.Nanosecond), false},
		{from, true},
		{until, true},
		{until.Add(time.Nanosecond), false},
		{from, false}, // removed once past its end
	} {
		if _, hit := c.get(h, step.now); hit != step.hit {
			t.Errorf("get at %v: hit %v, want %v", step.now, hit, step.hit)
		}
	}
}

func TestCacheGenerations(t *testing.T) {
	c := newCache(4)
	h := sha256.Sum256([]byte("t"))
	e := entry{until: t0.Add(time.Hour)}
	c.put(h, e, 1, t0) // verified under a set the cache is not at
	if _, hit := c.get(h, t0); hit {
		t.Fatal("an entry of another generation was cached")
	}
	c.reset(1)
	c.put(h, e, 1, t0)
	if _, hit := c.get(h, t0); !hit {
		t.Fatal("no hit")
	}
	c.reset(2)
	if _, hit := c.get(h, t0); hit {
		t.Fatal("a hit after the key set changed")
	}
}

// TestCacheBounded: the cache never holds more than its size, and a full
// one evicts an expired entry before a live one.
func TestCacheBounded(t *testing.T) {
	c := newCache(evictSample)
	hash := func(i int) [sha256.Size]byte { return sha256.Sum256(fmt.Appendf(nil, "t%d", i)) }
	for i := range evictSample {
		until := t0.Add(time.Hour)
		if i == 3 {
			until = t0.Add(time.Minute)
		}
		c.put(hash(i), entry{until: until}, 0, t0)
	}
	c.put(hash(100), entry{until: t0.Add(time.Hour)}, 0, t0.Add(2*time.Minute))
	if c.len() != evictSample {
		t.Fatalf("len %d, want %d", c.len(), evictSample)
	}
	if _, hit := c.get(hash(3), t0); hit {
		t.Error("the expired entry stayed")
	}
	// Full of live entries: the one closest to its end goes.
	c.put(hash(200), entry{until: t0.Add(2 * time.Hour)}, 0, t0)
	c.put(hash(101), entry{until: t0.Add(30 * time.Minute)}, 0, t0) // evicts another
	for i := range 1000 {
		c.put(hash(1000+i), entry{until: t0.Add(time.Hour)}, 0, t0)
	}
	if c.len() != evictSample {
		t.Errorf("len %d, want %d", c.len(), evictSample)
	}
}

// TestVerifierCache: a token is verified once and then answered from the
// cache until its exp plus the leeway, and never past it.
func TestVerifierCache(t *testing.T) {
	ec := newSigner(t, jose.ES256, "ec")
	v := newVerifier(t, Config{JWKSFile: writeJWKS(t, ec), CacheSize: 2}, Options{})
	tok := ec.token(t, map[string]any{"nbf": t0.Unix()})
	if _, res := v.VerifyToken(context.Background(), tok, t0); res.Status != Valid {
		t.Fatalf("VerifyToken = %+v", res)
	}
	if v.cache.len() != 1 {
		t.Fatalf("cache len %d, want 1", v.cache.len())
	}
	c, res := v.VerifyToken(context.Background(), tok, t0.Add(time.Minute))
	if sub, _ := c.Get("sub"); res.Status != Valid || sub != "alice" {
		t.Fatalf("hit: %+v, sub %q", res, sub)
	}
	for _, step := range []struct {
		now  time.Time
		want Result
	}{
		{exp.Add(DefaultLeeway), Result{Status: Valid}},
		{t0.Add(-DefaultLeeway - time.Second), invalid(ReasonNotYetValid)},
		{exp.Add(DefaultLeeway + time.Second), invalid(ReasonExpired)},
	} {
		if _, res := v.VerifyToken(context.Background(), tok, step.now); res != step.want {
			t.Errorf("at %v: %+v, want %+v", step.now, res, step.want)
		}
	}
	// An invalid token is not cached; the cache stays within its size.
	v.VerifyToken(context.Background(), tok+"x", t0)
	for i := range 5 {
		v.VerifyToken(context.Background(), ec.token(t, map[string]any{"jti": i}), t0)
	}
	if n := v.cache.len(); n > 2 {
		t.Errorf("cache len %d, over 2", n)
	}
}

func TestNoCache(t *testing.T) {
	v := newVerifier(t, Config{Secret: testSecret, CacheSize: -1}, Options{})
	if v.cache != nil {
		t.Fatal("a cache with CacheSize < 0")
	}
	tok := sign(t, jose.HS256, testSecret, "", claims(nil))
	for range 2 {
		if _, res := v.VerifyToken(context.Background(), tok, t0); res.Status != Valid {
			t.Fatalf("VerifyToken = %+v", res)
		}
	}
}
