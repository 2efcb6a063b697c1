package main

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
)

func TestSummarise(t *testing.T) {
	const rate = 1000 // instants 0, 1, 2... ms
	ms := time.Millisecond
	out := []loadgen.Outcome{
		{End: 50 * ms, Status: 200}, // warm-up, left out
		{Lag: 10 * time.Microsecond, End: 1*ms + 300*time.Microsecond, Status: 200},
		{Lag: 3 * ms, End: 6 * ms, Status: 200}, // sent late: its latency counts from 2 ms
		{Lag: 0, End: 3*ms + 100*time.Microsecond, Status: 429},
		{Lag: 2 * ms, End: 0, Status: 0}, // never answered
		{Lag: 0, End: 5*ms + 200*time.Microsecond, Status: 200},
	}
	m := summarise(out, 1, rate)
	if m.requests != 5 || m.failed != 2 || m.late != 2 || len(m.lags) != 5 || m.lags[0] != 0 || m.lags[4] != 3*ms {
		t.Errorf("requests %d failed %d late %d lags %v; want 5, 2, 2, five from 0 to 3ms", m.requests, m.failed, m.late, m.lags)
	}
	want := []time.Duration{200 * time.Microsecond, 300 * time.Microsecond, 4 * ms}
	if len(m.latencies) != len(want) {
		t.Fatalf("latencies %v, want %v", m.latencies, want)
	}
	for i := range want {
		if m.latencies[i] != want[i] {
			t.Fatalf("latencies %v, want %v (sorted, from the intended instants)", m.latencies, want)
		}
	}
	// 3 answers 200, ending from 1.3 ms to 6 ms: 2 intervals in 4.7 ms.
	if want := 2 / 0.0047; math.Abs(m.achieved-want) > 1e-6 {
		t.Errorf("achieved %v r/s, want %v", m.achieved, want)
	}
}

func TestRatioAndAdded(t *testing.T) {
	if got := ratio([]float64{3, 4, 10}, []float64{2, 2, 4}); got != "2.00× (1.50×–2.50×)" {
		t.Errorf("ratio = %q", got)
	}
	if got := ratio([]float64{3, 4, 5}, []float64{2, -1, 0}); got != "1.50× (1.50×–1.50×), 1 of 3 rounds (nginx's figure ≤ 0 in the others)" {
		t.Errorf("ratio with denominators ≤ 0 = %q", got)
	}
	if got := ratio([]float64{3}, []float64{-1}); got != "– (nginx's figure ≤ 0 in every round)" {
		t.Errorf("ratio with no positive denominator = %q", got)
	}
	us := time.Microsecond
	base := []measurement{{latencies: []time.Duration{100 * us, 200 * us, 300 * us}}, {latencies: []time.Duration{100 * us}}}
	proxy := []measurement{{latencies: []time.Duration{150 * us, 260 * us, 900 * us}}, {latencies: []time.Duration{130 * us}}}
	got := added(proxy, base, 0.5)
	if len(got) != 2 || got[0] != 60 || got[1] != 30 {
		t.Errorf("added p50 per round = %v, want [60 30]", got)
	}
}

