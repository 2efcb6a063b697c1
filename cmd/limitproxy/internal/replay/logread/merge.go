package logread

import (
	"errors"
	"io"
	"math"
	"time"
)

// DefaultSlack is MergeOptions.Slack's default: how far out of time order
// a log's lines may be and still come out in order.
const DefaultSlack = 5 * time.Second

// MergeOptions configures Merge.
type MergeOptions struct {
	// Slack is how far a record's Time may be behind the latest Time
	// already read from the same input and still come out in order. Logs
	// are written when requests end, so records ordered by arrival are out
	// of line order by up to the longest request's duration (within the
	// same second for nginx's $time_local without $request_time, whose
	// Time is the end). Larger slack holds more records: about
	// Slack × request rate. 0 means DefaultSlack; a negative Slack means
	// none (each input is taken to be in order). A record further out of
	// order than Slack comes out as soon as it is read, before records
	// with earlier Times already out, and is counted in Stats.Late.
	Slack time.Duration
}

// Merger reads several Readers as one, in order of Time (k-way merge
// with a reorder window; see MergeOptions.Slack). Records of equal Time
// come out in the order of the readers given, and of their lines. Not
// safe for concurrent use.
type Merger struct {
	srcs  []mergeSource
	slack int64 // nanoseconds
	q     mergeQueue
	slots []Record // the records held, by mergeItem.slot
	free  []int
	last  int64 // Time of the last record returned, Unix nanoseconds
	out   bool  // a record was returned
	late  int64
	err   error // sticky
}

type mergeSource struct {
	r       Reader
	done    bool
	seen    bool  // a record was read
	maxSeen int64 // the latest Time read, Unix nanoseconds
	seq     uint64
}

// Merge returns a Merger reading rs. It reads each of them only as far as
// it must: a record comes out once every reader still open has read past
// its Time plus Slack.
func Merge(o MergeOptions, rs ...Reader) *Merger {
	slack := o.Slack
	switch {
	case slack == 0:
		slack = DefaultSlack
	case slack < 0:
		slack = 0
	}
	m := &Merger{slack: int64(slack)}
	for _, r := range rs {
		m.srcs = append(m.srcs, mergeSource{r: r})
	}
	return m
}

// Next returns the next record in time order, io.EOF at the end. A
// *LineError from one of the readers is passed on as soon as it is read,
// which may be ahead of records the Merger still holds, and Next may be
// called again to go on; any other error is final.
func (m *Merger) Next() (Record, error) {
	for {
		if m.err != nil {
			return Record{}, m.err
		}
		// The reader that holds the others back: the one whose
		// watermark (latest Time read minus the slack) is lowest.
		src, mark := -1, int64(math.MaxInt64)
		for i := range m.srcs {
			s := &m.srcs[i]
			if s.done {
				continue
			}
			w := int64(math.MinInt64)
			if s.seen {
				w = s.maxSeen - m.slack
			}
			if src < 0 || w < mark {
				src, mark = i, w
			}
		}
		if len(m.q) > 0 && (src < 0 || m.q[0].t < mark) {
			return m.pop(), nil
		}
		if src < 0 {
			return Record{}, io.EOF
		}
		s := &m.srcs[src]
		rec, err := s.r.Next()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			s.done = true
			continue
		case errors.Is(err, ErrMalformed):
			return Record{}, err
		default:
			m.err = err
			return Record{}, err
		}
		t := rec.Time.UnixNano()
		if !s.seen || t > s.maxSeen {
			s.seen, s.maxSeen = true, t
		}
		slot := len(m.slots)
		if n := len(m.free); n > 0 {
			slot, m.free = m.free[n-1], m.free[:n-1]
			m.slots[slot] = rec
		} else {
			m.slots = append(m.slots, rec)
		}
		m.q.push(mergeItem{t: t, src: src, seq: s.seq, slot: slot})
		s.seq++
	}
}

func (m *Merger) pop() Record {
	it := m.q.pop()
	rec := m.slots[it.slot]
	// The slot is not cleared: the next record read takes it, so what it
	// keeps alive is bounded by the records held at most.
	m.free = append(m.free, it.slot)
	if m.out && it.t < m.last {
		m.late++
	} else {
		m.last = it.t
	}
	m.out = true
	return rec
}

// Stats returns the readers' counts added up, Records counting the records
// the Merger returned and Late those that came out of order.
func (m *Merger) Stats() Stats {
	var st Stats
	for _, s := range m.srcs {
		st.add(s.r.Stats())
	}
	st.Records -= int64(len(m.q)) // read, not yet returned
	st.Late = m.late
	return st
}

// mergeItem is a held record in the queue: its Time and its place in its
// input, which breaks ties.
type mergeItem struct {
	t    int64
	src  int
	seq  uint64
	slot int
}

// mergeQueue is a min-heap of held records. It is written out rather
// than through container/heap, whose interface boxes each item.
type mergeQueue []mergeItem

func (q mergeQueue) less(i, j int) bool {
	a, b := &q[i], &q[j]
	if a.t != b.t {
		return a.t < b.t
	}
	if a.src != b.src {
		return a.src < b.src
	}
	return a.seq < b.seq
}

func (q *mergeQueue) push(it mergeItem) {
	*q = append(*q, it)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *mergeQueue) pop() mergeItem {
	h := *q
	it := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, least := 2*i+1, 2*i+2, i
		if l < n && h.less(l, least) {
			least = l
		}
		if r < n && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return it
}
