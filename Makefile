# The README's two commands, and the benchmark harness.
.PHONY: test build install release bench bench-limiter bench-proxy bench-profile bench-redis bench-accuracy bench-versus bench-openloop bench-capacity bench-ops bench-rls bench-scaling bench-identity bench-idle mutants

# Every check and test, as CI runs it (installs what it needs).
test:
	scripts/test.sh

# The binary, static, as the release and the container build it: ./limitproxy.
build:
	scripts/build-static.sh limitproxy

# Installs what deploy/limitproxy.service runs (as root): the binary as
# $(PREFIX)/bin/limitproxy, the unit as /etc/systemd/system/limitproxy.service,
# and, unless one is there, the README's starter configuration as
# /etc/limitproxy/config.toml (edit its upstream). DESTDIR stages it elsewhere.
PREFIX ?= /usr/local
install: build
	install -D -m 0755 limitproxy $(DESTDIR)$(PREFIX)/bin/limitproxy
	install -D -m 0644 deploy/limitproxy.service $(DESTDIR)/etc/systemd/system/limitproxy.service
	sed -i 's|/usr/local/bin/limitproxy|$(PREFIX)/bin/limitproxy|g' $(DESTDIR)/etc/systemd/system/limitproxy.service
	install -d -m 0755 $(DESTDIR)/etc/limitproxy
	[ -e $(DESTDIR)/etc/limitproxy/config.toml ] || install -m 0644 deploy/config.toml $(DESTDIR)/etc/limitproxy/config.toml

# Release archives for linux and darwin, amd64 and arm64, in dist/:
#   make release VERSION=v0.2.0
release:
	scripts/release.sh $(VERSION)

# Regenerates all of BENCHMARKS.md and docs/*.svg (about 55 minutes;
# installs wrk, nginx, redis-server and haproxy when missing and root).
bench:
	bench/all.sh

# Regenerates the limiter section of BENCHMARKS.md (about 4 minutes).
bench-limiter:
	bench/limiter.sh 5

# Regenerates the proxy section of BENCHMARKS.md with wrk and nginx (about 4 minutes).
bench-proxy:
	bench/proxy.sh 5 5s

# Regenerates the profile section of BENCHMARKS.md with perf, wrk and nginx (about a minute).
bench-profile:
	bench/profile.sh 4s

# Regenerates the Redis section of BENCHMARKS.md (about 3 minutes).
bench-redis:
	bench/redis.sh 5

# Regenerates the accuracy section of BENCHMARKS.md (a second; deterministic).
bench-accuracy:
	bench/accuracy.sh 1

# Regenerates the versus-nginx section of BENCHMARKS.md and its figures (about 4 minutes).
bench-versus:
	bench/versus.sh 10s

# Regenerates the open-loop section of BENCHMARKS.md: latency from each request's
# intended send time and CPU per request at fixed rates, with nginx (about 2.5 minutes).
bench-openloop:
	bench/openloop.sh 5 2s

# Regenerates the capacity section of BENCHMARKS.md and docs/capacity-*.svg:
# a backend of fixed capacity past it, no limit, a static limit, HAProxy maxconn and
# limitproxy adaptive (about 8 minutes; installs haproxy when missing and root).
bench-capacity:
	bench/capacity.sh 8s 30s

# Regenerates the replay and top-offenders section of BENCHMARKS.md (about 2 minutes).
bench-ops:
	bench/ops.sh 5

# Regenerates the section of BENCHMARKS.md on Envoy's rate limit service: the
# differential against envoyproxy/ratelimit, then throughput (closed loop) and
# latency at 20,000 calls/s (open loop), limitproxy with Redis and with the memory
# store beside envoyproxy/ratelimit on the same Redis (about 1 minute once the
# reference is built; installs redis-server when missing and root).
bench-rls:
	bench/rls.sh 20000 3 20000 2s

# Regenerates the scaling section of BENCHMARKS.md: CPU per request in process
# with 1, 100 and 1000 policies, 1 and 1M keys, each algorithm (about 8 minutes).
# bench/scaling.sh 5 COMMIT also runs COMMIT's tree alternately, before and after.
bench-scaling:
	bench/scaling.sh 3

bench-identity:
	bench/identity.sh 5

# Regenerates the idle section of BENCHMARKS.md: memory per idle connection at 1k,
# 10k and 50k connections, limitproxy (plain, TLS, HTTP/2), nginx and bare net/http
# (about 25 minutes; installs nginx when missing and root; raises the descriptor
# limit where root may).
bench-idle:
	bench/idle.sh 1000,10000,50000 4

# The mutation harness over the limiter's algorithms, the leaky-bucket queue and
# the proxy's key and canonicalization (bench/mutants; hours on two shared cores,
# not part of test): make mutants ARGS="-j 2"
mutants:
	bench/mutants.sh $(ARGS)
