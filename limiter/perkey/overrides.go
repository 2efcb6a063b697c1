package perkey

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limitproxy/limitproxy/limiter"
)

// Overrides keeps live per-key overrides: for one client key
// under one policy, limits that replace the policy's own, set, listed and
// removed through the admin API without a configuration edit (a partner's
// tier, a client throttled harder). Each store package has an
// implementation: memstore.Overrides keeps them in this process and in a
// file; redisstore.Overrides keeps them on Redis, shared by every
// instance, and answers Get from a local mirror that Redis pub/sub keeps
// current. Implementations are safe for concurrent use.
//
// An override is data, not limits: the store checks only its structure
// (Override.Validate); the configuration layer validates its LimitSpecs
// with the limiter's constructors and turns it into limits for the policy
// it names. Overrides are permanent until removed: they never expire, and
// a store never drops one to make room (Set past the store's bound is an
// error, ErrTooManyOverrides).
//
// Overrides are keyed by policy name, and the store lives for the whole
// process, so they survive a reload that keeps the policy's name; with a
// persistent store (a file, Redis) they also survive a restart. A reload
// that removes a policy leaves its overrides in place, unused: the admin
// API lists them as orphaned, and they apply again if a policy of that
// name comes back.
type Overrides interface {
	// Set stores o, replacing any override of the same (Policy, Key),
	// once o.Validate accepts it. It copies o.Limits: the caller may
	// reuse the slice. o.SetAt comes from the caller (the store never
	// reads the clock) and is kept in UTC, to the nanosecond. An error
	// means the override was not stored: ErrInvalidOverride for one
	// Validate refuses, ErrTooManyOverrides for a new key past the
	// store's bound, or a storage error (ErrStoreUnavailable for a
	// backend that did not answer in time).
	Set(ctx context.Context, o Override) error

	// Remove deletes the override of key under policy, and reports
	// whether there was one.
	Remove(ctx context.Context, policy, key string) (bool, error)

	// Get returns the override of key under policy, if any. It is called
	// for every request of a policy when overrides exist, so it never
	// waits on a network and never allocates: a local map lookup (both
	// stores here take no lock: they publish immutable maps), and a
	// single atomic load when the store holds no overrides at all. The
	// returned Limits slice is the store's: do not modify it.
	Get(policy, key string) (Override, bool)

	// List returns the overrides under policy, or under every policy when
	// policy is "", sorted by policy then key (byte order), at most max of
	// them (none when max < 1). Their Limits are copies the caller may
	// modify.
	List(ctx context.Context, policy string, max int) ([]Override, error)
}

// Override is a replacement of one policy's limits for one client key, in
// one of two forms (exactly one is set):
//
//   - Limits: the key's own limits, in the place of the policy's ("this
//     key gets 500/s");
//   - Scale: the policy's limits with every quota multiplied by Scale
//     ("this partner gets 10× the default"; 0.5 halves them), so that the
//     override follows later edits of the policy's limits.
//
// The zero value is not valid (no policy, no key, no form). An Override
// is a plain value; the JSON form (MarshalJSON) is what the stores
// persist and what the admin API can show.
type Override struct {
	// Policy is the name of the policy whose limits are replaced; 1 to
	// MaxOverridePolicy bytes of UTF-8.
	Policy string
	// Key is the client key, as the policy builds it for a request; 1 to
	// MaxOverrideKey bytes of UTF-8.
	Key string
	// Limits replace the policy's limits for Key, in the order and with
	// the meaning of the policy's [[policy.limits]]; at most
	// MaxOverrideLimits. Empty when Scale is set.
	Limits []LimitSpec
	// Scale multiplies the quotas of each of the policy's limits; > 0
	// and at most MaxOverrideScale, 0 when Limits is set. Which figures it
	// multiplies is the policy layer's rule (policy.OverrideLimiter:
	// rates, bursts and limits per window; not a leaky bucket's queue,
	// windows or costs; shared limits are left alone).
	Scale float64
	// Note is the operator's free text ("partner gold tier, ticket 123");
	// at most MaxOverrideNote bytes of UTF-8.
	Note string
	// SetAt is when the override was set, as the caller's clock said;
	// the zero time for unknown. Stores keep it in UTC.
	SetAt time.Time
}

