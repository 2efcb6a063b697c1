package identity

import (
	"crypto/sha256"
	"sync"
	"time"
)

// evictSample is how many entries a full cache looks at to choose the one
// it evicts.
const evictSample = 8

// entry is a verified token: its claims and the instants between which it
// stays valid (nbf and iat less the leeway, exp plus the leeway), so that
// a hit gives the answer a full verification would at that instant.
type entry struct {
	claims      Claims
	from, until time.Time
}

// cache remembers verified tokens by the SHA-256 of the token, so that a
// token is not verified again on every request. The hash is
// cryptographic: no token can be made to stand for another. It holds at
// most max entries, evicting of evictSample entries (map iteration
// starts at a random place) an expired one, else the one closest to its
// end. Entries are stamped with the key set generation they were
// verified under, and a new generation empties the cache, so that a key
// removed from the JWKS stops verifying at once. It is safe for
// concurrent use.
type cache struct {
	mu  sync.Mutex
	max int
	gen uint64                      // the key set generation of every entry
	m   map[[sha256.Size]byte]entry // guarded by mu
}

func newCache(max int) *cache {
	return &cache{max: max, m: make(map[[sha256.Size]byte]entry)}
}

// get returns the claims of the token whose hash is h if it is cached
// and valid at now. An entry whose end has passed is removed.
func (c *cache) get(h [sha256.Size]byte, now time.Time) (Claims, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[h]
	switch {
	case !ok:
		return Claims{}, false
	case now.After(e.until):
		delete(c.m, h)
		return Claims{}, false
	case now.Before(e.from):
		return Claims{}, false
	}
	return e.claims, true
}

// put caches e under h if it was verified under the key set of the
// cache's generation gen; an entry verified under an older set is
// dropped.
func (c *cache) put(h [sha256.Size]byte, e entry, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.m[h]; !ok && len(c.m) >= c.max {
		c.evictLocked(now)
	}
	c.m[h] = e
}

// evictLocked removes one entry. It requires c.mu held.
func (c *cache) evictLocked(now time.Time) {
	var victim [sha256.Size]byte
	var end time.Time
	n := 0
	for h, e := range c.m {
		if now.After(e.until) {
			victim = h
			break
		}
		if n == 0 || e.until.Before(end) {
			victim, end = h, e.until
		}
		if n++; n == evictSample {
			break
		}
	}
	delete(c.m, victim)
}

// reset empties the cache for the key set of generation gen.
func (c *cache) reset(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = gen
	clear(c.m)
}

// len is the number of entries.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
