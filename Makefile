# The README's two commands, and the benchmark harness.
.PHONY: test bench-limiter bench-proxy bench-redis bench-accuracy

# Every check and test, as CI runs it (installs what it needs).
test:
	scripts/test.sh

# Regenerates the limiter section of BENCHMARKS.md (about 4 minutes).
bench-limiter:
	bench/limiter.sh 5

# Regenerates the proxy section of BENCHMARKS.md with wrk (about 2 minutes).
bench-proxy:
	bench/proxy.sh 5 5s

# Regenerates the Redis section of BENCHMARKS.md (about 3 minutes).
bench-redis:
	bench/redis.sh 5

# Regenerates the accuracy section of BENCHMARKS.md (a second; deterministic).
bench-accuracy:
	bench/accuracy.sh 1
