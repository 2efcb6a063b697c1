package driver

import (
	"fmt"
	"time"
)

// scriptExact is the largest integer a double holds exactly: a script
// store's arithmetic is exact below it.
const scriptExact = 1 << 53

// ScriptParams returns what a store that runs the algorithms as scripts
// passes for l: its algorithm's number (the index of its step in the
// Redis store's decide.lua), then the five integer parameters of that
// step, each algorithm's file saying which. Such a store decides in
// whole microseconds, with doubles (Lua's numbers), so times must be
// whole microseconds and every product the step forms must stay below
// 2^53: a *ParamError naming the parameter at fault says which does not,
// so that a configuration can refuse the limit at load.
func (l *Limit) ScriptParams() ([6]int64, error) {
	if l.a == nil {
		return [6]int64{}, fmt.Errorf("%w %v", ErrUnknownAlgorithm, l.alg)
	}
	p, err := l.a.script()
	if err != nil {
		return [6]int64{}, err
	}
	return [6]int64{int64(l.alg), p[0], p[1], p[2], p[3], p[4]}, nil
}

// ScriptGrid returns what a script store passes with a decision of l at
// now beside ScriptParams, for windows its script cannot compute: a
// calendar window's (FixedWindowParams.Calendar), whose bounds follow a
// time zone's rules. g holds the number k of the window holding now, then
// the starts of windows k−1, k and k+1 and the end of k+1, in µs; the
// script decides in whichever of those holds its own instant (the Redis
// store's is Redis's clock, which may differ a little from now), and the
// nearest if none does. ok is false for every other limit.
func (l *Limit) ScriptGrid(now time.Time) (g [5]int64, ok bool) {
	if w, is := l.a.(windowed); is {
		return w.scriptGrid(now)
	}
	return g, false
}

// scriptMicros returns d, the parameter field of an algorithm a, in whole
// microseconds, or a *ParamError if it is not a whole number of them.
func scriptMicros(a Algorithm, d time.Duration, what, field string) (int64, error) {
	if d%time.Microsecond != 0 {
		return 0, paramErr(a, field, "%s %v is not a whole number of microseconds, the Redis store's resolution", what, d)
	}
	return int64(d / time.Microsecond), nil
}

// scriptTooBig is the error of a parameter whose products pass 2^53.
func scriptTooBig(a Algorithm, field string) error {
	return paramErr(a, field, "too large for the Redis store's exact arithmetic (2^53 in Lua)")
}
