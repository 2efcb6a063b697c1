package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

// compare runs limitproxy builds or settings against each other under a
// token bucket of rate and burst (the main run's "never rejecting" row's,
// 1000000000/s and as many, or its over-limit row's, 1000/s and 100),
// interleaved: each variant is "NAME|BIN" or
// "NAME|BIN|LINE;LINE…", lines added to the configuration's [[upstream]]
// table (transport = "net/http", say), or to its [server] table for
// those that begin "server." (server.http1 = "net/http"). It reports each
// variant's medians and, within each round, its ratio to the first
// variant, then their median.
func compare(variants []string, rate string, burst int, rounds int, dur time.Duration, conns, threads int, wrkCPU, ownCPU string, out io.Writer) error {
	up, err := proc.StartOKUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	dir, err := os.MkdirTemp("", "proxybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var targets []*target
	var logs []string
	for i, v := range variants {
		parts := strings.Split(v, "|")
		if len(parts) < 2 {
			return fmt.Errorf("variant %q: want NAME|BIN[|LINE;LINE…]", v)
		}
		addr := proc.FreeAddr()
		logPath := filepath.Join(dir, strconv.Itoa(i)+".log")
		conf := proc.LimitproxyConfigAccessLog(addr, up.Addr, "draft")
		if len(parts) > 2 && parts[2] != "" {
			for line := range strings.SplitSeq(parts[2], ";") {
				if key, ok := strings.CutPrefix(line, "server."); ok {
					conf = strings.Replace(conf, "[server]\n", "[server]\n"+key+"\n", 1)
				} else {
					conf += line + "\n"
				}
			}
		}
		cmd, f, err := proc.LimitproxyCommand(parts[1], filepath.Join(dir, strconv.Itoa(i)+".toml"),
			conf+fmt.Sprintf(proc.TokenBucketPolicy, rate, burst), logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		logs = append(logs, logPath)
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		if err := proc.WaitUp(addr); err != nil {
			return err
		}
		targets = append(targets, &target{name: parts[0], url: "http://" + addr, cmd: cmd, pid: cmd.Process.Pid})
	}
	if ownCPU != "" {
		if err := exec.Command("taskset", "-a", "-p", "-c", ownCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
			return fmt.Errorf("taskset -a -p -c %s: %w", ownCPU, err)
		}
	}
	for r := range rounds {
		for i := range targets {
			t := targets[(i+r)%len(targets)]
			fmt.Fprintf(os.Stderr, "round %d/%d: %s\n", r+1, rounds, t.name)
			s, err := measure(t, dur, conns, threads, wrkCPU)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			t.rounds = append(t.rounds, s)
			for _, l := range logs {
				if err := os.Truncate(l, 0); err != nil {
					return err
				}
			}
		}
	}
	first := targets[0]
	fmt.Fprintf(out, "wrk -t%d -c%d -d%v against each variant, under a token bucket of %s, burst %d, %d interleaved rounds; medians (min–max). Ratios are taken within each round against %s, then their median.\n\n",
		threads, conns, dur, rate, burst, rounds, first.name)
	fmt.Fprintln(out, "| variant | requests/s | non-2xx | proxy CPU µs/request | req/s vs first | CPU vs first |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, t := range targets {
		var rr, cr []float64
		for i := range t.rounds {
			rr = append(rr, t.rounds[i].rps/first.rounds[i].rps)
			cr = append(cr, t.rounds[i].cpuPerReq/first.rounds[i].cpuPerReq)
		}
		fmt.Fprintf(out, "| %s | %s | %.0f%% | %s | %s | %s |\n", t.name, spread(column(t, func(s sample) float64 { return s.rps }), "%.0f"),
			100*stats.Median(column(t, func(s sample) float64 { return s.non2xx })),
			spread(column(t, func(s sample) float64 { return s.cpuPerReq }), "%.1f"), spread(rr, "%.2f×"), spread(cr, "%.2f×"))
	}
	fmt.Fprintln(out)
	return nil
}
