package replay

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/limitproxy/limitproxy/internal/topk"
	"github.com/limitproxy/limitproxy/proxy"
)

// Counts are the decisions of a policy's requests, as the access log and
// the metrics name them.
type Counts struct {
	Requests       int64 `json:"requests"`
	Allowed        int64 `json:"allowed"`
	Queued         int64 `json:"queued"`
	Rejected       int64 `json:"rejected"`
	ShadowRejected int64 `json:"shadow_rejected"`
	Banned         int64 `json:"banned"`
	ShadowBanned   int64 `json:"shadow_banned"`
	Skipped        int64 `json:"skipped"`
	Unmatched      int64 `json:"unmatched,omitempty"`
	Invalid        int64 `json:"invalid,omitempty"`
	// Other counts any other decision; none is made today (shed, a
	// concurrency limit's, is not replayed).
	Other int64 `json:"other,omitempty"`
}

func (c *Counts) add(decision proxy.Decision) {
	c.Requests++
	switch decision {
	case proxy.Allowed:
		c.Allowed++
	case proxy.Queued:
		c.Queued++
	case proxy.Rejected:
		c.Rejected++
	case proxy.ShadowRejected:
		c.ShadowRejected++
	case proxy.Banned:
		c.Banned++
	case proxy.ShadowBanned:
		c.ShadowBanned++
	case proxy.Skipped:
		c.Skipped++
	case proxy.Unmatched:
		c.Unmatched++
	case proxy.Invalid:
		c.Invalid++
	default:
		c.Other++
	}
}

// agreement compares the decisions a side replayed with those limitproxy
// logged (its own log only): replaying a log against the configuration
// it was written under should agree on every request.
type agreement struct {
	compared, agreed int64
	pairs            map[[4]string]int64 // logged policy, decision, replayed policy, decision
}

func (a *agreement) add(loggedPolicy, loggedDecision, policy, decision string) {
	a.compared++
	if loggedPolicy == policy && loggedDecision == decision {
		a.agreed++
		return
	}
	if a.pairs == nil {
		a.pairs = map[[4]string]int64{}
	}
	a.pairs[[4]string{loggedPolicy, loggedDecision, policy, decision}]++
}

// diff compares two sides' verdicts on the same requests.
type diff struct {
	changed int64
	// only[i] is the requests refused under side i and not the other.
	only [2]change
}

type change struct {
	requests int64
	byPolicy map[string]int64
	keys     *topk.Sketch // policyKey(policy, key)
}

func (d *diff) init() {
	for i := range d.only {
		d.only[i].byPolicy = map[string]int64{}
		d.only[i].keys, _ = topk.New(sketchK)
	}
}

func (d *diff) add(a, b *proxy.Verdict) {
	if a.Decision != b.Decision || a.Policy != b.Policy {
		d.changed++
	}
	ra, rb := refused(a.Decision), refused(b.Decision)
	switch {
	case ra && !rb:
		d.only[0].add(a)
	case rb && !ra:
		d.only[1].add(b)
	}
}

func (c *change) add(v *proxy.Verdict) {
	c.requests++
	c.byPolicy[v.Policy]++
	c.keys.Add(policyKey(v.Policy, keyOf(v)), 1)
}

// policyKey is a policy's name and a client key in one string, the name
// length-prefixed so that it splits back whatever either holds.
func policyKey(policy, key string) string {
	return strconv.Itoa(len(policy)) + ":" + policy + key
}

// splitPolicyKey undoes policyKey.
func splitPolicyKey(s string) (policy, key string) {
	n, rest, _ := strings.Cut(s, ":")
	l, _ := strconv.Atoi(n)
	return rest[:l], rest[l:]
}

// noKey stands, in the top-keys summaries, for the requests a policy
// refused for lacking a part of their client key (400): they were counted
// under no key. No key the proxy builds is this string.
const noKey = "\x00"

// keyOf is what the summaries count v under.
func keyOf(v *proxy.Verdict) string {
	if v.Key == "" && v.Status == http.StatusBadRequest {
		return noKey
	}
	return v.Key
}

// showKey returns how a report shows a client key: its key hash (the
// admin API's and the access log's, under the same secret), or with raw, its parts as
// proxy.KeyParts decodes them, separated by spaces (as the admin API's
// top offenders do). The empty key, under which a policy with key = []
// counts every client, shows as "(all clients)", and noKey as "(no key)".
func showKey(key string, raw bool, h *proxy.KeyHasher) string {
	switch {
	case key == noKey:
		return "(no key)"
	case key == "":
		return "(all clients)"
	case raw:
		parts, _ := proxy.KeyParts(key)
		return strings.Join(parts, " ")
	}
	return h.Key(key)
}
