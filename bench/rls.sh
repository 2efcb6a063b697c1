#!/usr/bin/env bash
# Regenerates the "rls" section of BENCHMARKS.md: Envoy's rate limit
# service (gRPC) answered by the reference server, envoyproxy/ratelimit
# (built from its Go module at bench/internal/rlsref's pinned version),
# and by limitproxy's [rls], both on one local redis-server that the
# script starts: the same descriptor stream to each (bench/rls/
# differential.txt, then 2000 calls made at random from the imported
# policies), one call after another, with identical OK/OVER_LIMIT codes
# required (fixed windows),
# then decisions per second and p50/p99 latency under load in interleaved
# rounds (bench/rlsdiff, bench/rlsbench's load generator): closed loop
# (throughput) and open loop at RATE calls a second (latency), with
# limitproxy on the Redis store and, a second process, on the memory
# store. With two CPUs or more and taskset, the servers and Redis run on
# CPU 1 and the load generator on CPU 0. Two servers that decide nothing
# are measured under the same load, left out of the differential: the
# floor under the memory store's p99 on this machine (bench/barerls:
# grpc-go with [rls]'s transport options, answering OK; bench/h2floor:
# HTTP/2 framing alone, no gRPC library).
#
# limitproxy serves `limitproxy import bench/rls/config.yaml` with the
# Redis store. The script starts it when this build's configuration has
# [rls] (or the binary $LIMITPROXY, when set, does); or give the address
# of one already serving that file:
#
#   bench/rls.sh [-limitproxy ADDRESS] [CALLS] [ROUNDS] [RATE] [OPENFOR]
#       (default 20000 3 20000 2s)
#   LIMITPROXY=path/to/limitproxy bench/rls.sh [CALLS] [ROUNDS] [RATE] [OPENFOR]
#
# Installs redis-server when missing and root.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
lp_addr= lp_given=
if [ "${1:-}" = "-limitproxy" ]; then
  lp_addr=$2 lp_given=1
  shift 2
fi
calls=${1:-20000}
rounds=${2:-3}
rate=${3:-20000}
openfor=${4:-2s}
need redis-server redis-server
tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

pin=() gen=() refwrap=
placement="the load generator shares the machine's cores with the servers and Redis, no process pinned to a core"
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c 1) gen=(taskset -c 0) refwrap="taskset -c 1"
  placement="the servers being measured and Redis run on CPU 1, the load generator on CPU 0 (taskset), for every server alike (a Go server pinned so runs with GOMAXPROCS 1; the generator's open loop with 2)"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

go build -o "$tmp/limitproxy" ./cmd/limitproxy
(cd bench && go build -o "$tmp/rlsdiff" ./rlsdiff && go build -o "$tmp/barerls" ./barerls && go build -o "$tmp/h2floor" ./h2floor)
version=$(sed -n 's/^\tVersion = "\(.*\)"$/\1/p' bench/internal/rlsref/rlsref.go)
echo "building github.com/envoyproxy/ratelimit@$version" >&2
GOBIN="$tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install "github.com/envoyproxy/ratelimit/src/service_cmd@$version"

redis_port=$(free_port)
"${pin[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
pids+=($!)
redis_pid=$!
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

targets=() lp_pids=()
# conf PORT FILE [REDIS_PORT]: the import served on 127.0.0.1:PORT, with
# the Redis store at REDIS_PORT, or the memory store without it.
conf() {
  "$tmp/limitproxy" import -listen "127.0.0.1:$1" -o "$2" bench/rls/config.yaml
  printf '\n[server]\nlisten = "127.0.0.1:%s"\n\n[admin]\nlisten = ""\n\n[log]\naccess = false\n' "$(free_port)" >>"$2"
  if [ -n "${3:-}" ]; then
    printf '\n[store]\nbackend = "redis"\n\n[store.redis]\naddrs = ["127.0.0.1:%s"]\n' "$3" >>"$2"
  else
    printf '\n[store]\nbackend = "memory"\n' >>"$2"
  fi
}
# serve PORT FILE LOG: start limitproxy and wait for its [rls].
serve() {
  "${pin[@]}" "$serve" -config "$2" >"$3" 2>&1 &
  pids+=($!)
  lp_pid=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && break; sleep 0.1; done
}
lp_port=$(free_port) mem_port=$(free_port)
conf "$lp_port" "$tmp/rls.toml" "$redis_port"
if [ -z "$lp_addr" ]; then
  serve=${LIMITPROXY:-$tmp/limitproxy}
  if check=$("$serve" check -config "$tmp/rls.toml" 2>&1); then
    serve "$lp_port" "$tmp/rls.toml" "$tmp/limitproxy.log"
    lp_addr=127.0.0.1:$lp_port
    lp_pids+=(-pid "limitproxy (Redis)=$lp_pid")
    # The same policies on the memory store, a second process.
    conf "$mem_port" "$tmp/rls-memory.toml"
    serve "$mem_port" "$tmp/rls-memory.toml" "$tmp/limitproxy-memory.log"
    mem_addr=127.0.0.1:$mem_port
    lp_pids+=(-pid "limitproxy (memory)=$lp_pid")
  else
    echo "limitproxy: this build does not serve the imported configuration, so only the reference is measured:" >&2
    echo "$check" | head -3 >&2
  fi
fi
# The floors: servers that decide nothing, on CPU 1 like the others.
floors=()
for f in "grpc-go alone=barerls" "HTTP/2 framing alone=h2floor"; do
  port=$(free_port)
  "${pin[@]}" "$tmp/${f#*=}" -listen "127.0.0.1:$port" >"$tmp/${f#*=}.log" 2>&1 &
  pids+=($!)
  floors+=(-floor "${f%%=*}=127.0.0.1:$port" -pid "${f%%=*}=$!")
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
done
[ -n "$lp_addr" ] && targets=(-target "limitproxy (Redis)=$lp_addr" -redis-target "limitproxy (Redis)")
[ -n "${mem_addr:-}" ] && targets+=(-target "limitproxy (memory)=$mem_addr" -memory "limitproxy (memory)")

{
  echo "<!-- rls:begin -->"
  echo "## Envoy's rate limit service: against envoyproxy/ratelimit"
  echo
  echo "Generated by \`${LIMITPROXY:+LIMITPROXY=$LIMITPROXY }bench/rls.sh${lp_given:+ -limitproxy ADDRESS} $calls $rounds $rate $openfor\` on $(date -u +%Y-%m-%d) — $(machine), envoyproxy/ratelimit $version, $(redis-server --version | cut -d' ' -f3 | cut -d= -f2 | sed 's/^/Redis /')."
  echo "gRPC without TLS on 127.0.0.1; both servers use one redis-server started by the script; configuration bench/rls/config.yaml"
  echo "(limitproxy serves its \`limitproxy import\`, with the Redis store and, a second process, with the memory store);"
  echo "$placement. The machine is shared with other work: $(cut -d' ' -f1-3 /proc/loadavg) load average (1, 5, 15 min) when the run began."
  echo
  "${gen[@]}" "$tmp/rlsdiff" ${refwrap:+-refwrap "$refwrap"} "${lp_pids[@]}" -redis-pid "$redis_pid" -redis "127.0.0.1:$redis_port" -refbin "$tmp/service_cmd" -config bench/rls/config.yaml \
    -stream bench/rls/differential.txt -toml "$tmp/rls.toml" -random 2000 "${targets[@]}" "${floors[@]}" -calls "$calls" -rounds "$rounds" -rate "$rate" -openfor "$openfor"
  echo "<!-- rls:end -->"
} >"$tmp/section.md"
write_section rls "$tmp/section.md"
