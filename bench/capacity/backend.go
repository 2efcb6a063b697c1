package main

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// pool is the backend's capacity: n workers, each request holding one
// for the service time, the others waiting for one in arrival order, as
// many as come (so latency grows without bound past capacity, as in a
// thread-pool application server with a deep accept queue). n may change
// while requests wait or hold workers. Safe for concurrent use.
type pool struct {
	mu      sync.Mutex
	n       int       // workers
	busy    int       // requests holding a worker; above n for a while after n falls
	waiting list.List // of chan struct{}, closed when a worker is granted; oldest first
}

func newPool(n int) *pool { return &pool{n: n} }

// acquire waits for a worker, in arrival order, and reports whether it
// got one: false if ctx was done first (the client went away while its
// request waited), and the request then takes no worker at all.
func (p *pool) acquire(ctx context.Context) bool {
	p.mu.Lock()
	if p.busy < p.n && p.waiting.Len() == 0 {
		p.busy++
		p.mu.Unlock()
		return true
	}
	granted := make(chan struct{})
	e := p.waiting.PushBack(granted)
	p.mu.Unlock()
	select {
	case <-granted:
		return true
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-granted: // granted meanwhile: hand the worker on
		p.busy--
		p.grantLocked()
	default:
		p.waiting.Remove(e)
	}
	return false
}

// release gives a worker back.
func (p *pool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy--
	p.grantLocked()
}

// set changes the number of workers: more start at once on waiting
// requests; fewer take effect as busy workers finish.
func (p *pool) set(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	p.grantLocked()
}

// grantLocked gives free workers to the oldest waiting requests; it
// requires p.mu held.
func (p *pool) grantLocked() {
	for p.busy < p.n && p.waiting.Len() > 0 {
		close(p.waiting.Remove(p.waiting.Front()).(chan struct{}))
		p.busy++
	}
}

// state returns the number of workers, of requests holding one and of
// requests waiting.
func (p *pool) state() (n, busy, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.busy, p.waiting.Len()
}

// backend is the application server under protection: every request but
// /control takes a worker of its pool for service (the work of a
// request, slept: it costs no CPU, so the backend's capacity does not
// depend on what else runs on the machine) and is answered 200 "ok".
// A request whose client has gone while it waited takes no worker (Go's
// server cancels its context when the connection closes); one that has a
// worker keeps it for the whole service time regardless.
//
// POST /control?workers=N changes the number of workers; GET /control
// returns "workers N busy B waiting Q".
type backend struct {
	pool    *pool
	service time.Duration
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/control" {
		b.control(w, r)
		return
	}
	if !b.pool.acquire(r.Context()) {
		return // the client has gone: nothing to answer
	}
	time.Sleep(b.service)
	b.pool.release()
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ok\n")
}

func (b *backend) control(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		n, err := strconv.Atoi(r.FormValue("workers"))
		if err != nil || n < 1 {
			http.Error(w, "workers must be a positive integer", http.StatusBadRequest)
			return
		}
		b.pool.set(n)
	case http.MethodGet:
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
		return
	}
	n, busy, waiting := b.pool.state()
	fmt.Fprintf(w, "workers %d busy %d waiting %d\n", n, busy, waiting)
}

// serve runs the backend on addr until the process is killed.
func serve(addr string, workers int, service time.Duration) {
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		Handler: &backend{pool: newPool(workers), service: service}}
	fmt.Fprintln(os.Stderr, "capacity backend:", srv.ListenAndServe())
	os.Exit(1)
}
