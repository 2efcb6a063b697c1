#!/usr/bin/env bash
# `make bench`: regenerates all of BENCHMARKS.md and docs/*.svg in one
# run, on 127.0.0.1 only, in about 55 minutes on a 2-core machine.
# Installs wrk, nginx, redis-server and haproxy from Debian's packages when
# missing and root. The new BENCHMARKS.md replaces the old one only if
# every part succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
need wrk wrk
need nginx nginx
need redis-server redis-server
start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export BENCHMARKS_FILE="$tmp/sections.md"
: >"$BENCHMARKS_FILE"
bench/limiter.sh 3
bench/proxy.sh 5 4s
bench/profile.sh 4s
bench/openloop.sh 5 2s
bench/redis.sh 5
bench/accuracy.sh 1
bench/versus.sh 10s
bench/capacity.sh 8s 30s
bench/ops.sh 5
bench/rls.sh 20000 3 20000 2s
bench/scaling.sh 3
bench/identity.sh 5
bench/idle.sh 1000,10000,50000 4
took=$(( ($(date +%s) - start + 59) / 60 ))
{
  echo "# Benchmarks"
  echo
  echo "Every figure here is written by a script in bench/; the command that produced each section is given in it. All of it,"
  echo "with the figures under docs/, comes from one command: \`make bench\` (bench/all.sh), which took $took minutes for this file."
  echo
  echo "<!-- about:begin -->"
  echo "## The machine, and how to read these figures"
  echo
  echo "- Machine: $(machine); $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) of memory; Linux $(uname -r)."
  echo "  nginx $( (nginx -v 2>&1 || /usr/sbin/nginx -v 2>&1) | cut -d/ -f2), $(redis-server --version | cut -d' ' -f3 | cut -d= -f2 | sed 's/^/Redis /'), $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)."
  echo "- It is a shared virtual machine: other tenants' load comes and goes, and rounds of the same measurement differ by 10–30%."
  echo "  So every measurement is repeated in interleaved rounds (each round measures every target once), medians are given with"
  echo "  min–max, and comparisons are ratios taken within each round, which a busy moment affects alike."
  echo "- Everything runs on this one machine over loopback: no network latency, and the load generator competes with what it"
  echo "  measures. On two cores the generator (and, for the closed-loop proxy table, the upstream) gets CPU 0 and the proxy under"
  echo "  test CPU 1 (taskset), the same way for every target, so a proxy runs on a core of its own: limitproxy with GOMAXPROCS 1,"
  echo "  nginx with one worker. CPU µs per request (from /proc) is the fairer"
  echo "  figure for a proxy's cost; requests/s also depends on the generator and the upstream sharing the machine."
  echo "- wrk is a closed loop (64 connections, each waiting for its answer): latency percentiles under it understate what an"
  echo "  open-loop client would see at the same rate, and \"over the limit\" means the generator offers as much as the 429 path answers."
  echo "  The open-loop section (bench/openloop) and the admission and bursty-trace runs (bench/versus) use open-loop generators instead."
  echo "- The accuracy-of-approximation and boundary figures of limitproxy are deterministic (injected time); everything measured over"
  echo "  HTTP is timed at the upstream, after forwarding, so it includes forwarding jitter."
  echo "<!-- about:end -->"
  echo
  cat "$BENCHMARKS_FILE"
} >"$tmp/BENCHMARKS.md"
mv "$tmp/BENCHMARKS.md" BENCHMARKS.md
headline
echo "BENCHMARKS.md regenerated in $took minutes" >&2
