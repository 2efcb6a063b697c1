// Package redisbench holds the Redis store's decision benchmarks next to
// go-redis/redis_rate, run by bench/redis.sh against a redis-server of
// their own. It has no code of its own: the benchmarks are its tests.
package redisbench
