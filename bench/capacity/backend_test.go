package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestPool: requests past the workers wait in arrival order; fewer
// workers take effect as busy ones finish, more start waiting requests at
// once; a waiter whose context ends leaves the queue without a worker.
func TestPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(2)
		var order []int
		done := make(chan int, 10)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// Requests 0 and 1 take the two workers; 2, 3 and 4 wait, in
		// that order (each started once the previous is queued).
		for i := range 5 {
			c := t.Context()
			if i == 3 {
				c = ctx // 3's client goes away while it waits
			}
			go func() {
				if p.acquire(c) {
					done <- i
				} else {
					done <- -i
				}
			}()
			synctest.Wait()
		}
		if n, busy, waiting := p.state(); n != 2 || busy != 2 || waiting != 3 {
			t.Fatalf("state %d %d %d, want 2 workers, 2 busy, 3 waiting", n, busy, waiting)
		}
		order = append(order, <-done, <-done)
		cancel()
		synctest.Wait()
		if got := <-done; got != -3 {
			t.Fatalf("request %d returned first after the cancel, want 3 refused", got)
		}
		if _, busy, waiting := p.state(); busy != 2 || waiting != 2 {
			t.Fatalf("after the cancel: %d busy, %d waiting; want 2, 2", busy, waiting)
		}
		// One worker now: a release hands nothing on (2 busy > 1 worker)...
		p.set(1)
		p.release()
		synctest.Wait()
		if _, busy, waiting := p.state(); busy != 1 || waiting != 2 {
			t.Fatalf("after set(1) and a release: %d busy, %d waiting; want 1, 2", busy, waiting)
		}
		// ... the next does: request 2, the oldest waiting.
		p.release()
		order = append(order, <-done)
		// Three workers: request 4 starts at once.
		p.set(3)
		order = append(order, <-done)
		if want := []int{0, 1, 2, 4}; !equal(order, want) {
			t.Errorf("workers granted in the order %v, want %v", order, want)
		}
		if n, busy, waiting := p.state(); n != 3 || busy != 2 || waiting != 0 {
			t.Errorf("state %d %d %d, want 3 workers, 2 busy, none waiting", n, busy, waiting)
		}
	})
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBackend: a request holds a worker for the service time, and
// /control reads and sets the workers.
func TestBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{pool: newPool(8), service: 50 * time.Millisecond}
		start := time.Now()
		w := httptest.NewRecorder()
		b.ServeHTTP(w, httptest.NewRequest("GET", "/work", nil))
		if w.Code != http.StatusOK || w.Body.String() != "ok\n" || time.Since(start) != 50*time.Millisecond {
			t.Errorf("GET /work: %d %q after %v, want 200 \"ok\\n\" after 50ms", w.Code, w.Body, time.Since(start))
		}
		for _, c := range []struct{ method, target, want string }{
			{"POST", "/control?workers=4", "workers 4 busy 0 waiting 0\n"},
			{"GET", "/control", "workers 4 busy 0 waiting 0\n"},
			{"POST", "/control?workers=0", "workers must be a positive integer\n"},
		} {
			w := httptest.NewRecorder()
			b.ServeHTTP(w, httptest.NewRequest(c.method, c.target, strings.NewReader("")))
			if w.Body.String() != c.want {
				t.Errorf("%s %s: %q, want %q", c.method, c.target, w.Body, c.want)
			}
		}
	})
}