// LimitSpec is one limit of an Override, as data that mirrors the keys of
// a [[policy.limits]] table: the configuration layer validates it against
// the algorithm's constructor (limiter.NewLimit, with a zero field its
// default). Fields the algorithm does not use are 0; the store checks
// only that Algorithm is one of the algorithms and that no field is
// negative. The zero value is not valid (no algorithm).
type LimitSpec struct {
	// Algorithm is the limit's algorithm.
	Algorithm limiter.Algorithm
	// Rate is the rate of a token or leaky bucket; the zero Rate when
	// unused.
	Rate limiter.Rate
	// Burst is a token bucket's capacity.
	Burst int64
	// Limit is a window's or a log's limit.
	Limit int64
	// Window is a fixed window's, sliding log's or sliding window's length.
	Window time.Duration
	// Slots is how many slots a sliding window counts in.
	Slots int64
	// Queue is how many requests a leaky bucket queues.
	Queue int64
	// MaxWait is the longest a leaky bucket's request waits.
	MaxWait time.Duration
	// Delay is how many queued requests a leaky bucket forwards without
	// waiting.
	Delay int64
	// Cost is how much one request takes; 0 for the default, 1.
	Cost int64
}

// Bounds of an Override, checked by Validate. They keep one override to a
// few kilobytes, so that a store's bound on their number bounds its
// memory and file.
const (
	// MaxOverrideLimits is the most LimitSpecs one override holds.
	MaxOverrideLimits = 16
	// MaxOverrideNote is the longest Note, in bytes.
	MaxOverrideNote = 256
	// MaxOverrideKey is the longest client key, in bytes.
	MaxOverrideKey = 1024
	// MaxOverridePolicy is the longest policy name, in bytes.
	MaxOverridePolicy = 256
	// MaxOverrideScale is the largest Scale.
	MaxOverrideScale = 1e6
)

// ErrInvalidOverride is wrapped by the errors of Override.Validate, which
// Overrides.Set returns for an override it refuses.
var ErrInvalidOverride = errors.New("invalid override")

// ErrTooManyOverrides is wrapped by the error Overrides.Set returns for a
// new key when the store already holds as many overrides as its bound
// allows. Overrides are operator data: a store never evicts one to make
// room, so the operator removes some or raises the bound.
var ErrTooManyOverrides = errors.New("too many overrides")

// Validate reports the first thing wrong with o's structure and bounds,
// wrapping ErrInvalidOverride: empty, overlong or non-UTF-8 Policy, Key
// or Note; not exactly one of Limits and Scale; more than
// MaxOverrideLimits limits, or one with an unknown algorithm or a
// negative field; a Scale that is not a finite number in
// (0, MaxOverrideScale]; a SetAt whose year is outside 0 to 9999 (RFC
// 3339 cannot write it). It does not check that the limits are ones the
// algorithm's constructor accepts: that is the configuration layer's
// job, which knows the policy.
func (o Override) Validate() error {
	text := func(field, s string, min, max int) error {
		switch {
		case len(s) < min:
			return invalidOverride(field, "must not be empty")
		case len(s) > max:
			return invalidOverride(field, "%d bytes, above the maximum of %d", len(s), max)
		case !utf8.ValidString(s):
			return invalidOverride(field, "not valid UTF-8")
		}
		return nil
	}
	if err := text("policy", o.Policy, 1, MaxOverridePolicy); err != nil {
		return err
	}
	if err := text("key", o.Key, 1, MaxOverrideKey); err != nil {
		return err
	}
	if err := text("note", o.Note, 0, MaxOverrideNote); err != nil {
		return err
	}
	switch {
	case len(o.Limits) > 0 && o.Scale != 0:
		return invalidOverride("", "sets both limits and scale; set one")
	case len(o.Limits) == 0 && o.Scale == 0:
		return invalidOverride("", "sets neither limits nor scale; set one")
	case len(o.Limits) > MaxOverrideLimits:
		return invalidOverride("limits", "%d limits, above the maximum of %d", len(o.Limits), MaxOverrideLimits)
	case o.Scale != 0 && !(o.Scale > 0 && o.Scale <= MaxOverrideScale): // NaN fails both
		return invalidOverride("scale", "%v is not in (0, %v]", o.Scale, float64(MaxOverrideScale))
	}
	for i, l := range o.Limits {
		if err := l.validate(); err != nil {
			return invalidOverride("limits["+strconv.Itoa(i)+"]."+err.field, "%s", err.msg)
		}
	}
	if y := o.SetAt.Year(); y < 0 || y > 9999 {
		return invalidOverride("set_at", "year %d is outside 0 to 9999", y)
	}
	return nil
}

