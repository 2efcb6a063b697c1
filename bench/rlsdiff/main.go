// Command rlsdiff is bench/rls.sh's driver: it starts envoyproxy/ratelimit
// (built at bench/internal/rlsref's pinned version) on a given Redis with
// a YAML configuration, sends the same descriptor stream, one call after
// another, to it and to every other target (limitproxy's [rls]), and
// compares their codes line by line; then it measures each target under
// load in interleaved rounds. It prints a Markdown section on stdout and
// exits 1 when a target's codes differ from the reference's.
//
//	rlsdiff -redis 127.0.0.1:6390 -config bench/rls/config.yaml \
//	    -stream bench/rls/differential.txt [-toml rls.toml -random 2000] \
//	    [-target limitproxy=127.0.0.1:8091] \
//	    [-calls 20000] [-c 16] [-rounds 3] [-rate 20000 -openfor 2s] \
//	    [-conns 4] [-refwrap 'taskset -c 1'] [-pid NAME=PID] \
//	    [-memory NAME] [-redis-target NAME] [-floor NAME=ADDRESS]
//
// Each round measures every target closed loop (-c calls in flight, as
// fast as it answers: throughput; rlsload.ClosedLoop) and then open loop
// (-rate calls a second at fixed instants: latency at that rate;
// rlsload.OpenLoop), both on -conns connections of rlsload's own
// generator, with the CPU time the generator (this process) and, given
// its PID, the server took per call in the open loop.
// -memory and -redis-target name the targets whose figures are checked
// against the targets (p99 ≤ 1 ms at 20,000/s; the reference's
// throughput). A -floor is a server that decides nothing (bench/barerls,
// bench/h2floor), measured under load beside the others but left out of
// the differential: what the machine and the gRPC stack cost before any
// decision, the floor under the memory store's p99.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/rlsload"
	"github.com/limitproxy/limitproxy/bench/internal/rlsref"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

type targets []string

func (t *targets) String() string     { return strings.Join(*t, ",") }
func (t *targets) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	var extra, pids, floors targets
	redis := flag.String("redis", "", "the redis-server `ADDRESS` the reference uses")
	config := flag.String("config", "bench/rls/config.yaml", "the reference's YAML configuration `FILE`")
	streamFile := flag.String("stream", "bench/rls/differential.txt", "the differential stream `FILE` (rlsbench's format)")
	flag.Var(&extra, "target", "another RLS server to compare and measure, as `NAME=ADDRESS` (repeatable)")
	calls := flag.Int("calls", 20000, "calls per target and round under load")
	conc := flag.Int("c", 16, "calls in flight under load")
	rounds := flag.Int("rounds", 3, "interleaved load rounds")
	refBin := flag.String("refbin", "", "a built reference service_cmd (default: build it)")
	imported := flag.String("toml", "", "limitproxy import's `FILE` of -config: -random calls are made of its descriptor patterns")
	random := flag.Int("random", 0, "calls made at random from -toml's patterns, sent after the stream's")
	rate := flag.Float64("rate", 20000, "the open-loop rate, in calls (one descriptor each) per second; 0: no open-loop runs")
	conns := flag.Int("conns", 4, "HTTP/2 connections per target under load, closed and open loop (calls spread over them in turn)")
	refWrap := flag.String("refwrap", "", "a `COMMAND` the reference is started under, with its path as the last argument (as 'taskset -c 1')")
	flag.Var(&floors, "floor", "a server that decides nothing, measured under load only (not in the differential), as `NAME=ADDRESS` (repeatable)")
	flag.Var(&pids, "pid", "a -target's process, as `NAME=PID`, whose CPU time per call is shown (repeatable)")
	redisPid := flag.Int("redis-pid", 0, "the redis-server's `PID`: its CPU time is the Redis targets' and the reference's, not other work's")
	openFor := flag.Duration("openfor", 2*time.Second, "each open-loop run's length")
	memName := flag.String("memory", "", "the `NAME` of the -target that is limitproxy with the memory store: its open-loop p99 is checked against 1 ms")
	redisName := flag.String("redis-target", "", "the `NAME` of the -target that is limitproxy with Redis: its throughput is compared with the reference's")
	flag.Parse()
	o := loadOptions{conns: max(*conns, 1), calls: *calls, conc: *conc, rounds: *rounds, rate: *rate, openFor: *openFor,
		memory: *memName, redis: *redisName, refWrap: strings.Fields(*refWrap), pids: map[string]int{}, redisPid: *redisPid}
	for _, p := range pids {
		name, pid, ok := strings.Cut(p, "=")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil {
			fmt.Fprintf(os.Stderr, "rlsdiff: -pid %q: want NAME=PID\n", p)
			os.Exit(2)
		}
		o.pids[name] = n
	}
	if err := mainErr(*redis, *config, *streamFile, extra, floors, o, *refBin, *imported, *random); err != nil {
		fmt.Fprintln(os.Stderr, "rlsdiff:", err)
		os.Exit(1)
	}
}

