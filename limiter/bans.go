package limiter

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// Bans is the penalty box: per policy, a client key that broke a
// limit can be banned for a while, its requests answered without reaching
// the upstream, and a key that offends again soon is banned longer. Each
// store package has an implementation beside its Store: memstore.Bans
// keeps the records in this process; redisstore.Bans keeps them on Redis,
// shared by every instance, and answers Banned from a local mirror that
// Redis pub/sub keeps current. Implementations are safe for concurrent use.
//
// A record is kept per (policy name, client key). It is created by the
// first offence, raised by each later one, and dropped when its Expires has
// passed: the ban is over and the offence forgotten. Since the store lives
// for the whole process and records are keyed by policy name, bans survive
// a reload that keeps the policy's name; the next offence applies the
// reloaded BanParams.
type Bans interface {
	// Ban records an offence of key under policy at now and bans it (see
	// BanParams for the arithmetic), atomically: of offences of one key
	// counted at once, even on several instances, the first bans and the
	// others, made while that ban runs, change nothing; escalation counts
	// bans, not offences. It returns the key's record after the offence. An error means the
	// offence may not have been recorded: invalid params, or
	// ErrStoreUnavailable for a backend that did not answer in time.
	Ban(ctx context.Context, policy, key string, p BanParams, now time.Time) (Ban, error)

	// Banned reports whether key is banned under policy at now (now is
	// before the record's Until), and returns its record if so. It is
	// called for every request, so it never waits on a network: no
	// allocation, one map lookup under a shared lock.
	Banned(policy, key string, now time.Time) (Ban, bool)

	// Lift ends key's ban under policy at once and forgets its offences:
	// its next offence is a first one again. It reports whether the store
	// held a record for key (one past its Expires that the store has not
	// dropped yet counts too).
	Lift(ctx context.Context, policy, key string) (bool, error)

	// List returns the bans in force at now (now before Until) under
	// policy, or under every policy when policy is "", longest first:
	// sorted by Until descending, then by policy and key. It returns at
	// most max of them (none when max < 1).
	List(ctx context.Context, policy string, now time.Time, max int) ([]Ban, error)
}

// Ban is the record of a client key's offences under one policy.
type Ban struct {
	Policy, Key string
	// Since is the instant of the offence that began the latest ban.
	Since time.Time
	// Until is when the ban ends: the key is banned at instants before it.
	Until time.Time
	// Level counts the bans that escalated to this one: 1 for a first
	// ban, or one after a ban remembered no longer (BanParams.Memory), up
	// by one for each ban that begins within Memory of the one before.
	// An offence during a running ban is no new ban. A lifted key starts
	// at 1 again.
	Level int64
	// Expires is when the store forgets the record: the later of Until
	// and Since + Memory.
	Expires time.Time
}

// BanParams say how long an offence bans a key. They come from a policy's
// configuration, and each Ban call may pass different ones (a reload
// changed them); a record keeps what earlier calls computed. The zero
// value is not valid: see Validate.
//
// An offence at now while the key's ban runs changes nothing. Otherwise
// it bans the key anew: its level rises by one if its previous ban began
// less than Memory before now, and is 1 otherwise; the ban lasts until
// now + Duration × Factor^(level−1), at most Max.
type BanParams struct {
	// Duration is the ban of a first offence; > 0.
	Duration time.Duration
	// Factor multiplies the ban at each level; a whole number ≥ 1, 1 for
	// no escalation. (Whole, so that both stores compute the same
	// durations exactly.)
	Factor int64
	// Max caps the ban; ≥ Duration.
	Max time.Duration
	// Memory is how long a ban, from its start, counts towards the next
	// one's level; ≥ 0, 0 for never (every ban is a first one).
	Memory time.Duration
}

// Validate reports the first field of p out of its range.
func (p BanParams) Validate() error {
	switch {
	case p.Duration <= 0:
		return fmt.Errorf("ban: duration: %v must be > 0", p.Duration)
	case p.Factor < 1:
		return fmt.Errorf("ban: factor: %d must be >= 1", p.Factor)
	case p.Max < p.Duration:
		return fmt.Errorf("ban: max: %v must be >= duration %v", p.Max, p.Duration)
	case p.Memory < 0:
		return fmt.Errorf("ban: memory: %v must be >= 0", p.Memory)
	}
	return nil
}

// DurationAt returns the ban of an offence at level (≥ 1): Duration ×
// Factor^(level−1), at most Max, without overflow. Levels below 1 count
// as 1.
func (p BanParams) DurationAt(level int64) time.Duration {
	d := int64(p.Duration)
	if p.Factor > 1 {
		// At most 63 rounds: d at least doubles each time until it
		// reaches Max.
		for i := int64(1); i < level && d < int64(p.Max); i++ {
			if d > math.MaxInt64/p.Factor {
				d = math.MaxInt64
				break
			}
			d *= p.Factor
		}
	}
	return time.Duration(min(d, int64(p.Max)))
}

// Offend returns the record after an offence of prev's key at now. prev
// is the key's record, or the zero Ban if it has none; a prev whose
// Expires is not after now counts as none. An offence while prev's ban
// is running (now before prev.Until) is one the ban already answers:
// it returns prev unchanged, so that a burst of requests rejected before
// the first ban was seen, on one instance or several, bans once, at one
// level. The memory store applies it as is; the Redis store's script does
// the same arithmetic in milliseconds. Policy and Key are prev's.
func (p BanParams) Offend(prev Ban, now time.Time) Ban {
	live := prev.Level > 0 && now.Before(prev.Expires)
	if live && now.Before(prev.Until) {
		return prev
	}
	b := Ban{Policy: prev.Policy, Key: prev.Key, Level: 1}
	// now is not before prev.Until, hence not before prev.Since: the
	// level rises if the previous ban began less than Memory ago.
	if live && now.Sub(prev.Since) < p.Memory && prev.Level < math.MaxInt64 {
		b.Level = prev.Level + 1
	}
	b.Since = now
	b.Until = addSat(now, p.DurationAt(b.Level))
	b.Expires = b.Until
	if m := addSat(now, p.Memory); m.After(b.Expires) {
		b.Expires = m
	}
	return b
}

// SortBans sorts bans as Bans.List returns them: by Until descending,
// then by policy and key.
func SortBans(bans []Ban) {
	slices.SortFunc(bans, func(x, y Ban) int {
		if c := y.Until.Compare(x.Until); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Policy, y.Policy); c != 0 {
			return c
		}
		return cmp.Compare(x.Key, y.Key)
	})
}

// addSat returns t+d for d ≥ 0, at most the largest instant a Unix
// nanosecond count holds (about the year 2262), so that a long ban never
// wraps around into the past.
func addSat(t time.Time, d time.Duration) time.Time {
	if ns := t.UnixNano(); ns > math.MaxInt64-int64(d) {
		return time.Unix(0, math.MaxInt64)
	}
	return t.Add(d)
}
