#!/usr/bin/env bash
# Compares the RLS server's CPU per call of this tree and of BASE (a
# commit, built from a temporary worktree): each serves `limitproxy
# import bench/rls/config.yaml` on the memory store (as bench/rls.sh's
# memory row), both started once, pinned to CPU 1; bench/rlsbench's open
# loop (rls.sh's load: clients under a generous limit, users past theirs,
# on 4 connections) on CPU 0 drives one then the other at RATE for
# DURATION, ROUNDS times, A B A B. A line per run (the server's and the
# generator's CPU per call from their CPU clocks, latency), then each
# side's median and range and the per-round ratio this/BASE. Not written
# to BENCHMARKS.md: for a change's commit message. A server that has
# fallen behind reads and writes many calls at once and so spends less
# CPU per call than one that keeps up: compare runs alike (p50 tells
# which), or a rate both keep up with.
#
#   bench/rlscpu.sh BASE [ROUNDS] [RATE] [DURATION]    (default 8 20000 2s)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
base=${1:?usage: bench/rlscpu.sh BASE [ROUNDS] [RATE] [DURATION]}
rounds=${2:-8}
rate=${3:-20000}
duration=${4:-2s}
base_tree "$base"
(cd "$wt" && go build -o "$bin/limitproxy-base" ./cmd/limitproxy)
go build -o "$bin/limitproxy" ./cmd/limitproxy
(cd bench && go build -o "$bin/rlsbench" ./rlsbench)
pin=() gen=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c 1) gen=(taskset -c 0)
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for i in $(seq 5000); do printf 'bench client=c%d\nbench user=u%d\n' "$i" $((i % 1000)); done >"$bin/load.txt"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; git worktree remove --force "$wt" 2>/dev/null || true; rm -rf "$bin"' EXIT
names=("this" "$short") bins=("$bin/limitproxy" "$bin/limitproxy-base") addrs=() spids=()
for i in 0 1; do
  port=$(free_port)
  "${bins[$i]}" import -listen "127.0.0.1:$port" -o "$bin/$i.toml" bench/rls/config.yaml
  printf '\n[server]\nlisten = "127.0.0.1:%s"\n\n[admin]\nlisten = ""\n\n[log]\naccess = false\n\n[store]\nbackend = "memory"\n' "$(free_port)" >>"$bin/$i.toml"
  "${pin[@]}" "${bins[$i]}" -config "$bin/$i.toml" >"$bin/$i.log" 2>&1 &
  pids+=($!) spids+=($!)
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  addrs+=("127.0.0.1:$port")
done
echo "bench/rlscpu.sh $short $rounds $rate $duration at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes') — $(machine); load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
for r in $(seq "$rounds"); do
  for i in 0 1; do
    out=$("${gen[@]}" "$bin/rlsbench" -addr "${addrs[$i]}" -stream "$bin/load.txt" -rate "$rate" -for "$duration" -conns 4 -pid "${spids[$i]}" 2>&1 || true)
    echo "$r ${names[$i]} $(echo "$out" | tr ' ' '\n' | grep -E '^(decisions_per_sec|p50|p99|late_p99|cpu_per_call_generator|cpu_per_call_server)=' | tr '\n' ' ')"
  done
done | tee "$bin/runs.txt"
python3 - "$bin/runs.txt" "${names[@]}" <<'PY'
import re, statistics, sys
runs, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
def us(v):
    m = re.match(r'([0-9.]+)(µs|ms|s)$', v)
    return float(m.group(1)) * {'µs': 1, 'ms': 1e3, 's': 1e6}[m.group(2)] if m else None
by = {}
for line in open(runs):
    f = line.split()
    if len(f) < 3:
        continue
    kv = dict(x.split('=', 1) for x in f[2:] if '=' in x)
    by.setdefault(f[0], {})[f[1]] = kv
def span(xs, unit='µs'):
    d = {'µs': 1, 'ms': 1e3}[unit]
    return f"{statistics.median(xs)/d:.1f} ({min(xs)/d:.1f}–{max(xs)/d:.1f}) {unit}" if xs else "—"
for n in (a, b):
    for k, unit in (('cpu_per_call_server', 'µs'), ('cpu_per_call_generator', 'µs'), ('p50', 'ms'), ('p99', 'ms')):
        xs = [us(r[n][k]) for r in by.values() if n in r and k in r[n] and us(r[n][k]) is not None]
        print(f"{n} {k}: {span(xs, unit)} over {len(xs)} runs")
rs = [us(r[a]['cpu_per_call_server']) / us(r[b]['cpu_per_call_server']) for r in by.values()
      if a in r and b in r and 'cpu_per_call_server' in r[a] and 'cpu_per_call_server' in r[b]]
if rs:
    print(f"server CPU per call, {a}/{b} per round: {statistics.median(rs):.3f} ({min(rs):.3f}–{max(rs):.3f}) over {len(rs)} rounds")
PY
