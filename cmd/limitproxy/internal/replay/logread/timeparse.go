package logread

import (
	"math"
	"strconv"
	"time"
)

// clock parses the timestamps of one reader. Consecutive lines of a log
// mostly share their second, so it keeps the last second it built with
// time.Date and only adds the fraction when the next line is in the same
// one. Not safe for concurrent use.
type clock struct {
	zones map[int]*time.Location // fixed zones by offset in seconds

	isoSec, isoZone string // the last ISO 8601 second and zone parsed
	isoBase         time.Time

	local     string // the last $time_local parsed
	localTime time.Time
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digits returns the decimal value of s, all digits, and whether it is.
func digits(s string) (int, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// zone returns the location of a fixed UTC offset in seconds: time.UTC for
// 0, else one FixedZone per offset, shared by every time of that offset.
func (c *clock) zone(offset int) *time.Location {
	if offset == 0 {
		return time.UTC
	}
	if l, ok := c.zones[offset]; ok {
		return l
	}
	if c.zones == nil {
		c.zones = map[int]*time.Location{}
	}
	l := time.FixedZone("", offset)
	c.zones[offset] = l
	return l
}

// offset parses a UTC offset: "Z", "±hh", "±hhmm" or "±hh:mm".
func offset(s string) (int, bool) {
	if s == "Z" || s == "z" {
		return 0, true
	}
	if len(s) < 3 || (s[0] != '+' && s[0] != '-') {
		return 0, false
	}
	h, ok := digits(s[1:3])
	if !ok {
		return 0, false
	}
	m := 0
	switch rest := s[3:]; len(rest) {
	case 0:
	case 2:
		m, ok = digits(rest)
	case 3:
		if rest[0] != ':' {
			return 0, false
		}
		m, ok = digits(rest[1:])
	default:
		return 0, false
	}
	if !ok || h > 23 || m > 59 {
		return 0, false
	}
	off := (h*60 + m) * 60
	if s[0] == '-' {
		off = -off
	}
	return off, true
}

// date builds a time from its fields, after checking their ranges
// (time.Date would normalize 31 February into March without a word).
func date(y, mo, d, h, mi, s int, loc *time.Location) (time.Time, bool) {
	if mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 60 {
		return time.Time{}, false
	}
	t := time.Date(y, time.Month(mo), d, h, mi, s, 0, loc)
	if t.Day() != d && s != 60 { // past the month's end; a leap second moves on a day at 23:59:60
		return time.Time{}, false
	}
	return t, true
}

// iso parses an ISO 8601 / RFC 3339 time as zap's ISO8601TimeEncoder
// ("2006-01-02T15:04:05.000Z0700") and nginx's $time_iso8601
// ("2006-01-02T15:04:05-07:00") write it, with any number of fraction
// digits (up to 9 count), and returns it with its resolution.
func (c *clock) iso(s string) (time.Time, time.Duration, bool) {
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
		s[13] != ':' || s[16] != ':' {
		return time.Time{}, 0, false
	}
	i, nsec, res := 19, 0, time.Second
	if s[i] == '.' || s[i] == ',' {
		i++
		start := i
		for i < len(s) && isDigit(s[i]) {
			if i-start < 9 {
				nsec = nsec*10 + int(s[i]-'0')
				res /= 10
			}
			i++
		}
		if i == start {
			return time.Time{}, 0, false
		}
		for n := min(i-start, 9); n < 9; n++ {
			nsec *= 10
		}
	}
	sec, zone := s[:19], s[i:]
	if sec == c.isoSec && zone == c.isoZone {
		return c.isoBase.Add(time.Duration(nsec)), res, true
	}
	off, ok := offset(zone)
	if !ok {
		return time.Time{}, 0, false
	}
	y, ok1 := digits(s[0:4])
	mo, ok2 := digits(s[5:7])
	d, ok3 := digits(s[8:10])
	h, ok4 := digits(s[11:13])
	mi, ok5 := digits(s[14:16])
	se, ok6 := digits(s[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return time.Time{}, 0, false
	}
	base, ok := date(y, mo, d, h, mi, se, c.zone(off))
	if !ok {
		return time.Time{}, 0, false
	}
	c.isoSec, c.isoZone, c.isoBase = sec, zone, base
	return base.Add(time.Duration(nsec)), res, true
}

// months maps nginx's month abbreviations (always English) to numbers.
func month(s string) int {
	switch s {
	case "Jan":
		return 1
	case "Feb":
		return 2
	case "Mar":
		return 3
	case "Apr":
		return 4
	case "May":
		return 5
	case "Jun":
		return 6
	case "Jul":
		return 7
	case "Aug":
		return 8
	case "Sep":
		return 9
	case "Oct":
		return 10
	case "Nov":
		return 11
	case "Dec":
		return 12
	}
	return 0
}

// timeLocal parses nginx's $time_local, "02/Jan/2006:15:04:05 -0700".
func (c *clock) timeLocal(s string) (time.Time, bool) {
	if s == c.local && s != "" {
		return c.localTime, true
	}
	if len(s) != 26 || s[2] != '/' || s[6] != '/' || s[11] != ':' || s[14] != ':' || s[17] != ':' || s[20] != ' ' {
		return time.Time{}, false
	}
	off, ok := offset(s[21:])
	if !ok {
		return time.Time{}, false
	}
	d, ok1 := digits(s[0:2])
	mo := month(s[3:6])
	y, ok2 := digits(s[7:11])
	h, ok3 := digits(s[12:14])
	mi, ok4 := digits(s[15:17])
	se, ok5 := digits(s[18:20])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return time.Time{}, false
	}
	t, ok := date(y, mo, d, h, mi, se, c.zone(off))
	if !ok {
		return time.Time{}, false
	}
	c.local, c.localTime = s, t
	return t, true
}

// epoch parses seconds since the Unix epoch with an optional fraction
// ($msec: "1700000000.123"; zap's EpochTimeEncoder) and returns the time
// in UTC with its resolution.
func epoch(s string) (time.Time, time.Duration, bool) {
	d, res, ok := seconds(s)
	if !ok {
		return time.Time{}, 0, false
	}
	return time.Unix(0, 0).Add(d).UTC(), res, true
}

// seconds parses a non-negative decimal number of seconds ("0.201485348",
// nginx's "0.123") exactly, rounding past the nanosecond, and returns it
// with the resolution its digits give. A number with an exponent (which
// neither zap's durations nor nginx write) is read as a float.
func seconds(s string) (time.Duration, time.Duration, bool) {
	i, whole := 0, 0
	for i < len(s) && isDigit(s[i]) {
		if whole > 1e10 { // past time.Duration's range whatever follows
			return 0, 0, false
		}
		whole = whole*10 + int(s[i]-'0')
		i++
	}
	if i == 0 {
		return 0, 0, false
	}
	frac, res := 0, time.Second
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && isDigit(s[i]) {
			switch n := i - start; {
			case n < 9:
				frac = frac*10 + int(s[i]-'0')
				res /= 10
			case n == 9 && s[i] >= '5':
				frac++ // round half up at the nanosecond
			}
			i++
		}
		for n := min(i-start, 9); n < 9; n++ {
			frac *= 10
		}
	}
	if i != len(s) {
		if s[i] != 'e' && s[i] != 'E' {
			return 0, 0, false
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f*float64(time.Second) > math.MaxInt64 {
			return 0, 0, false
		}
		return time.Duration(math.Round(f * float64(time.Second))), time.Nanosecond, true
	}
	if whole > (math.MaxInt64-frac)/int(time.Second) {
		return 0, 0, false
	}
	return time.Duration(whole)*time.Second + time.Duration(frac), res, true
}
