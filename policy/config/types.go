package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// The value types of the configuration. Each decodes itself from TOML
// (UnmarshalTOML) and, instead of failing the whole decode, records what was
// wrong with it, so that one pass over a file finds every bad value; Parse
// then reports them all, each at its key's file:line:col. Set reports
// whether the key was present at all.

// scalar is a configuration value of a plain TOML type: string, int64 or
// bool. The zero value is an absent key.
type scalar[T string | int64 | bool] struct {
	V   T
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (v *scalar[T]) UnmarshalTOML(data any) error {
	v.Set = true
	orig := data
	data, v.err = expandData(data)
	if v.err != nil {
		return nil
	}
	x, ok := data.(T)
	if !ok {
		v.err = fmt.Errorf("must be %s, not %s", kindOf(v.V), describe(orig))
		if s, isString := orig.(string); isString && s != data {
			// A placeholder put where a number or boolean goes: the
			// quotes made it a string, which is expanded, and stays one.
			v.err = fmt.Errorf("%w ({$NAME} placeholders are replaced in string values only; %s cannot take one)", v.err, kindOf(v.V))
		}
		return nil
	}
	v.V = x
	return nil
}

// Or returns the value, or def when the key is absent.
func (v scalar[T]) Or(def T) T {
	if !v.Set {
		return def
	}
	return v.V
}

func kindOf(x any) string {
	switch x.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case bool:
		return "true or false"
	}
	return fmt.Sprintf("%T", x)
}

