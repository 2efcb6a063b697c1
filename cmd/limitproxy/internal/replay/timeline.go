package replay

// maxBuckets bounds a timeline: a log longer than maxBuckets seconds is
// counted in wider buckets (2 s, 4 s, …), so that a timeline of a year's
// log is as small as one of an hour's.
const maxBuckets = 4096

// point is one bucket's counts.
type point struct {
	admitted, rejected, shadow int64
}

// timeline counts decisions in buckets of width seconds, aligned to the
// Unix epoch: bucket b covers [b·width, (b+1)·width). It grows in either
// direction as instants arrive (a late record may precede the first) and
// doubles its width, merging pairs of buckets, when the span would exceed
// maxBuckets. The result depends only on the instants added, not on the
// order they were added in.
type timeline struct {
	width int64   // seconds per bucket, a power of two
	base  int64   // the bucket number of pts[0]
	pts   []point // nil until the first add
}

// floorDiv is a/b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// at returns the bucket for the instant sec (Unix seconds), making room
// for it.
func (t *timeline) at(sec int64) *point {
	if t.width == 0 {
		t.width = 1
	}
	b := floorDiv(sec, t.width)
	if t.pts == nil {
		t.base, t.pts = b, make([]point, 1, 64)
		return &t.pts[0]
	}
	for {
		lo, hi := min(b, t.base), max(b, t.base+int64(len(t.pts))-1)
		if hi-lo+1 <= maxBuckets {
			break
		}
		t.widen()
		b = floorDiv(sec, t.width)
	}
	if b < t.base {
		grown := make([]point, int64(len(t.pts))+t.base-b, cap(t.pts)+int(t.base-b))
		copy(grown[t.base-b:], t.pts)
		t.base, t.pts = b, grown
	}
	for b-t.base >= int64(len(t.pts)) {
		t.pts = append(t.pts, point{})
	}
	return &t.pts[b-t.base]
}

// widen doubles the width, adding each pair of buckets into one.
func (t *timeline) widen() {
	base := floorDiv(t.base, 2)
	n := floorDiv(t.base+int64(len(t.pts))-1, 2) - base + 1
	pts := make([]point, n)
	for i, p := range t.pts {
		q := &pts[floorDiv(t.base+int64(i), 2)-base]
		q.admitted += p.admitted
		q.rejected += p.rejected
		q.shadow += p.shadow
	}
	t.width *= 2
	t.base, t.pts = base, pts
}

// span returns the first second the timeline covers and the second after
// its last bucket; 0, 0 when empty.
func (t *timeline) span() (from, to int64) {
	if t.pts == nil {
		return 0, 0
	}
	return t.base * t.width, (t.base + int64(len(t.pts))) * t.width
}

// rebin returns the timeline's counts in buckets of width seconds (a
// power-of-two multiple of t.width, or equal) from the second from
// (aligned to width) for n buckets: for drawing several timelines on one
// axis.
func (t *timeline) rebin(width, from int64, n int) []point {
	out := make([]point, n)
	for i, p := range t.pts {
		sec := (t.base + int64(i)) * t.width
		j := floorDiv(sec-from, width)
		if j < 0 || j >= int64(n) {
			continue
		}
		q := &out[j]
		q.admitted += p.admitted
		q.rejected += p.rejected
		q.shadow += p.shadow
	}
	return out
}
