package server

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// listening is where a server under test listens.
type listening = Addrs

// serve runs a server for cfg, read from path ("" for none), until ctx is
// done, sending its addresses on ready once it accepts connections; hooks
// change its process before it starts.
func serve(ctx context.Context, path string, cfg *config.Config, stderr io.Writer, ready chan<- listening, hooks ...func(*process)) error {
	return runServer(ctx, path, cfg, stderr, ready, "test", hooks...)
}

// startServer parses src (a configuration file's text, named name in
// errors) and runs a server for it until the test ends, when serve must
// return nil; it returns the server's addresses once it accepts.
func startServer(t *testing.T, name, src string) listening {
	t.Helper()
	cfg, err := config.Parse(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, "", cfg, io.Discard, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case l := <-ready:
		return l
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return listening{}
}

// syncWriter is a log destination tests read while the server writes.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// String returns what has been written so far.
func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// TestMain sets what must hold for every test of the package before any
// runs, so that t.Setenv, which would keep a test from running in
// parallel, is not needed: Pebble (the ACME tests' CA) otherwise waits up
// to 15 s before each validation, and reads PEBBLE_VA_NOSLEEP when a
// validator is made; the admin token the dashboard and metrics tests
// configure (token_env = "LIMITPROXY_TEST_TOKEN") is always "s3cret".
//
// It also runs up to 8 parallel tests at once unless -test.parallel is
// given: the default, GOMAXPROCS (2 on a small machine), queues tests that
// mostly wait (on a timeout, a browser's poll, a child process) behind
// one another.
func TestMain(m *testing.M) {
	os.Setenv("PEBBLE_VA_NOSLEEP", "1")
	os.Setenv("LIMITPROXY_TEST_TOKEN", "s3cret")
	os.Setenv("LIMITPROXY_TEST_KEY_SECRET", testKeySecret)
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < 8 {
		flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}
