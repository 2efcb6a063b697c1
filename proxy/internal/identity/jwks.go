package identity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// maxJWKSBytes bounds a JWKS read from a file or a URL (1 MiB): a real
// one is a few KiB, and a larger body is garbage or an attack.
const maxJWKSBytes = 1 << 20

// fetchCall is one fetch of JWKSURL for an unknown kid, which every
// caller that arrives while it is in flight waits for.
type fetchCall struct {
	done chan struct{} // closed when the new key set, if any, is installed
}

// fetch gets and parses JWKSURL, within FetchTimeout.
func (v *Verifier) fetch(ctx context.Context) (*keySet, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, v.s.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.s.JWKSURL, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := v.client.Do(req)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return nil, nil, ue.Err // without the URL, which the caller names
	}
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("status %s", resp.Status)
	}
	body, err := readLimited(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return parseKeySet(body)
}

// readLimited reads all of r, refusing more than maxJWKSBytes.
func readLimited(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("over %d bytes", maxJWKSBytes)
	}
	return b, nil
}

// refresh fetches JWKSURL and installs its keys. On any failure (no
// answer in time, a status other than 200, a body that is not a usable
// JWKS) the last good key set stays and the error is logged and
// returned.
func (v *Verifier) refresh(ctx context.Context) error {
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	ks, skipped, err := v.fetch(ctx)
	if err != nil {
		err = fmt.Errorf("jwks url %s: %w (keeping the last good key set)", v.s.JWKSURL, err)
		if v.log != nil {
			v.log("jwks fetch failed", err)
		}
		return err
	}
	if v.install(ks) {
		v.logSkipped("jwks url "+v.s.JWKSURL, skipped)
	}
	return nil
}

// install makes ks the key set in use unless it has the same keys as the
// current one, and reports whether it did. A new set empties the cache
// first: a token verified under a key the new set lacks must not be
// answered from it. It requires v.fetchMu held.
func (v *Verifier) install(ks *keySet) bool {
	cur := v.keys.Load()
	if ks.sum == cur.sum {
		return false
	}
	ks.gen = cur.gen + 1
	// The cache moves to the new generation before the set is published:
	// a Verify still holding the old set can no longer add to it.
	if v.cache != nil {
		v.cache.reset(ks.gen)
	}
	v.keys.Store(ks)
	return true
}

// refetch is called for a token whose kid the key set lacks. It fetches
// JWKSURL unless a fetch for an unknown kid was made less than MinRefetch
// before now, joins the one in flight if there is one, and returns the
// key set then in use. It waits for the fetch until ctx is done.
func (v *Verifier) refetch(ctx context.Context, now time.Time) *keySet {
	v.mu.Lock()
	c := v.call
	if c == nil {
		if v.closed {
			v.mu.Unlock()
			return v.keys.Load()
		}
		if v.kidFetched {
			// Time going backwards moves the last fetch back with it
			// (as x/time/rate clamps), so it cannot open the gate early
			// nor keep it shut for as long as the clock was wrong.
			if now.Before(v.lastKidFetch) {
				v.lastKidFetch = now
			}
			if now.Sub(v.lastKidFetch) < v.s.MinRefetch {
				v.mu.Unlock()
				return v.keys.Load()
			}
		}
		v.kidFetched, v.lastKidFetch = true, now
		c = &fetchCall{done: make(chan struct{})}
		v.call = c
		v.wg.Add(1)
		// The fetch runs on its own, bound to the Verifier and not to
		// the request that caused it: the callers that join it must not
		// lose it when that one goes away.
		go func() {
			defer v.wg.Done()
			_ = v.refresh(v.ctx) // logged by refresh
			v.mu.Lock()
			v.call = nil
			v.mu.Unlock()
			close(c.done)
		}()
	}
	v.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	return v.keys.Load()
}

// refresher fetches JWKSURL every RefreshInterval until Close.
func (v *Verifier) refresher() {
	defer v.wg.Done()
	t := time.NewTicker(v.s.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-v.ctx.Done():
			return
		case <-t.C:
			_ = v.refresh(v.ctx) // logged by refresh
		}
	}
}
