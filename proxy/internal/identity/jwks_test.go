package identity

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

func TestJWKSURL(t *testing.T) {
	a := newSigner(t, jose.ES256, "a")
	srv := newJWKSServer(t, a)
	v := newVerifier(t, Config{JWKSURL: srv.URL}, Options{})
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("New fetched %d times, want 1", n)
	}
	if _, res := v.VerifyToken(context.Background(), a.token(t, nil), t0); res.Status != Valid {
		t.Fatalf("VerifyToken = %+v", res)
	}

	// A token of a kid published since: one fetch, then valid.
	b := newSigner(t, jose.EdDSA, "b")
	srv.serve(t, a, b)
	if _, res := v.VerifyToken(context.Background(), b.token(t, nil), t0); res.Status != Valid {
		t.Fatalf("new kid: VerifyToken = %+v", res)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

func TestJWKSURLInitialFetchFails(t *testing.T) {
	srv := newJWKSServer(t, newSigner(t, jose.ES256, "a"))
	srv.status.Store(http.StatusServiceUnavailable)
	_, err := New(Config{JWKSURL: srv.URL}, Options{})
	if want := "jwks url " + srv.URL + ": status 503 Service Unavailable"; err == nil || err.Error() != want {
		t.Errorf("New: %v, want %q", err, want)
	}
	srv.status.Store(0)
	srv.serveBody([]byte(`{"keys": "x"}`))
	if _, err := New(Config{JWKSURL: srv.URL}, Options{}); err == nil || !strings.HasPrefix(err.Error(), "jwks url "+srv.URL+": not a JWKS") {
		t.Errorf("New: %v", err)
	}
}

// TestUnknownKidFlood: however many distinct unknown kids arrive within
// one MinRefetch, and from however many goroutines, they cost one fetch.
func TestUnknownKidFlood(t *testing.T) {
	a := newSigner(t, jose.ES256, "a")
	srv := newJWKSServer(t, a)
	v := newVerifier(t, Config{JWKSURL: srv.URL, MinRefetch: time.Minute}, Options{})
	before := srv.hits.Load()

	const n, workers = 1000, 8
	toks := make([]string, n)
	for i := range toks {
		toks[i] = sign(t, jose.ES256, a.priv, fmt.Sprintf("unknown-%d", i), claims(nil))
	}
	// The first at t0, then the rest from several goroutines, spread over
	// the interval up to its last nanosecond.
	var valid atomic.Int64
	if _, res := v.VerifyToken(context.Background(), toks[0], t0); res != invalid(ReasonUnknownKid) {
		valid.Add(1)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 1 + w; i < n; i += workers {
				now := t0.Add(time.Duration(i) * time.Minute / n)
				if i == n-1 {
					now = t0.Add(time.Minute - time.Nanosecond)
				}
				if _, res := v.VerifyToken(context.Background(), toks[i], now); res != invalid(ReasonUnknownKid) {
					valid.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if valid.Load() != 0 {
		t.Errorf("%d tokens of unknown kids not refused as unknown", valid.Load())
	}
	if got := srv.hits.Load() - before; got != 1 {
		t.Fatalf("%d fetches for %d unknown kids in one MinRefetch, want 1", got, n)
	}

	// A key published after the flood's fetch is not fetched for until
	// the gate opens, MinRefetch after that fetch: the flood delays a new
	// key by at most MinRefetch. Time going backwards does not open the
	// gate.
	b := newSigner(t, jose.ES256, "b")
	srv.serve(t, a, b)
	tokB := b.token(t, nil)
	for _, step := range []struct {
		tok     string
		now     time.Time
		fetches int64
		want    Result
	}{
		{tokB, t0.Add(time.Minute - time.Nanosecond), 0, invalid(ReasonUnknownKid)},
		{toks[0], t0.Add(time.Minute), 1, invalid(ReasonUnknownKid)},
		{tokB, t0.Add(time.Minute), 0, Result{Status: Valid}},
		{toks[1], t0.Add(time.Minute + time.Second), 0, invalid(ReasonUnknownKid)},
		{toks[1], t0.Add(-time.Hour), 0, invalid(ReasonUnknownKid)}, // backwards: the last fetch moves back with it
		{toks[1], t0.Add(-time.Hour + time.Minute - time.Nanosecond), 0, invalid(ReasonUnknownKid)},
		{toks[1], t0.Add(-time.Hour + time.Minute), 1, invalid(ReasonUnknownKid)},
	} {
		before := srv.hits.Load()
		if _, res := v.VerifyToken(context.Background(), step.tok, step.now); res != step.want {
			t.Errorf("at %v: %+v, want %+v", step.now, res, step.want)
		}
		if got := srv.hits.Load() - before; got != step.fetches {
			t.Errorf("at %v: %d fetches, want %d", step.now, got, step.fetches)
		}
	}
}

// TestRotationUnderLoad: goroutines verify tokens of the current key, of
// the key being retired and forged ones while the JWKS rotates, in
// rounds. Odd rounds publish the new key beside the old one, then tokens
// of the new key arrive (one fetch for its kid), then the old key is
// retired and the verifier learns it at its periodic refresh. Even
// rounds switch at once: tokens of the new key arrive after the old key
// is gone, and one fetch learns both. No token is ever valid under a key
// the verifier's set no longer held when the call began, no forged token
// is valid, every token of a published key is valid, and each round
// costs one fetch for the new kid (plus the periodic refresh).
func TestRotationUnderLoad(t *testing.T) {
	const rounds, workers, tail = 6, 8, 20
	keys := make([]signer, rounds+1)
	for i := range keys {
		keys[i] = newSigner(t, jose.ES256, fmt.Sprintf("k%d", i))
	}
	attacker := newSigner(t, jose.ES256, "attacker")
	srv := newJWKSServer(t, keys[0])
	var l logs
	v := newVerifier(t, Config{JWKSURL: srv.URL, MinRefetch: time.Minute}, Options{Log: l.log})
	ctx := context.Background()

	for r := 1; r <= rounds; r++ {
		old, cur := keys[r-1], keys[r]
		now := t0.Add(time.Duration(r) * time.Minute)
		oldTok, curTok := old.token(t, nil), cur.token(t, nil)
		forged := []string{
			sign(t, jose.ES256, attacker.priv, cur.kid, claims(map[string]any{"sub": "mallory"})),
			sign(t, jose.ES256, attacker.priv, old.kid, claims(map[string]any{"sub": "mallory"})),
			sign(t, jose.ES256, attacker.priv, "attacker", claims(map[string]any{"sub": "mallory"})),
		}
		if v.keys.Load().keys[old.kid].pub == nil {
			t.Fatalf("round %d: the verifier does not hold %s", r, old.kid)
		}
		before := srv.hits.Load()

		var published, done atomic.Bool
		var iterations, wrong, curRefused atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for extra := 0; extra < tail; {
					if done.Load() {
						extra++
					}
					retired := v.keys.Load().keys[old.kid].pub == nil
					if _, res := v.VerifyToken(ctx, oldTok, now); res.Status == Valid && retired {
						wrong.Add(1)
					}
					if published.Load() {
						if c, res := v.VerifyToken(ctx, curTok, now); res.Status != Valid {
							curRefused.Add(1)
						} else if sub, _ := c.Get("sub"); sub != "alice" {
							wrong.Add(1)
						}
					}
					for i, f := range forged {
						// A kid unknown before the new key is published
						// (made up, or the new key's) would spend the
						// round's fetch (TestUnknownKidFlood shows that
						// delay); here it races the new key's tokens for it.
						if i != 1 && !published.Load() {
							continue
						}
						if _, res := v.VerifyToken(ctx, f, now); res.Status == Valid {
							wrong.Add(1)
						}
					}
					iterations.Add(1)
				}
			})
		}
		waitFor := func(n int64) {
			for iterations.Load() < n {
				runtime.Gosched()
			}
		}
		wantFetches := int64(1)
		waitFor(50)
		if r%2 == 1 {
			srv.serve(t, old, cur)
			published.Store(true)
			waitFor(150)
			srv.serve(t, cur)
			if err := v.refresh(ctx); err != nil {
				t.Fatal(err)
			}
			wantFetches = 2
		} else {
			srv.serve(t, cur)
			published.Store(true)
		}
		waitFor(250)
		done.Store(true)
		wg.Wait()

		if wrong.Load() != 0 {
			t.Errorf("round %d: %d tokens wrongly valid", r, wrong.Load())
		}
		if curRefused.Load() != 0 {
			t.Errorf("round %d: %d tokens of the published key %s refused", r, curRefused.Load(), cur.kid)
		}
		if got := srv.hits.Load() - before; got != wantFetches {
			t.Errorf("round %d: %d fetches, want %d", r, got, wantFetches)
		}
		if _, res := v.VerifyToken(ctx, oldTok, now); res != invalid(ReasonUnknownKid) {
			t.Errorf("round %d: retired key's token after the round: %+v", r, res)
		}
	}
	if got := l.all(); len(got) != 0 {
		t.Errorf("logged %q", got)
	}
}

// TestURLFailureKeepsLastGood: a JWKS URL that fails, in every way, keeps
// the last good key set, and the failure is logged.
func TestURLFailureKeepsLastGood(t *testing.T) {
	a := newSigner(t, jose.ES256, "a")
	srv := newJWKSServer(t, a)
	var l logs
	v := newVerifier(t, Config{JWKSURL: srv.URL, FetchTimeout: 200 * time.Millisecond, MinRefetch: time.Minute, CacheSize: -1}, Options{Log: l.log})
	tok := a.token(t, nil)
	unknown := sign(t, jose.ES256, a.priv, "b", claims(nil))
	good := v.keys.Load()

	for i, tc := range []struct {
		name string
		set  func()
		want string
	}{
		{"500", func() { srv.status.Store(500) }, "status 500 Internal Server Error"},
		{"garbage", func() { srv.serveBody([]byte("<html>oops</html>")) }, "not a JWKS: invalid character '<'"},
		{"no keys", func() { srv.serveBody([]byte(`{"keys": []}`)) }, "no usable signature key"},
		{"a bad key", func() { srv.serveBody([]byte(`{"keys": [{"kty": "oct", "kid": "a", "k": "c2VjcmV0"}]}`)) }, "symmetric"},
		{"too large", func() { srv.serveBody(bytes.Repeat([]byte(" "), maxJWKSBytes+1)) }, "over 1048576 bytes"},
		{"timeout", func() { srv.hang.Store(true) }, srv.URL + ": context deadline exceeded (keeping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.status.Store(0)
			srv.hang.Store(false)
			srv.serve(t, a)
			tc.set()
			// The periodic refresh.
			err := v.refresh(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("refresh: %v, want %q naming the URL", err, tc.want)
			}
			// A fetch for an unknown kid.
			before := srv.hits.Load()
			now := t0.Add(time.Duration(i) * time.Minute)
			if _, res := v.VerifyToken(context.Background(), unknown, now); res != invalid(ReasonUnknownKid) {
				t.Errorf("unknown kid: %+v", res)
			}
			if srv.hits.Load() != before+1 {
				t.Errorf("no fetch for the unknown kid")
			}
			if v.keys.Load() != good {
				t.Error("the key set changed")
			}
			if _, res := v.VerifyToken(context.Background(), tok, now); res.Status != Valid {
				t.Errorf("a token of the last good set: %+v", res)
			}
		})
	}
	got := l.all()
	if len(got) != 12 {
		t.Fatalf("logged %d lines, want 12: %q", len(got), got)
	}
	if want := "jwks fetch failed: jwks url " + srv.URL + ": status 500 Internal Server Error (keeping the last good key set)"; got[0] != want {
		t.Errorf("logged %q, want %q", got[0], want)
	}
}

