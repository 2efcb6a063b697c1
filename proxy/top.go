package proxy

import (
	"time"

	"github.com/limitproxy/limitproxy/internal/topk"
	"github.com/limitproxy/limitproxy/limiter"
)

// Top offenders (docs/admin-api.md, GET /api/v1/top): per policy, the
// client keys its limits rejected most over the last minute or two
// (Space-Saving, topk.Windowed) and the keys that came closest to their
// limits (topk.Gauge). Bounded: TopK keys per policy each. Keys are kept
// as the limiter saw them; the admin API hashes them unless the operator
// asked for raw keys. No key ever reaches a metric label.

// The sizes of the top-offender trackers.
const (
	// TopK is the keys each tracker of a policy keeps: a rejected key's
	// count is off by at most its window's rejections / TopK.
	TopK = 128
	// TopWindow is the epoch of the rejected keys' counts: they cover the
	// current epoch and the one before (one to two TopWindows).
	TopWindow = time.Minute
	// TopMaxAge is how long a key's latest use of its limit counts
	// towards the closest-to-their-limits list.
	TopMaxAge = time.Minute
)

// tracker is one policy's top offenders.
type tracker struct {
	rejected *topk.Windowed
	closest  *topk.Gauge
}

func newTracker() *tracker {
	w, err := topk.NewWindowed(topk.WindowedParams{K: TopK, Period: TopWindow})
	if err != nil {
		panic(err) // constant parameters
	}
	g, err := topk.NewGauge(topk.GaugeParams{K: TopK, MaxAge: TopMaxAge})
	if err != nil {
		panic(err)
	}
	return &tracker{rejected: w, closest: g}
}

// observe records a decision of the limits of t's policy about key at
// now: a rejection counts towards the most rejected keys; every decision
// updates how close key is to its most used limit. t is the policy's
// tracker, as its snapshot holds it (policyState); nil observes nothing.
func (t *tracker) observe(key string, d limiter.Decision, now time.Time) {
	if t == nil || key == limiter.SkipKey || d.Index < 0 {
		return
	}
	if !d.Allowed {
		t.rejected.Add(key, 1, now)
	}
	used := 1.0
	if d.Allowed && d.Limit > 0 {
		used = 1 - float64(d.Remaining)/float64(d.Limit)
	}
	t.closest.Observe(key, used, now)
}

// observeBanned records a request refused because key is in the
// policy's penalty box: a refusal like a limit's rejection, so that a
// client banned after a few offences and refused hundreds of times is
// counted so (its key spent: used 1). nil observes nothing.
func (t *tracker) observeBanned(key string, now time.Time) {
	if t == nil || key == limiter.SkipKey {
		return
	}
	t.rejected.Add(key, 1, now)
	t.closest.Observe(key, 1, now)
}

// TopEntry is one key of a top-offenders list: as the limiter keyed it
// (see KeyParts), with its count of rejections (and the most that count
// may be over) or how much of its limit it last used.
type TopEntry struct {
	Key   string
	Count uint64  // rejections, an upper bound
	Error uint64  // Count minus a lower bound of the true count
	Used  float64 // the share of its limit the key's latest request left used, 0 to 1
}

// TopList is one policy's top offenders now.
type TopList struct {
	Policy   string
	Rejected []TopEntry // most rejected first
	Closest  []TopEntry // closest to their limits first
	// Total is the rejections the counts cover (one to two TopWindows);
	// no count is off by more than Total / TopK.
	Total uint64
}

// Top returns the top n offenders of every policy in force, in the
// configuration's order.
func (h *Handler) Top(n int) []TopList {
	now := h.now()
	var out []TopList
	snap := h.snap.Load()
	for _, p := range snap.set.Policies {
		t := snap.policies[p].tracker
		l := TopList{Policy: p.Name, Total: t.rejected.Total(now)}
		for _, e := range t.rejected.Top(n, now) {
			l.Rejected = append(l.Rejected, TopEntry{Key: e.Key, Count: e.Count, Error: e.Err})
		}
		for _, r := range t.closest.Top(n, now) {
			l.Closest = append(l.Closest, TopEntry{Key: r.Key, Used: r.Value})
		}
		out = append(out, l)
	}
	return out
}
