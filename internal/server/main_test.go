package server

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/limitproxy/limitproxy/internal/config"
)

// listening is where a server under test listens.
type listening = Addrs

// serve runs a server for cfg, read from path ("" for none), until ctx is
// done, sending its addresses on ready once it accepts connections.
func serve(ctx context.Context, path string, cfg *config.Config, stderr io.Writer, ready chan<- listening) error {
	return runServer(ctx, path, cfg, stderr, ready, "test")
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

// TestMain sets what must hold for every test of the package before any
// runs: Pebble (the ACME tests' CA) otherwise waits up to 15 s before each
// validation, and reads this when a validator is made, so t.Setenv, which
// would keep TestACME from running in parallel, is not used.
func TestMain(m *testing.M) {
	os.Setenv("PEBBLE_VA_NOSLEEP", "1")
	os.Exit(m.Run())
}