// TestLoad runs the generator against a server that is slow now and then:
// the schedule holds (a slow answer takes another connection, it does not
// delay the next request) and the slow answers' latencies count in full.
func TestLoad(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bench" || r.Header.Get("User-Agent") != "openloop" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1)%10 == 0 {
			time.Sleep(30 * time.Millisecond) // a slow answer: the service time the schedule must not wait for
		}
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	cpuCalls := 0
	l := load{addr: srv.Listener.Addr().String(), rate: 500, warm: 100 * time.Millisecond, dur: 400 * time.Millisecond, maxConns: 64,
		cpu: func() (cpuTimes, error) {
			cpuCalls++
			return cpuTimes{time.Duration(cpuCalls) * time.Millisecond, time.Duration(cpuCalls) * time.Second}, nil
		}}
	m, err := l.run()
	if err != nil {
		t.Fatal(err)
	}
	if m.requests != 200 || m.failed != 0 || len(m.latencies) != 200 {
		t.Fatalf("requests %d, failed %d, answered %d; want 200, 0, 200", m.requests, m.failed, len(m.latencies))
	}
	if cpuCalls != 2 || m.cpu != (cpuTimes{time.Millisecond, time.Second}) || m.cpuSpan < 400*time.Millisecond || m.cpuSpan > time.Second {
		t.Errorf("the CPU was read %d times (difference %v over %v); want twice, at the window's start and end (400 ms and the drain)", cpuCalls, m.cpu, m.cpuSpan)
	}
	// Never above the schedule. Below it only when the sender itself is
	// held up (a busy machine, the race detector: it read 255 r/s beside
	// a loaded CI run), which the late count below tells apart from a
	// schedule held back by slow answers; so no lower bound here.
	if m.achieved > 510 {
		t.Errorf("achieved %v r/s at an offered 500", m.achieved)
	}
	// A slow answer holds its connection for 30 ms, 15 instants at 500
	// r/s: the next requests go on other connections, on time.
	if m.peakConns < 2 || m.peakConns > 64 {
		t.Errorf("peak connections %d, want 2 or more", m.peakConns)
	}
	// Held back by them, nearly every request would be late; a busy
	// machine (or the race detector) makes a few late anyway.
	if m.late > m.requests/2 {
		t.Errorf("%d of %d requests sent late: slow answers held the schedule back", m.late, m.requests)
	}
	if slow := m.latencies[len(m.latencies)*95/100]; slow < 30*time.Millisecond {
		t.Errorf("p95 latency %v: the slow tenth of answers (30 ms) does not show", slow)
	}
}

// TestLoadPoolFull: with one connection and a server slower than the
// schedule, requests wait for it, are counted late, and their latency
// includes the wait.
func TestLoadPoolFull(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond) // a server slower than the schedule: the scenario
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	// 20 requests 1 ms apart on one connection answering in 5 ms: the
	// last is sent about 80 ms late and answered about 100 ms after the
	// first instant.
	m, err := load{addr: srv.Listener.Addr().String(), rate: 1000, dur: 20 * time.Millisecond, maxConns: 1}.run()
	if err != nil {
		t.Fatal(err)
	}
	if m.peakConns != 1 || m.failed != 0 || len(m.latencies) != 20 {
		t.Fatalf("peak connections %d, failed %d, answered %d; want 1, 0, 20", m.peakConns, m.failed, len(m.latencies))
	}
	if m.poolFull < 15 {
		t.Errorf("%d requests waited for the one connection; want most of 20", m.poolFull)
	}
	if maxLag := m.lags[len(m.lags)-1]; m.late < 15 || maxLag < 60*time.Millisecond {
		t.Errorf("late %d, max lag %v: the pool of one should hold most requests back", m.late, maxLag)
	}
	if last := m.latencies[len(m.latencies)-1]; last < 80*time.Millisecond {
		t.Errorf("largest latency %v: the wait for the connection is not counted", last)
	}
}

// TestLoadServerCloses: a server that closes the connection after every
// answer (as nginx does after keepalive_requests) costs no request.
func TestLoadServerCloses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	m, err := load{addr: srv.Listener.Addr().String(), rate: 200, dur: 200 * time.Millisecond, maxConns: 8}.run()
	if err != nil {
		t.Fatal(err)
	}
	if m.requests != 40 || m.failed != 0 {
		t.Errorf("requests %d, failed %d; want 40, 0", m.requests, m.failed)
	}
}

// TestLoadServerClosesIdle: a server that closes idle connections at
// once (between two requests) leaves dead connections in the pool, which
// are discarded; requests go on new ones.
func TestLoadServerClosesIdle(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	srv.Config.IdleTimeout = time.Millisecond
	srv.Start()
	defer srv.Close()
	// 40 requests 20 ms apart on a pool of 2: every connection is closed
	// while idle before its next request.
	m, err := load{addr: srv.Listener.Addr().String(), rate: 50, dur: 800 * time.Millisecond, maxConns: 2}.run()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d failed, at most %d connections open", m.failed, m.requests, m.peakConns)
	if m.requests != 40 || m.failed > 2 {
		t.Errorf("requests %d, failed %d; want 40, hardly any failed", m.requests, m.failed)
	}
}
