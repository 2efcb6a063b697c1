// Package limiterbench holds the memory store's decision benchmarks next to
// golang.org/x/time/rate, run by bench/limiter.sh. It has no code of its
// own: the benchmarks are its tests.
package limiterbench
