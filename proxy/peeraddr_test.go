package proxy

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

// TestPeerAddrCache: peerAddr answers what parsing answers, for the
// forms a RemoteAddr takes and for strings that are not addresses, asked
// once, again (from the cache), and after more strings than the cache
// has slots have pushed them out; from many goroutines at once.
func TestPeerAddrCache(t *testing.T) {
	cases := []struct {
		remote string
		want   string // "" for not an address
	}{
		{"192.0.2.7:5555", "192.0.2.7"},
		{"192.0.2.7:5556", "192.0.2.7"},
		{"[2001:db8::1]:80", "2001:db8::1"},
		{"[::ffff:192.0.2.9]:1", "192.0.2.9"},
		{"[fe80::1%eth0]:1", "fe80::1"},
		{"198.51.100.1", "198.51.100.1"},
		{"::1", "::1"},
		{"", ""},
		{"pipe", ""},
		{"192.0.2.7:", ""},
		{"192.0.2.777:1", ""},
		{"@", ""},
	}
	check := func(remote, want string) error {
		a, ok := peerAddr(remote)
		if want == "" {
			if ok {
				return fmt.Errorf("peerAddr(%q) = %v, want not an address", remote, a)
			}
			return nil
		}
		if !ok || a != netip.MustParseAddr(want) {
			return fmt.Errorf("peerAddr(%q) = %v, %v; want %s", remote, a, ok, want)
		}
		return nil
	}
	for round := range 3 {
		for _, c := range cases {
			if err := check(c.remote, c.want); err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
		// Push every slot out with addresses of their own.
		for i := range 4 * len(peerCache) {
			remote := fmt.Sprintf("10.%d.%d.1:%d", i/256, i%256, 1000+i)
			if err := check(remote, fmt.Sprintf("10.%d.%d.1", i/256, i%256)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				n := (i*7 + g) % 600
				if err := check(fmt.Sprintf("10.0.%d.%d:%d", n/256, n%256, n), fmt.Sprintf("10.0.%d.%d", n/256, n%256)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkPeerAddr(b *testing.B) {
	for b.Loop() {
		peerAddr("127.0.0.1:54321")
	}
}

func BenchmarkParsePeerAddr(b *testing.B) {
	for b.Loop() {
		parsePeerAddr("127.0.0.1:54321")
	}
}