// TestKeyRemovedStopsCachedToken: a token verified and cached under a key
// the next key set drops is not valid once that set is in use.
func TestKeyRemovedStopsCachedToken(t *testing.T) {
	a, b := newSigner(t, jose.ES256, "a"), newSigner(t, jose.ES256, "b")
	srv := newJWKSServer(t, a, b)
	v := newVerifier(t, Config{JWKSURL: srv.URL}, Options{})
	tokA, tokB := a.token(t, nil), b.token(t, nil)
	for _, tok := range []string{tokA, tokB} {
		if _, res := v.VerifyToken(context.Background(), tok, t0); res.Status != Valid {
			t.Fatalf("VerifyToken = %+v", res)
		}
	}
	// The same keys again: the cache stays.
	if err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v.cache.len() != 2 {
		t.Fatalf("cache emptied by an unchanged key set: %d entries", v.cache.len())
	}
	srv.serve(t, b)
	if err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, res := v.VerifyToken(context.Background(), tokA, t0); res != invalid(ReasonUnknownKid) {
		t.Errorf("token of the removed key: %+v", res)
	}
	if _, res := v.VerifyToken(context.Background(), tokB, t0); res.Status != Valid {
		t.Errorf("token of the kept key: %+v", res)
	}
}

// TestWaiterLeaves: a caller waiting for a fetch for an unknown kid
// leaves when its context is done; the fetch goes on, bounded by
// FetchTimeout, and Close waits for it.
func TestWaiterLeaves(t *testing.T) {
	a := newSigner(t, jose.ES256, "a")
	srv := newJWKSServer(t, a)
	v, err := New(Config{JWKSURL: srv.URL, FetchTimeout: 200 * time.Millisecond}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.hang.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+sign(t, jose.ES256, a.priv, "b", claims(nil)))
	res := make(chan Result)
	go func() {
		_, rs := v.Verify(r, t0)
		res <- rs
	}()
	for srv.hits.Load() < 2 {
		runtime.Gosched()
	}
	cancel()
	if rs := <-res; rs != invalid(ReasonUnknownKid) {
		t.Errorf("Verify = %+v", rs)
	}
	v.Close()
	v.Close()
	// After Close, no fetch.
	srv.hang.Store(false)
	before := srv.hits.Load()
	v.VerifyToken(context.Background(), sign(t, jose.ES256, a.priv, "c", claims(nil)), t0.Add(time.Hour))
	if srv.hits.Load() != before {
		t.Error("a fetch after Close")
	}
	if _, rs := v.VerifyToken(context.Background(), a.token(t, nil), t0); rs.Status != Valid {
		t.Errorf("after Close: %+v", rs)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRefresher: the keys are fetched again every RefreshInterval, so a
// kid published meanwhile is known without a fetch of its own. Run in a
// synctest bubble (its fake clock), with the JWKS served in memory.
func TestRefresher(t *testing.T) {
	a, b := newSigner(t, jose.ES256, "a"), newSigner(t, jose.ES256, "b")
	synctest.Test(t, func(t *testing.T) {
		var hits atomic.Int64
		var body atomic.Pointer[[]byte]
		setBody := func(s ...signer) {
			var keys []jose.JSONWebKey
			for _, k := range s {
				keys = append(keys, k.public())
			}
			b := jwksJSON(t, keys...)
			body.Store(&b)
		}
		setBody(a)
		client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			hits.Add(1)
			return &http.Response{StatusCode: 200, Status: "200 OK", Body: io.NopCloser(bytes.NewReader(*body.Load()))}, nil
		})}
		v, err := New(Config{JWKSURL: "https://idp.example/jwks", RefreshInterval: 10 * time.Minute}, Options{HTTPClient: client})
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		setBody(a, b)
		time.Sleep(10*time.Minute - time.Nanosecond)
		synctest.Wait()
		if hits.Load() != 1 {
			t.Fatalf("%d fetches before the interval, want 1", hits.Load())
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if hits.Load() != 2 {
			t.Fatalf("%d fetches after the interval, want 2", hits.Load())
		}
		if _, res := v.VerifyToken(context.Background(), b.token(t, nil), t0); res.Status != Valid || hits.Load() != 2 {
			t.Errorf("token of the refreshed key: %+v after %d fetches", res, hits.Load())
		}
		time.Sleep(20 * time.Minute)
		synctest.Wait()
		if hits.Load() != 4 {
			t.Errorf("%d fetches after three intervals, want 4", hits.Load())
		}
	})
}
