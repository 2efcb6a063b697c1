package proxy

import (
	"strconv"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// BenchmarkTopObserve is what the top offenders cost a limited request:
// one decision observed (the closest-to-limit list; a rejection also adds
// to the most rejected), over 1000 keys, with TopK kept. Compare with
// BenchmarkForwarded's time per request (cmd/limitproxy/internal/server) for its share.
func BenchmarkTopObserve(b *testing.B) {
	for _, rejected := range []bool{false, true} {
		b.Run("rejected="+strconv.FormatBool(rejected), func(b *testing.B) {
			t := newTracker()
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "10.0.0." + strconv.Itoa(i)
			}
			d := limiter.Decision{Allowed: !rejected, Limit: 100, Remaining: 40}
			now := time.Unix(1_800_000_000, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				t.observe(keys[i%len(keys)], d, now)
			}
		})
	}
}
