package h1

import (
	"bufio"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// timeoutError is an Accept failure that passes (out of descriptors).
type timeoutError struct{}

func (timeoutError) Error() string   { return "accept: too many open files" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// scriptListener fails or accepts as its script says: each Accept takes
// the next step, an error to return or nil to accept a connection.
type scriptListener struct {
	net.Listener
	steps chan error
	done  chan struct{}
	once  sync.Once
}

func (l *scriptListener) Accept() (net.Conn, error) {
	select {
	case err := <-l.steps:
		if err != nil {
			return nil, err
		}
		return l.Listener.Accept()
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *scriptListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// TestServerAcceptErrors: as net/http's Serve, an Accept that fails for
// a time is retried after a pause of 5 ms, doubling while it fails and
// starting again at 5 ms once a connection comes, each logged; another
// failure ends Serve with that error.
func TestServerAcceptErrors(t *testing.T) {
	ln := &scriptListener{Listener: listen(t), steps: make(chan error), done: make(chan struct{})}
	var logged quietLog
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ErrorLog: log.New(&logged, "", 0)}
	front := New(srv)
	defer front.Close()
	served := make(chan error, 1)
	go func() { served <- front.Serve(ln) }()
	step := func(err error) {
		t.Helper()
		select {
		case ln.steps <- err:
		case err := <-served:
			t.Fatalf("Serve returned %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("Serve does not accept")
		}
	}
	step(timeoutError{})
	step(timeoutError{})
	step(nil)
	c := dial(t, ln.Addr().String())
	io.WriteString(c, get("/", "Connection: close"))
	br := bufio.NewReader(c)
	if _, body := readResponse(t, c, br, "GET"); body != "ok" {
		t.Errorf("answer %q after the failures, want ok", body)
	}
	step(timeoutError{})
	boom := errors.New("accept: listener broken")
	step(boom)
	select {
	case err := <-served:
		if err != boom {
			t.Errorf("Serve returned %v, want %v", err, boom)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after a lasting failure")
	}
	var pauses []string
	for _, m := range regexp.MustCompile(`http: Accept error: accept: too many open files; retrying in (\S+)`).FindAllStringSubmatch(logged.String(), -1) {
		pauses = append(pauses, m[1])
	}
	if want := []string{"5ms", "10ms", "5ms"}; !slices.Equal(pauses, want) {
		t.Errorf("pauses logged %q, want %q (log %q)", pauses, want, logged.String())
	}
}

// lateListener accepts its first connection and returns it only once
// released: a connection accepted just before Close.
type lateListener struct {
	net.Listener
	accepted chan struct{}
	release  chan struct{}
	once     sync.Once
}

func (l *lateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.once.Do(func() { close(l.accepted) })
	<-l.release
	return c, nil
}

// TestServerAcceptedAfterClose: a connection Accept returns after Close
// is closed, not served, and Serve returns http.ErrServerClosed.
func TestServerAcceptedAfterClose(t *testing.T) {
	ln := &lateListener{Listener: listen(t), accepted: make(chan struct{}), release: make(chan struct{})}
	var states atomic.Int32
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ErrorLog:  log.New(io.Discard, "", 0),
		ConnState: func(net.Conn, http.ConnState) { states.Add(1) },
	}
	front := New(srv)
	served := make(chan error, 1)
	go func() { served <- front.Serve(ln) }()
	c := dial(t, ln.Addr().String())
	io.WriteString(c, get("/"))
	select {
	case <-ln.accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("not accepted")
	}
	front.Close()
	close(ln.release)
	select {
	case err := <-served:
		if err != http.ErrServerClosed {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	expectClosed(t, c, c, 5*time.Second)
	if n := states.Load(); n != 0 {
		t.Errorf("ConnState called %d times for a connection never served", n)
	}
}

// closeConn is a connection that records its Close.
type closeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeConn) Close() error { c.closed.Store(true); return nil }

// TestServerCloseIdle: Shutdown's sweep closes the connections waiting
// for a request, idle ones and new ones that have sent nothing for 5 s
// (as net/http), and spares the others: a request being read or served,
// on a connection however old, and a new connection's first 5 s.
func TestServerCloseIdle(t *testing.T) {
	s := &Server{conns: map[*conn]struct{}{}}
	if !s.closeIdle() {
		t.Error("closeIdle with no connection: false, want true")
	}
	old := time.Now().Add(-10 * time.Second).UnixNano()
	young := time.Now().UnixNano()
	for _, tc := range []struct {
		name  string
		state int32
		born  int64
		close bool
	}{
		{"idle", stateIdle, young, true},
		{"new-silent-5s", stateNew, old, true},
		{"new", stateNew, young, false},
		{"active-old", stateActive, old, false},
		{"active", stateActive, young, false},
	} {
		rwc := &closeConn{}
		c := &conn{srv: s, rwc: rwc, born: tc.born}
		c.state.Store(tc.state)
		s.conns = map[*conn]struct{}{c: {}}
		if s.closeIdle() {
			t.Errorf("%s: closeIdle reports no connection left", tc.name)
		}
		if rwc.closed.Load() != tc.close {
			t.Errorf("%s: closed %v, want %v", tc.name, rwc.closed.Load(), tc.close)
		}
		if want := map[bool]int32{true: stateClosed, false: tc.state}[tc.close]; c.state.Load() != want {
			t.Errorf("%s: state %d, want %d", tc.name, c.state.Load(), want)
		}
	}
}

// TestServerLogsToErrorLog: the front logs to srv.ErrorLog when set,
// and only there; to the log package's standard logger when not, as
// net/http.
func TestServerLogsToErrorLog(t *testing.T) {
	var std quietLog
	log.SetOutput(&std)
	defer log.SetOutput(os.Stderr)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		w.WriteHeader(http.StatusAccepted)
	})
	for _, withLog := range []bool{true, false} {
		var own quietLog
		ln := listen(t)
		srv := &http.Server{Handler: h}
		if withLog {
			srv.ErrorLog = log.New(&own, "", 0)
		}
		front := New(srv)
		go front.Serve(ln)
		c := dial(t, ln.Addr().String())
		io.WriteString(c, get("/", "Connection: close"))
		readResponse(t, c, bufio.NewReader(c), "GET")
		front.Close()
		const msg = "superfluous response.WriteHeader call"
		if withLog {
			if !strings.Contains(own.String(), msg) || std.String() != "" {
				t.Errorf("with ErrorLog: ErrorLog got %q, the standard logger %q", own.String(), std.String())
			}
		} else if !strings.Contains(std.String(), msg) {
			t.Errorf("without ErrorLog: the standard logger got %q", std.String())
		}
	}
}
