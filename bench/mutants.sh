#!/usr/bin/env bash
# The mutation harness (bench/mutants): mutates the limiter's algorithms,
# arithmetic, charges and bans, the memory store's leaky-bucket queue and
# the proxy's key and path/host canonicalization one change at a time, runs
# the mutated file's package tests against each (-count=1, no -race, a
# timeout per mutant) and reports killed, survived, timed out, not viable
# and equivalent per file, with the survivors. Not part of `make test`:
# about 1,700 mutants, two hours or more on two shared cores.
#
#   bench/mutants.sh [flags]   e.g. -j 2, -files proxy/key.go, -list, -show FILE:LINE:N,
#                              -results out.tsv, -rerun out.tsv, -ops all
set -euo pipefail
cd "$(dirname "$0")"
exec go run ./mutants -root .. "$@"