// describe names a decoded TOML value for an error message.
func describe(data any) string {
	switch d := data.(type) {
	case string:
		return fmt.Sprintf("the string %q", d)
	case int64:
		return fmt.Sprintf("the integer %d", d)
	case float64:
		return fmt.Sprintf("the number %v", d)
	case bool:
		return fmt.Sprintf("%v", d)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", data)
}

// stringList is an array of strings. The zero value is an absent key.
type stringList struct {
	V   []string
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (s *stringList) UnmarshalTOML(data any) error {
	s.Set = true
	data, s.err = expandData(data)
	if s.err != nil {
		return nil
	}
	arr, ok := data.([]any)
	if !ok {
		s.err = fmt.Errorf("must be an array of strings, not %s", describe(data))
		return nil
	}
	s.V = make([]string, 0, len(arr))
	for i, e := range arr {
		str, ok := e.(string)
		if !ok {
			s.err = fmt.Errorf("element %d must be a string, not %s", i, describe(e))
			return nil
		}
		s.V = append(s.V, str)
	}
	return nil
}

// durationValue is a length of time written as a string with a unit ("250ms",
// "1m", "1h30m"). A bare integer is an error: TOML would have it read as
// nanoseconds, which is never what was meant.
type durationValue struct {
	D   time.Duration
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (d *durationValue) UnmarshalTOML(data any) error {
	d.Set = true
	data, d.err = expandData(data)
	if d.err != nil {
		return nil
	}
	switch v := data.(type) {
	case string:
		x, err := time.ParseDuration(v)
		switch {
		case err != nil:
			d.err = fmt.Errorf("%q is not a duration (write e.g. \"250ms\", \"30s\", \"1m\")", v)
		case x < 0:
			d.err = fmt.Errorf("%q is negative", v)
		default:
			d.D = x
		}
	case int64:
		d.err = fmt.Errorf("bare integer %d: durations are strings with a unit, e.g. \"%ds\"", v, v)
	default:
		d.err = fmt.Errorf("must be a duration string such as \"30s\", not %s", describe(data))
	}
	return nil
}

// Or returns the duration, or def when the key is absent.
func (d durationValue) Or(def time.Duration) time.Duration {
	if !d.Set {
		return def
	}
	return d.D
}

// windowValue is a limit's window: a length of time written as a
// duration ("1m", "24h"), or a calendar unit ("day", "week", "month",
// "year": the periods of the limit's time_zone), in Calendar with D 0.
type windowValue struct {
	D        time.Duration
	Calendar limiter.Calendar
	Set      bool
	err      error
}

// calendarUnits are the names window takes for calendar periods.
var calendarUnits = []string{"day", "week", "month", "year"}

// UnmarshalTOML implements toml.Unmarshaler.
func (w *windowValue) UnmarshalTOML(data any) error {
	w.Set = true
	data, w.err = expandData(data)
	if w.err != nil {
		return nil
	}
	s, ok := data.(string)
	if !ok {
		var d durationValue
		d.UnmarshalTOML(data)
		w.err = d.err
		return nil
	}
	if c, ok := limiter.ParseCalendar(s); ok {
		w.Calendar = c
		return nil
	}
	x, err := time.ParseDuration(s)
	switch {
	case err == nil && x < 0:
		w.err = fmt.Errorf("%q is negative", s)
	case err == nil:
		w.D = x
	default:
		w.err = fmt.Errorf("%q is not a duration or a calendar unit (write e.g. \"30s\", \"1h\", or \"day\", \"week\", \"month\", \"year\")", s)
		if near := nearest(strings.ToLower(strings.TrimSpace(s)), calendarUnits, 2); near != "" {
			w.err = fmt.Errorf("%q is not a duration or a calendar unit (did you mean %q?)", s, near)
		}
	}
	return nil
}

// zoneValue is a time zone written as its IANA name ("Europe/Berlin",
// "UTC"), loaded from the zone database (the system's, else the one built
// into limitproxy). "Local", whose rules depend on the machine, is
// refused.
type zoneValue struct {
	Loc *time.Location
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (z *zoneValue) UnmarshalTOML(data any) error {
	z.Set = true
	data, z.err = expandData(data)
	if z.err != nil {
		return nil
	}
	s, ok := data.(string)
	switch {
	case !ok:
		z.err = fmt.Errorf("must be a time zone's name such as \"Europe/Berlin\", not %s", describe(data))
		return nil
	case s == "":
		z.err = errors.New("is empty: write a time zone's IANA name such as \"Europe/Berlin\", or leave it out for UTC")
		return nil
	case s == "Local":
		z.err = errors.New("\"Local\" is the machine's own zone, which may differ between instances: write its IANA name such as \"Europe/Berlin\"")
		return nil
	}
	z.Loc, z.err = loadZone(s)
	if z.err != nil {
		z.Loc = nil
		z.err = fmt.Errorf("unknown time zone %q: write an IANA name such as \"Europe/Berlin\" or \"America/New_York\"", s)
		switch near := nearestZone(s); {
		case near == s:
			// A zone of Go's database that this process cannot read: no
			// system database has it, and none is built in.
			z.err = fmt.Errorf("time zone %q is in no zone database this process reads (the system's lacks it, and none is built into the program)", s)
		case near != "":
			z.err = fmt.Errorf("unknown time zone %q (did you mean %q?)", s, near)
		}
	}
	return nil
}

// zones are the zones loaded, by name: each is read once per process, so
// that every reload's limits of a zone share one *time.Location (a reload
// compares configurations with reflect.DeepEqual, and a Location read
// anew is another value) and decide by the same rules; a change of the
// system's zone database applies at the next start. Names that fail are
// not kept, so the map holds at most the database's zones.
var zones sync.Map // string → *time.Location

func loadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	got, _ := zones.LoadOrStore(name, loc)
	return got.(*time.Location), nil
}

// rateValue is a rate written "N/s", "N/m", "N/h", "N/d" or "N/<duration>"
// ("30/5m" is 30 per 5 minutes), kept exactly as written.
type rateValue struct {
	limiter.Rate
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (r *rateValue) UnmarshalTOML(data any) error {
	r.Set = true
	data, r.err = expandData(data)
	if r.err != nil {
		return nil
	}
	s, ok := data.(string)
	if !ok {
		r.err = fmt.Errorf("must be a string such as \"10/s\", not %s", describe(data))
		return nil
	}
	r.Rate, r.err = parseRate(s)
	return nil
}

// errBadRate is wrapped by parseRate's errors.
var errBadRate = errors.New("bad rate")

// parseRate parses "N/s", "N/m", "N/h", "N/d" or "N/<duration>".
func parseRate(s string) (limiter.Rate, error) {
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return limiter.Rate{}, fmt.Errorf("%w %q: write N/s, N/m, N/h, N/d or N/<duration> such as \"30/5m\"", errBadRate, s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 {
		return limiter.Rate{}, fmt.Errorf("%w %q: the count before / must be a whole number above zero", errBadRate, s)
	}
	var d time.Duration
	switch per = strings.TrimSpace(per); per {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	case "d":
		d = 24 * time.Hour
	default:
		d, err = time.ParseDuration(per)
		if err != nil || d <= 0 {
			return limiter.Rate{}, fmt.Errorf("%w %q: the period after / must be s, m, h, d or a positive duration such as 5m", errBadRate, s)
		}
	}
	r := limiter.Rate{N: n, Per: d}
	if n > limiter.MaxCount {
		return limiter.Rate{}, fmt.Errorf("%w %q: at most %d per period", errBadRate, s, limiter.MaxCount)
	}
	return r, nil
}

// cidrs is a list of networks in CIDR notation; a bare address means just
// that address (a /32 or /128).
type cidrs struct {
	V   []netip.Prefix
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (c *cidrs) UnmarshalTOML(data any) error {
	var s stringList
	s.UnmarshalTOML(data)
	c.Set, c.err = true, s.err
	for i, v := range s.V {
		p, err := parsePrefix(v)
		if err != nil {
			c.err = fmt.Errorf("element %d: %v", i, err)
			return nil
		}
		c.V = append(c.V, p)
	}
	return nil
}

// parsePrefix parses "10.0.0.0/8", "2001:db8::/32" or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as \"10.0.0.0/8\"", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// metadataValue is an RLS policy's metadata: a table whose values are
// strings, numbers, booleans, arrays and tables (what a protobuf Struct
// holds; no dates).
type metadataValue struct {
	V   map[string]any
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (m *metadataValue) UnmarshalTOML(data any) error {
	m.Set = true
	t, ok := data.(map[string]any)
	if !ok {
		m.err = fmt.Errorf("must be a table, not %s", describe(data))
		return nil
	}
	if err := structValue(t); err != nil {
		m.err = err
		return nil
	}
	m.V = t
	return nil
}

// structValue checks that v is what a protobuf Struct's value can be.
func structValue(v any) error {
	switch v := v.(type) {
	case string, int64, float64, bool:
		return nil
	case map[string]any:
		for k, e := range v {
			if err := structValue(e); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	case []any:
		for i, e := range v {
			if err := structValue(e); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	case []map[string]any:
		for i, e := range v {
			if err := structValue(e); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	}
	return fmt.Errorf("%s cannot be sent in dynamic metadata (strings, numbers, booleans, arrays and tables)", describe(v))
}

// replayValue is [log] access_replay: true or false, or "whole" (true)
// or "hashed".
type replayValue struct {
	V   AccessReplay
	Set bool
	err error
}

// replayValues are access_replay's string values.
var replayValues = []AccessReplay{ReplayWhole, ReplayHashed}

// UnmarshalTOML implements toml.Unmarshaler.
func (v *replayValue) UnmarshalTOML(data any) error {
	v.Set = true
	data, v.err = expandData(data)
	if v.err != nil {
		return nil
	}
	switch d := data.(type) {
	case bool:
		if d {
			v.V = ReplayWhole
		}
	case string:
		if v.V = AccessReplay(d); !slices.Contains(replayValues, v.V) {
			v.err = fmt.Errorf("%q is not one of true, false, %q, %q", d, ReplayWhole, ReplayHashed)
		}
	default:
		v.err = fmt.Errorf("must be true, false, %q or %q, not %s", ReplayWhole, ReplayHashed, describe(data))
	}
	return nil
}

// valueError returns the error recorded by a decoded value, if any.
func valueError(v any) error {
	switch v := v.(type) {
	case *replayValue:
		return v.err
	case *scalar[string]:
		return v.err
	case *scalar[int64]:
		return v.err
	case *scalar[bool]:
		return v.err
	case *stringList:
		return v.err
	case *durationValue:
		return v.err
	case *windowValue:
		return v.err
	case *zoneValue:
		return v.err
	case *rateValue:
		return v.err
	case *cidrs:
		return v.err
	case *metadataValue:
		return v.err
	case *share:
		return v.err
	case *statuses:
		return v.err
	}
	return nil
}

// share is a fraction of a whole: a TOML float from 0 to below 1, 0, or
// a string such as "20%".
type share struct {
	V   float64
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (s *share) UnmarshalTOML(data any) error {
	s.Set = true
	data, s.err = expandData(data)
	if s.err != nil {
		return nil
	}
	switch v := data.(type) {
	case float64:
		s.V = v
	case int64:
		s.V = float64(v)
	case string:
		pct, ok := strings.CutSuffix(strings.TrimSpace(v), "%")
		f, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if !ok || err != nil {
			s.err = fmt.Errorf("%q: write a fraction such as 0.2 or a percentage such as \"20%%\"", v)
			return nil
		}
		s.V = f / 100
	default:
		s.err = fmt.Errorf("must be a fraction such as 0.2 or a string such as \"20%%\", not %s", describe(data))
		return nil
	}
	if math.IsNaN(s.V) || s.V < 0 || s.V >= 1 {
		s.err = fmt.Errorf("%v: must be from 0 to below 1 (a share of the limit)", data)
	}
	return nil
}

// statuses is a list of response statuses: codes (401) and classes
// ("4xx"), each as a range [Lo, Hi].
type statuses struct {
	V   []StatusRange
	Set bool
	err error
}

// UnmarshalTOML implements toml.Unmarshaler.
func (s *statuses) UnmarshalTOML(data any) error {
	s.Set = true
	data, s.err = expandData(data)
	if s.err != nil {
		return nil
	}
	arr, ok := data.([]any)
	if !ok {
		s.err = fmt.Errorf("must be an array of statuses such as [401, 403] or [\"5xx\"], not %s", describe(data))
		return nil
	}
	for i, e := range arr {
		switch v := e.(type) {
		case int64:
			if v < 100 || v > 599 {
				s.err = fmt.Errorf("element %d: %d is not an HTTP status (100..599)", i, v)
				return nil
			}
			s.V = append(s.V, StatusRange{int(v), int(v)})
		case string:
			if len(v) != 3 || v[0] < '1' || v[0] > '5' || strings.ToLower(v[1:]) != "xx" {
				s.err = fmt.Errorf("element %d: %q: write a status (401) or a class (\"4xx\")", i, v)
				return nil
			}
			lo := int(v[0]-'0') * 100
			s.V = append(s.V, StatusRange{lo, lo + 99})
		default:
			s.err = fmt.Errorf("element %d must be a status (401) or a class (\"4xx\"), not %s", i, describe(e))
			return nil
		}
	}
	return nil
}
