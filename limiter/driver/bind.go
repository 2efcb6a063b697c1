package driver

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxLimits is the most limits one policy may bind together (Bind).
const MaxLimits = 16

// Bind names limits, in order, for the policy called policy, and returns
// the bound copies a Store is given: each one's Name, StateID and Binding
// are set. limiter.New calls it; a Store never does.
//
// Each limit's state lives under a name made of the policy name, the
// algorithm and the limit's ordinal among the policy's limits of that
// algorithm, so that a reload which keeps a policy's name and a limit's
// algorithm keeps that limit's counters, and a changed algorithm starts
// fresh; a shared limit (Limit.Shared) lives under its share's name
// instead, the same in every policy that uses it. At most MaxLimits
// limits, at most one queued limit (a leaky bucket: a request can wait
// in only one queue), and a share at most once.
func Bind(policy string, limits []Limit) ([]Limit, error) {
	if len(limits) == 0 {
		return nil, errors.New("limiter: no limits")
	}
	if len(limits) > MaxLimits {
		return nil, fmt.Errorf("limiter: %d limits in one policy; at most %d", len(limits), MaxLimits)
	}
	var seen [len(algos)]int
	queued := false
	ls := make([]Limit, len(limits))
	for i, l := range limits {
		if l.a == nil {
			return nil, fmt.Errorf("limiter: limit %d was not built by a New… constructor", i)
		}
		if l.Queued() {
			if queued {
				return nil, fmt.Errorf("limiter: more than one %v in one policy (a request waits in one queue)", l.alg)
			}
			queued = true
		}
		for j := range i {
			if l.share != "" && ls[j].share == l.share {
				return nil, fmt.Errorf("limiter: shared limit %q twice in one policy", l.share)
			}
		}
		l.name = stateName(policy, &l, seen[l.alg])
		l.id = stateID(l.name)
		l.binding = bindings.Add(1)
		if l.share == "" {
			seen[l.alg]++
		}
		ls[i] = l
	}
	return ls, nil
}

// StateNames returns the names Bind gives limits' state for policy, in
// order, without binding them (a reload uses it to find the state of
// limits that are gone).
func StateNames(policy string, limits ...Limit) []string {
	var seen [len(algos)]int
	names := make([]string, len(limits))
	for i := range limits {
		names[i] = stateName(policy, &limits[i], seen[limits[i].alg])
		if limits[i].share == "" {
			seen[limits[i].alg]++
		}
	}
	return names
}

// stateName builds the Store name of a limit. The policy name is
// length-prefixed so that no policy name can collide with another's limits;
// a shared limit's name is its share's, after "=", which no length prefix
// starts with, so that every policy using it finds the same state. The
// name ends with what of the parameters the state's meaning depends on
// (algo.stateName): the window algorithms' time grid (window, and
// slots), because counts kept on one grid mean nothing on another, so
// that changing a fixed or sliding window's length or slots starts it
// fresh.
func stateName(policy string, l *Limit, ordinal int) string {
	var name string
	if l.share != "" {
		name = "=" + strconv.Itoa(len(l.share)) + ":" + l.share + "/" + l.alg.String()
	} else {
		name = strconv.Itoa(len(policy)) + ":" + policy + "/" + l.alg.String() + "/" + strconv.Itoa(ordinal)
	}
	return name + l.a.stateName()
}