type specError struct{ field, msg string }

// validate checks that l names an algorithm and has no negative field.
func (l LimitSpec) validate() *specError {
	if !l.Algorithm.Valid() {
		return &specError{"algorithm", l.Algorithm.String() + " is not one of the algorithms"}
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{
		{"rate", l.Rate.N}, {"rate", int64(l.Rate.Per)}, {"burst", l.Burst}, {"limit", l.Limit}, {"window", int64(l.Window)},
		{"slots", l.Slots}, {"queue", l.Queue}, {"max_wait", int64(l.MaxWait)}, {"delay", l.Delay}, {"cost", l.Cost},
	} {
		if f.v < 0 {
			return &specError{f.name, "must not be negative"}
		}
	}
	return nil
}

func invalidOverride(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return fmt.Errorf("%w: %s", ErrInvalidOverride, msg)
}

// Clone returns o with a copy of its Limits.
func (o Override) Clone() Override {
	o.Limits = slices.Clone(o.Limits)
	return o
}

// SortOverrides sorts overrides as Overrides.List returns them: by policy,
// then by key.
func SortOverrides(list []Override) {
	slices.SortFunc(list, func(x, y Override) int {
		if c := cmp.Compare(x.Policy, y.Policy); c != 0 {
			return c
		}
		return cmp.Compare(x.Key, y.Key)
	})
}

// overrideJSON and limitSpecJSON are the JSON form of an Override (see
// MarshalJSON).
type (
	overrideJSON struct {
		Policy string          `json:"policy"`
		Key    string          `json:"key"`
		Limits []limitSpecJSON `json:"limits,omitempty"`
		Scale  float64         `json:"scale,omitempty"`
		Note   string          `json:"note,omitempty"`
		SetAt  string          `json:"set_at,omitempty"`
	}
	limitSpecJSON struct {
		Algorithm string `json:"algorithm"`
		Rate      string `json:"rate,omitempty"`
		Burst     int64  `json:"burst,omitempty"`
		Limit     int64  `json:"limit,omitempty"`
		Window    string `json:"window,omitempty"`
		Slots     int64  `json:"slots,omitempty"`
		Queue     int64  `json:"queue,omitempty"`
		MaxWait   string `json:"max_wait,omitempty"`
		Delay     int64  `json:"delay,omitempty"`
		Cost      int64  `json:"cost,omitempty"`
	}
)

// MarshalJSON writes o's JSON form, one object whose keys are the
// configuration's:
//
//	{"policy":"api","key":"partner-7","scale":10,"note":"gold tier","set_at":"2030-01-01T00:00:00Z"}
//	{"policy":"api","key":"203.0.113.9","limits":[{"algorithm":"token_bucket","rate":"500/1s","burst":1000}],"set_at":"2030-01-01T00:00:00.5Z"}
//
// Rates are "N/period" and durations Go's time.Duration strings ("1m30s"),
// both exact to the nanosecond; set_at is RFC 3339 in UTC with up to nine
// fractional digits. Keys whose value is zero are left out, and <, > and &
// are not escaped. It is the form both stores persist, and one the admin
// API can show. It fails for a SetAt that RFC 3339 cannot write, which
// Validate refuses.
func (o Override) MarshalJSON() ([]byte, error) {
	w := overrideJSON{Policy: o.Policy, Key: o.Key, Scale: o.Scale, Note: o.Note}
	if !o.SetAt.IsZero() {
		b, err := o.SetAt.UTC().MarshalText()
		if err != nil {
			return nil, fmt.Errorf("override: set_at: %w", err)
		}
		w.SetAt = string(b)
	}
	for _, l := range o.Limits {
		s := limitSpecJSON{Algorithm: l.Algorithm.String(), Burst: l.Burst, Limit: l.Limit, Slots: l.Slots,
			Queue: l.Queue, Delay: l.Delay, Cost: l.Cost}
		if l.Rate != (limiter.Rate{}) {
			s.Rate = l.Rate.String()
		}
		if l.Window != 0 {
			s.Window = l.Window.String()
		}
		if l.MaxWait != 0 {
			s.MaxWait = l.MaxWait.String()
		}
		w.Limits = append(w.Limits, s)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keys and notes stay readable
	if err := enc.Encode(w); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads o's JSON form (see MarshalJSON), refusing unknown
// keys, so that a record written by a later version with a field this one
// does not know is an error rather than an override applied without it,
// and values that do not parse (an unknown algorithm, a malformed rate or
// duration). It does not call Validate.
func (o *Override) UnmarshalJSON(b []byte) error {
	var w overrideJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("override: %w", err)
	}
	if dec.More() {
		return errors.New("override: data after the object")
	}
	v := Override{Policy: w.Policy, Key: w.Key, Scale: w.Scale, Note: w.Note}
	if w.SetAt != "" {
		if err := v.SetAt.UnmarshalText([]byte(w.SetAt)); err != nil {
			return fmt.Errorf("override: set_at: %w", err)
		}
		v.SetAt = v.SetAt.UTC()
	}
	if w.Limits != nil {
		v.Limits = make([]LimitSpec, 0, len(w.Limits))
	}
	for i, s := range w.Limits {
		l := LimitSpec{Burst: s.Burst, Limit: s.Limit, Slots: s.Slots, Queue: s.Queue, Delay: s.Delay, Cost: s.Cost}
		field := func(name string, err error) error {
			return fmt.Errorf("override: limits[%d].%s: %w", i, name, err)
		}
		var err error
		if l.Algorithm, err = limiter.ParseAlgorithm(s.Algorithm); err != nil {
			return field("algorithm", err)
		}
		if s.Rate != "" {
			if l.Rate, err = parseRate(s.Rate); err != nil {
				return field("rate", err)
			}
		}
		if l.Window, err = parseDuration(s.Window); err != nil {
			return field("window", err)
		}
		if l.MaxWait, err = parseDuration(s.MaxWait); err != nil {
			return field("max_wait", err)
		}
		v.Limits = append(v.Limits, l)
	}
	*o = v
	return nil
}

// parseRate reads Rate.String's "N/period".
func parseRate(s string) (limiter.Rate, error) {
	n, per, ok := strings.Cut(s, "/")
	if !ok {
		return limiter.Rate{}, fmt.Errorf("%q is not N/period", s)
	}
	N, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return limiter.Rate{}, fmt.Errorf("%q is not N/period", s)
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return limiter.Rate{}, fmt.Errorf("%q is not N/period: %w", s, err)
	}
	return limiter.Rate{N: N, Per: d}, nil
}

// parseDuration reads time.Duration.String's form, "" for 0.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
