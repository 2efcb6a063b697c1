package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/svgplot"
)

// Each arm's color, the same in every figure.
var armColors = map[string]string{
	idNone:     "#d62728",
	idStatic:   "#ff7f0e",
	idHAProxy:  "#2ca02c",
	idAdaptive: "#1f77b4",
}

const refColor = "#888888"

// The figures' file names, in o.svgDir.
const (
	svgGoodput = "capacity-goodput.svg"
	svgLatency = "capacity-latency.svg"
	svgHalving = "capacity-halving.svg"
)

// ran returns the arms that ran, in the report's order.
func (b *bench) ran() []*arm {
	var v []*arm
	for _, a := range b.arms {
		if a.unavailable == "" {
			v = append(v, a)
		}
	}
	return v
}

// possible is the most goodput there can be at offered r/s: the offered
// rate up to the backend's capacity.
func (b *bench) possible(offered float64) float64 { return min(offered, b.o.capacity()) }

func (b *bench) unloadedP99() float64 {
	p, _ := quantile(b.unloaded.admitted, 0.99)
	return p
}

func (b *bench) plots() error {
	o := b.o
	if err := os.MkdirAll(o.svgDir, 0o755); err != nil {
		return err
	}
	xmax := o.loads[len(o.loads)-1]
	ideal := svgplot.Series{Name: "the most possible: min(offered, capacity)", Color: refColor}
	for _, f := range slices.Concat([]float64{0}, o.loads) {
		ideal.X = append(ideal.X, f)
		ideal.Y = append(ideal.Y, b.possible(f*o.capacity()))
	}
	if !slices.Contains(o.loads, 1) && 1 < xmax {
		ideal.X = append(ideal.X, 1)
		ideal.Y = append(ideal.Y, o.capacity())
		slices.Sort(ideal.X)
		for i, x := range ideal.X {
			ideal.Y[i] = b.possible(x * o.capacity())
		}
	}
	goodput := svgplot.Panel{Title: "goodput (2xx within the timeout), r/s", YMax: niceAbove(o.capacity() * 1.5)}
	p99 := svgplot.Panel{Title: "admitted (2xx) p99, ms", YMax: niceAbove(ms(o.timeout))}
	p99zoom := svgplot.Panel{Title: fmt.Sprintf("admitted p99, ms, up to 4× the unloaded p99 (%.0f ms; clipped)", b.unloadedP99()),
		YMax: niceAbove(4 * b.unloadedP99())}
	shedP99 := svgplot.Panel{Title: "shed (429, 503) p99, ms", Series: []svgplot.Series{
		{Name: "the goal: 5 ms", Color: refColor, X: []float64{0, xmax}, Y: []float64{5, 5}}}}
	unloaded := svgplot.Series{Name: "2× the unloaded p99", Color: refColor, X: []float64{0, xmax}, Y: []float64{2 * b.unloadedP99(), 2 * b.unloadedP99()}}
	p99zoom.Series = append(p99zoom.Series, unloaded)
	for _, a := range b.ran() {
		g := svgplot.Series{Name: a.name, Color: armColors[a.id]}
		l, s := g, g
		for _, f := range o.loads {
			m := a.points[f]
			g.X, g.Y = append(g.X, f), append(g.Y, m.goodput)
			if v, ok := quantile(m.admitted, 0.99); ok {
				l.X, l.Y = append(l.X, f), append(l.Y, v)
			}
			if v, ok := quantile(m.shed, 0.99); ok {
				s.X, s.Y = append(s.X, f), append(s.Y, v)
			}
		}
		goodput.Series = append(goodput.Series, g)
		p99.Series = append(p99.Series, l)
		p99zoom.Series = append(p99zoom.Series, l)
		shedP99.Series = append(shedP99.Series, s)
	}
	// Last in the list: drawn first, beneath the arms that follow it.
	goodput.Series = append(goodput.Series, ideal)
	title := fmt.Sprintf("against offered load (backend %d workers × %v = %.0f r/s; timeout %v)", o.workers, o.service, o.capacity(), o.timeout)
	xlabel := "offered load, × the backend's capacity"
	charts := map[string]svgplot.Chart{
		svgGoodput: {Title: "Goodput " + title, XLabel: xlabel, YLabel: "r/s", XMax: xmax,
			Panels: []svgplot.Panel{goodput}, PanelHeight: 260, Width: 900},
		svgLatency: {Title: "Latency " + title, XLabel: xlabel, YLabel: "ms", XMax: xmax,
			Panels: []svgplot.Panel{p99, p99zoom, shedP99}, PanelHeight: 170, Width: 900},
	}
	if o.halving > 0 {
		charts[svgHalving] = b.halvingChart()
	}
	for name, c := range charts {
		if err := os.WriteFile(filepath.Join(o.svgDir, name), c.SVG(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) halvingChart() svgplot.Chart {
	o := b.o
	end := o.halving.Seconds()
	at := o.halveAt().Seconds()
	workers := svgplot.Series{Name: "the backend's workers", Color: refColor, Step: true,
		X: []float64{0, at, end}, Y: []float64{float64(o.workers), float64(o.workers / 2), float64(o.workers / 2)}}
	limit := svgplot.Panel{Title: "limitproxy adaptive: learned limit (every 100 ms)", Series: []svgplot.Series{workers}}
	goodput := svgplot.Panel{Title: "goodput (2xx within the timeout) per second they end in, r/s", YMax: niceAbove(o.capacity() * 1.5)}
	p99 := svgplot.Panel{Title: "admitted p99 per second of intended send time, ms", YMax: niceAbove(ms(o.timeout))}
	adaptive := false
	for _, a := range b.ran() {
		h := a.halving
		if h == nil {
			continue
		}
		if a.id == idAdaptive {
			adaptive = true
			l := svgplot.Series{Name: "learned limit", Color: armColors[a.id]}
			f := svgplot.Series{Name: "in flight to the backend", Color: "#9467bd"}
			for _, s := range h.samples {
				if s.ok {
					l.X, l.Y = append(l.X, s.t.Seconds()), append(l.Y, s.limit)
				}
				if !math.IsNaN(s.inFlight) {
					f.X, f.Y = append(f.X, s.t.Seconds()), append(f.Y, s.inFlight)
				}
			}
			limit.Series = append(limit.Series, l, f)
		}
		g := svgplot.Series{Name: a.name, Color: armColors[a.id]}
		l := g
		for i, p := range h.seconds {
			x := float64(i) + 0.5
			g.X, g.Y = append(g.X, x), append(g.Y, p.goodput)
			if v, ok := quantile(p.admitted, 0.99); ok {
				l.X, l.Y = append(l.X, x), append(l.Y, v)
			}
		}
		goodput.Series = append(goodput.Series, g)
		p99.Series = append(p99.Series, l)
	}
	if !adaptive {
		limit.Title = "the backend's workers (limitproxy adaptive: not measured, the arm was unavailable)"
	}
	return svgplot.Chart{
		Title: fmt.Sprintf("The backend's capacity halves at %v (%d → %d workers × %v), offered %.0f r/s throughout",
			o.halveAt(), o.workers, o.workers/2, o.service, halvingLoad*o.capacity()),
		XLabel: "seconds from the start of the run", YLabel: "", XMax: end, Panels: []svgplot.Panel{limit, goodput, p99}, PanelHeight: 150, Width: 900,
	}
}

// niceAbove rounds v up to 1, 2 or 5 times a power of ten.
func niceAbove(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// fmtMs formats the p-quantile of sorted latencies in ms; "–" for none.
func fmtMs(sorted []time.Duration, p float64) string {
	v, ok := quantile(sorted, p)
	switch {
	case !ok:
		return "–"
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func (b *bench) report(out io.Writer, took time.Duration) {
	o := b.o
	ran := b.ran()
	unloaded := b.unloadedP99()
	fmt.Fprintf(out, "The backend is bench/capacity itself (-serve), a Go HTTP server on 127.0.0.1: %d workers, each request holding one for %v\n", o.workers, o.service)
	fmt.Fprintf(out, "(slept, so its capacity does not depend on the machine's CPU), the others waiting for one in arrival order without bound,\n")
	fmt.Fprintf(out, "so latency grows past capacity as in a thread-pool application server: capacity %d / %v = %.0f r/s. A request whose client\n", o.workers, o.service, o.capacity())
	fmt.Fprintf(out, "has gone while it waits takes no worker (Go cancels its context); one at a worker keeps it for the whole %v.\n", o.service)
	fmt.Fprintf(out, "The load is open loop: GET at a fixed, evenly spaced rate whatever the answers, over keep-alive connections from a pool that\n")
	fmt.Fprintf(out, "grows when none is idle (bench/openloop's generator), each request's latency counted from its *intended* send time (no\n")
	fmt.Fprintf(out, "coordinated omission). A request unanswered %v after that instant is given up (its connection closed) and counts as *timed out*;\n", o.timeout)
	fmt.Fprintf(out, "*goodput* is the 2xx answers within the timeout that end in the measured window, per second; *shed* the 429 and 503 answers.\n")
	fmt.Fprintf(out, "Each arm at each offered load: a warm-up of %v, then %v measured (latencies, sheds and timeouts: of the requests whose intended\n", o.warm, o.dur)
	fmt.Fprintf(out, "instants fall in it), the loads in increasing order, the arms\n")
	fmt.Fprintf(out, "in an order rotated from load to load; the proxies stay up throughout (limitproxy's learned limit carries over from one run\n")
	fmt.Fprintf(out, "to the next), and the backend is idle before each run. The whole took %v.\n", took.Round(time.Second))
	fmt.Fprintln(out)
	fmt.Fprintln(out, "The arms, each a process of its own in front of the same backend:")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "- **no limit**: limitproxy, access log off, one token-bucket policy keyed by client IP that never rejects.")
	rate := int(math.Round(o.capacity()))
	fmt.Fprintf(out, "- **static limit**: limitproxy with one token bucket for everyone (`key = []`) at the backend's nominal capacity, `rate = \"%d/s\"`,\n", rate)
	fmt.Fprintf(out, "  `burst = %d`: the static rate guess, answered 429 past it.\n", max(1, rate/10))
	fmt.Fprintf(out, "- **HAProxy maxconn**: %s, one thread, `server s1 … maxconn %d` and `timeout queue %v`, `option abortonclose`,\n", haproxyVersion(o.haproxy), o.haMaxconn, o.haQueue)
	fmt.Fprintf(out, "  keep-alive to the backend (`http-reuse always`), logs off; past the queue timeout it answers 503.\n")
	if o.haMaxconn == tunedMaxconn && o.haQueue == tunedQueue && o.workers == 8 && o.service == 50*time.Millisecond {
		fmt.Fprintf(out, "  Tuned by hand (`capacity -arms haproxy -haproxy-maxconn N -haproxy-queue T` at 1×–10×, 4 s each): maxconn 8, 9, 10 and 12\n")
		fmt.Fprintf(out, "  with queue timeouts of 25, 50 and 100 ms, then 8 with 10 ms. Goodput was the same everywhere within noise (154–159 r/s)\n")
		fmt.Fprintf(out, "  except at 10 ms, 1–2%% lower (a request waiting 10 ms may be shed just before a worker frees); admitted p99 grew with both:\n")
		fmt.Fprintf(out, "  each connection past the backend's 8 workers queues inside the backend (p99 +6 to +50 ms), and the queue timeout adds\n")
		fmt.Fprintf(out, "  itself (p99 ≈ 50 ms + T). So maxconn = the workers, and the shortest queue timeout that kept the goodput: %d and %v.\n", o.haMaxconn, o.haQueue)
	} else {
		fmt.Fprintf(out, "  (Not the values tuned by hand for 8 workers × 50 ms, maxconn %d and %v.)\n", tunedMaxconn, tunedQueue)
	}
	fmt.Fprintf(out, "- **limitproxy adaptive**: limitproxy with `[upstream.concurrency] adaptive = true` and nothing else (its defaults), and the\n")
	fmt.Fprintf(out, "  same never-rejecting policy as *no limit*; its learned limit is read from `limitproxy_upstream_concurrency_limit` on its\n")
	fmt.Fprintf(out, "  admin listener every 100 ms.\n")
	fmt.Fprintln(out)
	for _, a := range b.arms {
		if a.unavailable != "" {
			fmt.Fprintf(out, "**%s: unavailable, not measured.** %s\n\n", a.name, a.unavailable)
		}
	}
	fmt.Fprintf(out, "The backend alone at half its capacity (%.0f r/s), the *unloaded* latency: p50 %s ms, p99 **%.1f ms** (%d requests, %d not answered 2xx).\n\n",
		0.5*o.capacity(), fmtMs(b.unloaded.admitted, 0.5), unloaded, b.unloaded.requests, b.unloaded.requests-b.unloaded.good)

	fmt.Fprintf(out, "### Offered load from %g× to %g× capacity\n\n", o.loads[0], o.loads[len(o.loads)-1])
	fmt.Fprintln(out, "*of possible*: goodput over the most there can be, min(offered, capacity). Latencies from the intended send time, in ms;")
	fmt.Fprintln(out, "*from write*: the sheds' from the instant the generator wrote the request, its own lag left out; *lag p99*: that lag.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| offered | arm | goodput r/s | of possible | admitted p50 | admitted p99 | shed | shed p50 | shed p99 | shed p99 from write | lag p99 | timed out | errors | learned limit, median (min–max) |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	late, requests, peak, poolFull := 0, 0, 0, 0
	for _, f := range o.loads {
		for _, a := range ran {
			m := a.points[f]
			late += m.late
			requests += m.requests
			peak = max(peak, m.peakConns)
			poolFull += m.poolFull
			fmt.Fprintf(out, "| %g× (%.0f r/s) | %s | %.1f | %.0f%% | %s | %s | %d | %s | %s | %s | %s | %d | %d | %s |\n",
				f, m.offered, a.name, m.goodput, 100*m.goodput/b.possible(m.offered), fmtMs(m.admitted, 0.5), fmtMs(m.admitted, 0.99),
				len(m.shed), fmtMs(m.shed, 0.5), fmtMs(m.shed, 0.99), fmtMs(m.shedSent, 0.99), fmtMs(m.lag, 0.99), m.timeouts, m.errors, medianSpread(m.limit))
		}
	}
	fmt.Fprintln(out)
	var lateBy []string
	for _, a := range ran {
		l, n := 0, 0
		for _, m := range a.points {
			l, n = l+m.late, n+m.requests
		}
		lateBy = append(lateBy, fmt.Sprintf("%s %.1f%%", a.name, 100*float64(l)/float64(max(n, 1))))
	}
	fmt.Fprintf(out, "The generator wrote %d of the %d measured requests more than %v after their intended instants, which their latency\n",
		late, requests, lateAfter)
	fmt.Fprintf(out, "counts (%s); at most %d connections were open at once, and %d requests waited for one,\n", strings.Join(lateBy, ", "), peak, poolFull)
	fmt.Fprintln(out, "the pool being full.")
	fmt.Fprintln(out, "Goodput counts the answers that end in the window, some sent during the warm-up: where requests time out (no limit past")
	fmt.Fprintln(out, "capacity, whose backend queue never reaches a steady state), what goodput there is may come from before the window.")
	for _, a := range ran {
		if a.id != idAdaptive {
			continue
		}
		var parts []string
		for _, f := range o.loads {
			var rs []string
			for reason, v := range a.points[f].shedBy {
				if v > 0 {
					rs = append(rs, fmt.Sprintf("%s %.0f", reason, v))
				}
			}
			slices.Sort(rs)
			if len(rs) > 0 {
				parts = append(parts, fmt.Sprintf("%g×: %s", f, strings.Join(rs, ", ")))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(out, "limitproxy adaptive's sheds by reason (`limitproxy_upstream_shed_total`, warm-up included): %s.\n", strings.Join(parts, "; "))
		}
	}
	best := 0.0
	for _, f := range o.loads {
		for _, a := range ran {
			if f >= 1 {
				best = max(best, a.points[f].goodput)
			}
		}
	}
	if best > 0 {
		fmt.Fprintf(out, "The most goodput any arm reached at 1× or more: %.1f r/s, %.1f%% of the nominal %.0f (a sleep of %v lasts a little longer, and a\n", best, 100*best/o.capacity(), o.capacity(), o.service)
		fmt.Fprintln(out, "worker idles between one request and the next).")
		if best < 0.99*o.capacity() {
			fmt.Fprintf(out, "The static limit admits the nominal %.0f r/s, about %.0f r/s more than that ceiling: the backend's queue grows by as much every second\n", o.capacity(), o.capacity()-best)
			fmt.Fprintln(out, "of its runs, and its admitted latency with it.")
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "![Goodput against offered load](%s%s)\n\n", o.svgRef, svgGoodput)
	fmt.Fprintf(out, "![Admitted and shed p99 against offered load](%s%s)\n\n", o.svgRef, svgLatency)

	if o.halving > 0 {
		b.reportHalving(out, ran)
	}
	b.reportGoals(out, ran)
}

func (b *bench) reportHalving(out io.Writer, ran []*arm) {
	o := b.o
	fmt.Fprintf(out, "### The backend's capacity halves mid-run\n\n")
	fmt.Fprintf(out, "Each arm for %v at %.0f r/s (%d× the first capacity); at %v the backend's workers go from %d to %d (capacity %.0f r/s).\n",
		o.halving, halvingLoad*o.capacity(), halvingLoad, o.halveAt(), o.workers, o.workers/2, o.capacity()/2)
	fmt.Fprintf(out, "*Before*: requests sent from 2 s to the halving; *after*: the last %v. *Settled after*: the time from the halving to the first\n", o.tail())
	fmt.Fprintf(out, "sample of the learned limit from which every later sample stays within ±%.0f%% of their median over the last %v (samples every 100 ms).\n\n", 100*settleBand, o.tail())
	fmt.Fprintln(out, "| arm | goodput r/s before | after | of possible after | admitted p99 ms before | after | shed after | timed out after | learned limit before | after | settled after |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, a := range ran {
		h := a.halving
		lb, la, settle := "–", "–", "–"
		if a.id == idAdaptive {
			var before []float64
			for _, s := range h.samples {
				if s.ok && s.t >= 2*time.Second && s.t < h.halvedAt {
					before = append(before, s.limit)
				}
			}
			lb = medianSpread(before)
			if len(before) > 0 {
				la = fmt.Sprintf("%.0f", h.final)
			}
			switch {
			case len(before) == 0:
				settle = "no samples"
			case h.settled:
				settle = fmt.Sprintf("%.1f s", h.settle.Seconds())
			default:
				settle = "not settled"
			}
		}
		fmt.Fprintf(out, "| %s | %.1f | %.1f | %.0f%% | %s | %s | %d | %d | %s | %s | %s |\n", a.name, h.before.goodput, h.after.goodput,
			100*h.after.goodput/min(h.after.offered, b.o.capacity()/2), fmtMs(h.before.admitted, 0.99), fmtMs(h.after.admitted, 0.99),
			len(h.after.shed), h.after.timeouts, lb, la, settle)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "![Learned limit and goodput when the capacity halves](%s%s)\n\n", o.svgRef, svgHalving)
}

// verdict is one arm's figure for one goal.
type verdict struct {
	value    string
	met      bool
	measured bool
}

// goals returns the goals, each with a function giving an
// arm's figure.
func (b *bench) goals() []struct {
	goal, target string
	eval         func(a *arm) verdict
} {
	o := b.o
	unloaded := b.unloadedP99()
	var ha *arm
	for _, a := range b.ran() {
		if a.id == idHAProxy {
			ha = a
		}
	}
	type g = struct {
		goal, target string
		eval         func(a *arm) verdict
	}
	return []g{
		{"Goodput ≥ 90% of capacity at every offered load", "≥ 90% of min(offered, capacity) at each load", func(a *arm) verdict {
			worst, at := math.Inf(1), 0.0
			for _, f := range o.loads {
				m := a.points[f]
				if r := m.goodput / b.possible(m.offered); r < worst {
					worst, at = r, f
				}
			}
			return verdict{fmt.Sprintf("%.0f%% (lowest, at %g×)", 100*worst, at), worst >= 0.9, true}
		}},
		{"Admitted p99 ≤ 2× the unloaded p99", fmt.Sprintf("≤ %.0f ms at each load (2 × %.1f ms)", 2*unloaded, unloaded), func(a *arm) verdict {
			worst, at := 0.0, 0.0
			for _, f := range o.loads {
				v, ok := quantile(a.points[f].admitted, 0.99)
				if !ok {
					return verdict{fmt.Sprintf("no 2xx at %g×", f), false, true}
				}
				if v > worst {
					worst, at = v, f
				}
			}
			return verdict{fmt.Sprintf("%.0f ms, %.2f× (highest, at %g×)", worst, worst/unloaded, at), worst <= 2*unloaded, true}
		}},
		{"Sheds answered within 5 ms", "shed p99 ≤ 5 ms at each load", func(a *arm) verdict {
			worst, at, any := 0.0, 0.0, false
			var all []time.Duration
			for _, f := range o.loads {
				if v, ok := quantile(a.points[f].shed, 0.99); ok {
					any = true
					all = append(all, a.points[f].shed...)
					if v > worst {
						worst, at = v, f
					}
				}
			}
			if !any {
				return verdict{"no sheds", true, true}
			}
			slices.Sort(all)
			return verdict{fmt.Sprintf("p99 %.1f ms (highest, at %g×; max %s ms)", worst, at, fmtMs(all, 1)), worst <= 5, true}
		}},
		{"After capacity halves, the limit settles within 10 s", "settled ≤ 10 s after the halving", func(a *arm) verdict {
			h := a.halving
			switch {
			case o.halving == 0 || h == nil:
				return verdict{value: "not measured"}
			case a.id != idAdaptive:
				return verdict{value: "– (no learned limit)"}
			case len(h.samples) == 0 || h.final == 0 && !h.settled:
				return verdict{value: "no samples of the limit"}
			case !h.settled:
				return verdict{"not settled", false, true}
			}
			return verdict{fmt.Sprintf("%.1f s (to %.0f)", h.settle.Seconds(), h.final), h.settle <= 10*time.Second, true}
		}},
		{"Within 5% of hand-tuned HAProxy's goodput, with no tuning", "≥ 95% of HAProxy's goodput at each load", func(a *arm) verdict {
			if ha == nil {
				return verdict{value: "not measured (no HAProxy arm)"}
			}
			if a == ha {
				return verdict{value: "–"}
			}
			worst, at := math.Inf(1), 0.0
			for _, f := range o.loads {
				if h := ha.points[f].goodput; h > 0 {
					if r := a.points[f].goodput / h; r < worst {
						worst, at = r, f
					}
				}
			}
			if math.IsInf(worst, 1) {
				return verdict{value: "HAProxy had no goodput"}
			}
			return verdict{fmt.Sprintf("%.0f%% (lowest, at %g×)", 100*worst, at), worst >= 0.95, true}
		}},
	}
}

func (b *bench) reportGoals(out io.Writer, ran []*arm) {
	fmt.Fprintln(out, "### The issue's goals")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Measured above, for limitproxy adaptive (the other arms' figures for comparison; the goals are limitproxy adaptive's). \"Capacity\"")
	fmt.Fprintln(out, "at an offered load below it is the offered rate: goodput is compared with min(offered, capacity).")
	fmt.Fprintln(out)
	var adaptive *arm
	var others []*arm
	for _, a := range ran {
		if a.id == idAdaptive {
			adaptive = a
		} else {
			others = append(others, a)
		}
	}
	head := "| goal | target | limitproxy adaptive | met |"
	sep := "|---|---|---|---|"
	for _, a := range others {
		head += " " + a.name + " |"
		sep += "---|"
	}
	fmt.Fprintln(out, head)
	fmt.Fprintln(out, sep)
	for _, g := range b.goals() {
		value, met := "not measured (the arm was unavailable)", "not measured"
		if adaptive != nil {
			v := g.eval(adaptive)
			value, met = v.value, "not measured"
			if v.measured {
				met = map[bool]string{true: "met", false: "**not met**"}[v.met]
			}
		}
		row := fmt.Sprintf("| %s | %s | %s | %s |", g.goal, g.target, value, met)
		for _, a := range others {
			row += " " + g.eval(a).value + " |"
		}
		fmt.Fprintln(out, row)
	}
	fmt.Fprintln(out)
}