type target struct {
	name, addr string
	pid        int  // 0: unknown
	floor      bool // decides nothing: measured, not compared
	client     rlsv3.RateLimitServiceClient
	open       []*rlsload.Conn // -conns of them, for the load rounds
	loads      []rlsload.Result
	opens      []openRun
}

// openRun is one open-loop run with the CPU time per call of the
// generator and of the server (0: unknown), and the cores that other
// work on the machine kept busy meanwhile (its busy time less the
// generator's, the server's and Redis's, over the run).
type openRun struct {
	rlsload.OpenResult
	genCPU, serverCPU time.Duration
	others            float64
}

// loadOptions are the measurements' flags.
type loadOptions struct {
	calls, conc, rounds int
	conns               int // connections per target under load
	refWrap             []string
	pids                map[string]int // target name: its process
	redisPid            int
	rate                float64
	openFor             time.Duration
	memory, redis       string // target names
}

func mainErr(redis, config, streamFile string, extra, floors []string, lo loadOptions, refBin, imported string, random int) error {
	calls, conc, rounds := lo.calls, lo.conc, lo.rounds
	if redis == "" {
		return fmt.Errorf("-redis is required")
	}
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "rlsdiff")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if refBin == "" {
		fmt.Fprintf(os.Stderr, "building %s@%s\n", rlsref.Module, rlsref.Version)
		if refBin, err = rlsref.Build(ctx, tmp); err != nil {
			return err
		}
	}
	yaml, err := os.ReadFile(config)
	if err != nil {
		return err
	}
	ref, err := rlsref.Start(rlsref.Options{Bin: refBin, Dir: tmp, RedisAddr: redis, Configs: map[string][]byte{filepath.Base(config): yaml}, Wrap: lo.refWrap})
	if err != nil {
		return err
	}
	defer ref.Stop()
	all := []*target{{name: "envoyproxy/ratelimit", addr: ref.Addr, pid: ref.Pid()}}
	for _, e := range extra {
		name, addr, ok := strings.Cut(e, "=")
		if !ok {
			return fmt.Errorf("-target %q: want NAME=ADDRESS", e)
		}
		all = append(all, &target{name: name, addr: addr, pid: lo.pids[name]})
	}
	compared := len(all)
	for _, e := range floors {
		name, addr, ok := strings.Cut(e, "=")
		if !ok {
			return fmt.Errorf("-floor %q: want NAME=ADDRESS", e)
		}
		all = append(all, &target{name: name, addr: addr, pid: lo.pids[name], floor: true})
	}
	for _, t := range all {
		conn, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		t.client = rlsv3.NewRateLimitServiceClient(conn)
		for range lo.conns {
			conn, err := rlsload.Dial(t.addr)
			if err != nil {
				return err
			}
			defer conn.Close()
			t.open = append(t.open, conn)
		}
	}

	stream, err := rlsload.ReadStream(streamFile)
	if err != nil {
		return err
	}
	given := len(stream)
	if random > 0 {
		var f struct {
			Policy []struct {
				Match struct {
					RLSDomain  string   `toml:"rls_domain"`
					Descriptor []string `toml:"descriptor"`
				}
			}
		}
		if _, err := toml.DecodeFile(imported, &f); err != nil {
			return fmt.Errorf("-toml: %w", err)
		}
		patterns := map[string][][]string{}
		for _, p := range f.Policy {
			patterns[p.Match.RLSDomain] = append(patterns[p.Match.RLSDomain], p.Match.Descriptor)
		}
		stream = append(stream, rlsload.RandomCalls(patterns, random, 28)...)
	}
	day := time.Now().Unix() / 86400
	seqs := make([][]string, compared)
	for i, t := range all[:compared] {
		r := rlsload.Run(ctx, t.client, stream, rlsload.Options{Calls: len(stream), Concurrency: 1, Timeout: 5 * time.Second})
		seqs[i] = r.Sequence
	}
	if time.Now().Unix()/86400 != day {
		return fmt.Errorf("the differential spanned midnight UTC (a new day window): run it again")
	}
	var differ []string
	for i := 1; i < compared; i++ {
		for j := range seqs[0] {
			if seqs[i][j] != seqs[0][j] {
				differ = append(differ, fmt.Sprintf("%s, call %d (%s): %q, the reference %q", all[i].name, j+1, describe(stream[j]), seqs[i][j], seqs[0][j]))
			}
		}
	}

	// Load: 5000 clients under a generous limit (OK), and 1000 users
	// called 5 times each per pass under 3 a day (OVER_LIMIT from the
	// fourth), interleaved rounds.
	var load strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&load, "bench client=c%d\nbench user=u%d\n", i, i%1000)
	}
	loadStream, _ := rlsload.ParseStream(strings.NewReader(load.String()))
	framed, err := rlsload.FrameStream(loadStream)
	if err != nil {
		return err
	}
	for round := range rounds {
		for _, t := range all {
			r := rlsload.ClosedLoop(ctx, t.open, framed, calls, conc, 5*time.Second)
			fmt.Fprintf(os.Stderr, "round %d: %s %s\n", round+1, t.name, r.Summary(t.addr))
			if r.Errors > 0 {
				return fmt.Errorf("%s: %d calls failed under load, the first: %s", t.name, r.Errors, r.FirstError)
			}
			t.loads = append(t.loads, r)
		}
		if lo.rate <= 0 {
			continue
		}
		for _, t := range all {
			busy0, _, _ := proc.MachineCPU()
			red0, _ := cpuTime(lo.redisPid)
			gen0, _ := proc.CPUTime(os.Getpid())
			srv0, _ := cpuTime(t.pid)
			r := openRun{OpenResult: rlsload.OpenLoop(ctx, t.open, framed, rlsload.OpenOptions{Rate: lo.rate, Dur: lo.openFor, Timeout: 5 * time.Second})}
			gen1, _ := proc.CPUTime(os.Getpid())
			srv1, _ := cpuTime(t.pid)
			red1, _ := cpuTime(lo.redisPid)
			busy1, _, _ := proc.MachineCPU()
			if r.Elapsed > 0 {
				r.others = max(float64((busy1-busy0)-(gen1-gen0)-(srv1-srv0)-(red1-red0))/float64(r.Elapsed), 0)
			}
			if r.Calls > 0 {
				r.genCPU = (gen1 - gen0) / time.Duration(r.Calls)
				if t.pid > 0 {
					r.serverCPU = (srv1 - srv0) / time.Duration(r.Calls)
				}
			}
			fmt.Fprintf(os.Stderr, "round %d: %s open loop at %.0f/s: calls=%d errors=%d elapsed=%s decisions_per_sec=%.0f p50=%s p90=%s p99=%s max=%s late_p99=%s cpu_per_call generator=%s server=%s other_work_cores=%.2f\n",
				round+1, t.name, lo.rate, r.Calls, r.Errors, r.Elapsed.Round(time.Millisecond), r.DecisionsPerSec, r.P50, r.P90, r.P99, r.Max, r.Late, r.genCPU, r.serverCPU, r.others)
			t.opens = append(t.opens, r)
		}
	}

	fmt.Printf("Differential: the %d calls of `%s`", given, streamFile)
	if random > 0 {
		fmt.Printf(" and %d made at random from the imported policies' descriptors", random)
	}
	overs := 0
	for _, c := range seqs[0] {
		if strings.HasPrefix(c, "OVER_LIMIT") {
			overs++
		}
	}
	fmt.Printf(", one after another, to each server (each on its own counters in one Redis; the reference answered OVER_LIMIT to %d): ", overs)
	if len(differ) == 0 {
		fmt.Printf("the codes of %s are the reference's, call for call.\n\n", names(all[1:compared]))
	} else {
		fmt.Printf("**%d calls differ**:\n\n", len(differ))
		for _, d := range differ {
			fmt.Printf("- %s\n", d)
		}
		fmt.Println()
	}
	fmt.Printf("Closed loop (throughput): %d calls per server and round (one descriptor each, %d in flight over %d HTTP/2 connections, each sent when one is answered,\n", calls, conc, lo.conns)
	fmt.Printf("by the same generator as the open loop's: bench/internal/rlsload), %d interleaved rounds; latency from each call's sending; medians with min–max.\n\n", rounds)
	fmt.Println("| server | decisions/s | p50 | p99 |")
	fmt.Println("|---|---|---|---|")
	for _, t := range all {
		var dps, p50, p99 []float64
		for _, r := range t.loads {
			dps = append(dps, r.DecisionsPerSec)
			p50 = append(p50, float64(r.P50.Microseconds()))
			p99 = append(p99, float64(r.P99.Microseconds()))
		}
		fmt.Printf("| %s | %s | %s µs | %s µs |\n", t.name, span(dps), span(p50), span(p99))
	}
	if lo.rate > 0 {
		fmt.Printf("\nOpen loop: %.0f calls per second (one descriptor each) for %s per server and round, in the same rounds: each call written at its instant whatever\n", lo.rate, lo.openFor)
		fmt.Printf("the answers, on %d HTTP/2 connections in turn, by a dispatcher that sleeps in the kernel until the next instant; the calls are framed once before the\n", lo.conns)
		fmt.Printf("runs, and a reader per connection times the answers from each call's intended instant (no coordinated omission), reading only their codes, with no\n")
		fmt.Printf("goroutine per call (bench/internal/rlsload). Decisions/s over the time to the last answer (below the rate: the server fell behind); \"late\" is the\n")
		fmt.Printf("99th percentile of a call's write behind its instant (the generator's own delay, part of the latency); CPU per call from the processes' CPU\n")
		fmt.Printf("clocks over the run, the generator's (the whole harness process) beside the server's; \"other work\" is how many of the machine's cores\n")
		fmt.Printf("other processes kept busy during the run (the machine's busy time less the generator's, the server's and Redis's): what the servers competed\n")
		fmt.Printf("with for their core; medians with min–max.\n\n")
		fmt.Println("| server | decisions/s answered | p50 | p90 | p99 | calls failed | late (p99) | generator CPU per call | server CPU per call | other work (cores) |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
		for _, t := range all {
			var dps, p50, p90, p99, errs, late, gen, srv, others []float64
			for _, r := range t.opens {
				dps = append(dps, r.DecisionsPerSec)
				p50 = append(p50, float64(r.P50.Microseconds()))
				p90 = append(p90, float64(r.P90.Microseconds()))
				p99 = append(p99, float64(r.P99.Microseconds()))
				errs = append(errs, float64(r.Errors))
				late = append(late, float64(r.Late.Microseconds()))
				gen = append(gen, float64(r.genCPU.Nanoseconds())/1000)
				srv = append(srv, float64(r.serverCPU.Nanoseconds())/1000)
				others = append(others, r.others)
			}
			server := "—"
			if t.pid > 0 {
				server = spanFrac(srv) + " µs"
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s µs | %s | %s |\n", t.name, span(dps), spanµs(p50), spanµs(p90), spanµs(p99), span(errs), spanµs(late), spanFrac(gen), server, spanFrac(others))
		}
	}
	fmt.Println()
	for _, t := range all[1:] {
		switch t.name {
		case lo.memory:
			if lo.rate <= 0 {
				break
			}
			var p99, others, late []float64
			for _, r := range t.opens {
				p99 = append(p99, float64(r.P99.Microseconds()))
				others = append(others, r.others)
				late = append(late, float64(r.Late.Microseconds()))
			}
			slices.Sort(p99)
			met := "**not met**"
			if stats.Median(p99) <= 1000 {
				met = "met"
			}
			fmt.Printf("- Target p99 ≤ 1 ms at 20,000 decisions/s with the memory store: %s, p99 %s at %.0f/s (median of the rounds, min–max), with other work\n",
				met, spanµs(p99), lo.rate)
			fmt.Printf("  keeping %s of the machine's cores busy meanwhile (median, min–max)", spanFrac(others))
			if slices.Sort(late); stats.Median(late) > 1000 {
				// The generator's own delays alone exceed the target.
				fmt.Printf("; the generator itself wrote 1%% of the calls %s or more after their instants, on a core of its own, so these runs could not tell\n", spanµs(late))
				fmt.Printf("  whether the server meets 1 ms: the machine's other work set the p99")
			}
			fmt.Printf(".\n")
			if t.pid > 0 && all[0].pid > 0 {
				// What the p99 rests on: the share of its core the server
				// keeps busy at this rate, beside the reference's.
				own, ref := serverCPU(t.opens), serverCPU(all[0].opens)
				fmt.Printf("- CPU per call at %.0f calls/s (the server's CPU clock over the open-loop runs, median, min–max): %s %s µs, %s %s µs;\n",
					lo.rate, t.name, spanFrac(own), all[0].name, spanFrac(ref))
				fmt.Printf("  at %.0f calls/s, C µs a call keeps C×%.1f%% of a core busy: %.0f%% of the core %s runs on, %.0f%% for %s.\n",
					lo.rate, lo.rate/1e4, stats.Median(sorted(own))*lo.rate/1e4, t.name, stats.Median(sorted(ref))*lo.rate/1e4, all[0].name)
			}
			for _, f := range all {
				if !f.floor || len(f.opens) == 0 {
					continue
				}
				// The same load on a server that decides nothing: what the
				// p99 can be on this machine before any decision.
				var fp99 []float64
				for _, r := range f.opens {
					fp99 = append(fp99, float64(r.P99.Microseconds()))
				}
				fmt.Printf("- The floor under it, a server that decides nothing, in the same rounds: %s, p99 %s", f.name, spanµs(fp99))
				if f.pid > 0 {
					fmt.Printf(", %s µs of CPU per call", spanFrac(serverCPU(f.opens)))
				}
				fmt.Printf(".\n")
			}
		case lo.redis:
			var ratio []float64
			for i, r := range t.loads {
				ratio = append(ratio, r.DecisionsPerSec/all[0].loads[i].DecisionsPerSec)
			}
			slices.Sort(ratio)
			met := "**not met**"
			if stats.Median(ratio) >= 1 {
				met = "met"
			}
			fmt.Printf("- Target at least envoyproxy/ratelimit's throughput with Redis: %s, %s's decisions/s are %.2f× the reference's (median of the rounds' ratios; %.2f–%.2f×).\n",
				met, t.name, stats.Median(ratio), ratio[0], ratio[len(ratio)-1])
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("%d calls differ from the reference", len(differ))
	}
	return nil
}

// describe is a call as a stream line.
func describe(req *rlsv3.RateLimitRequest) string {
	parts := []string{req.Domain}
	for _, d := range req.Descriptors {
		var es []string
		for _, e := range d.Entries {
			es = append(es, e.Key+"="+e.Value)
		}
		parts = append(parts, strings.Join(es, ","))
	}
	return strings.Join(parts, " ")
}

func names(ts []*target) string {
	if len(ts) == 0 {
		return "no other target (none given)"
	}
	var n []string
	for _, t := range ts {
		n = append(n, t.name)
	}
	return strings.Join(n, ", ")
}

// serverCPU is the server's CPU per call of each open-loop run, in µs.
func serverCPU(runs []openRun) []float64 {
	var v []float64
	for _, r := range runs {
		v = append(v, float64(r.serverCPU.Nanoseconds())/1000)
	}
	return v
}

// sorted is a sorted copy of v.
func sorted(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}

// cpuTime is proc.CPUTime of pid; 0 for pid 0 (unknown).
func cpuTime(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, nil
	}
	return proc.CPUTime(pid)
}

// spanFrac is span with one decimal.
func spanFrac(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%.1f (%.1f–%.1f)", stats.Median(s), s[0], s[len(s)-1])
}

// span is "median (min–max)".
func span(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%.0f (%.0f–%.0f)", stats.Median(s), s[0], s[len(s)-1])
}

// spanµs is span of microseconds, in ms when the median is 10 ms or more.
func spanµs(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	m, lo, hi := stats.Median(s), s[0], s[len(s)-1]
	switch {
	case lo >= 10000:
		return fmt.Sprintf("%.0f (%.0f–%.0f) ms", m/1000, lo/1000, hi/1000)
	case hi < 10000:
		return span(v) + " µs"
	}
	// From µs to ms: each in its unit.
	return fmt.Sprintf("%s (%s–%s)", µsOrMs(m), µsOrMs(lo), µsOrMs(hi))
}

// µsOrMs is v µs, in ms from 10 ms.
func µsOrMs(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.0f ms", v/1000)
	}
	return fmt.Sprintf("%.0f µs", v)
}
