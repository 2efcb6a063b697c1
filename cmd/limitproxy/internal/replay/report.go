package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/limitproxy/limitproxy/internal/topk"
)

// Report is what a replay found: per policy and configuration, the
// decisions and the keys rejected most; with two configurations, what
// changed between them. WriteText and WriteJSON print it, WriteSVG plots
// it.
type Report struct {
	// Configs are the configurations' paths: Options.Config, then
	// Options.Against if given. Every per-configuration list below is in
	// this order.
	Configs []string `json:"configs"`
	// Logs are the logs' paths.
	Logs []string `json:"logs"`
	// Keys is how client keys are shown: "hashed" or "raw".
	Keys string `json:"keys"`
	// Read counts what was read.
	Read ReadStats `json:"read"`
	// Warnings say what the logs lacked to replay their requests
	// exactly, and what that costs (Inexact): expect disagreement.
	Warnings []string `json:"warnings,omitempty"`
	// From and To are the earliest and latest arrival replayed (zero
	// when none was).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Policies has a row per policy of either configuration (Config's in
	// file order, then those only Against has), then the requests no
	// policy decided: "unmatched" and "invalid" rows, when there are any.
	Policies []PolicyReport `json:"policies"`
	// Logged compares, per configuration, the replayed decisions with
	// those limitproxy's own log recorded; empty for other logs.
	Logged []Agreement `json:"logged,omitempty"`
	// Diff is the comparison of the two configurations; nil with one.
	Diff *Diff `json:"diff,omitempty"`
}

// ReadStats counts what the logs held and what was replayed.
type ReadStats struct {
	// Lines are the lines read, blank ones included.
	Lines int64 `json:"lines"`
	// Replayed are the requests decided.
	Replayed int64 `json:"replayed"`
	// Malformed are the lines that could not be read (each was reported
	// as file:line); Skipped the blank lines and, in limitproxy's log,
	// those of other loggers; NotRequests nginx's lines for what was not
	// an HTTP request (TLS handshakes to a plain-text port, garbage),
	// which the server refuses before any policy.
	Malformed   int64 `json:"malformed"`
	Skipped     int64 `json:"skipped"`
	NotRequests int64 `json:"not_requests"`
	// Late are the requests replayed after a later one because their
	// log was further out of time order than the merge's slack.
	Late int64 `json:"late"`
	// NoClient are the requests whose record had no client address: they
	// were replayed from Placeholder (0.0.0.0), all under one ip key.
	NoClient int64 `json:"no_client"`
}

// Row kinds of PolicyReport.
const (
	RowPolicy    = "policy"
	RowUnmatched = "unmatched" // proxy.Unmatched's name
	RowInvalid   = "invalid"   // proxy.Invalid's name
)

// PolicyReport is one row: a policy, or the unmatched or invalid
// requests.
type PolicyReport struct {
	// Policy is the policy's name ("" for the other rows); Row is
	// RowPolicy, RowUnmatched or RowInvalid.
	Policy string `json:"policy"`
	Row    string `json:"row"`
	// Results are the row's decisions under each configuration.
	Results []Result `json:"results"`

	tls []*timeline // by configuration; nil for a configuration without the policy
}

// Result is a row's decisions under one configuration.
type Result struct {
	Config string `json:"config"`
	// Absent is set when the policy is not in this configuration.
	Absent bool `json:"absent,omitempty"`
	Counts
	// TopRejected are the keys rejected most (rejected and banned), most
	// first.
	TopRejected []KeyCount `json:"top_rejected"`
}

// KeyCount is a client key and how many requests it had.
type KeyCount struct {
	// Policy is set in lists of several policies' keys.
	Policy string `json:"policy,omitempty"`
	// Key is the key, hashed or raw (Report.Keys).
	Key   string `json:"key"`
	Count uint64 `json:"count"`
	// Err bounds the error of Count, which may be high by up to Err: 0
	// while a list counts at most 4096 distinct keys, at most its total
	// over 4096 after (a Space-Saving summary, internal/topk).
	Err uint64 `json:"err,omitempty"`
}

// Agreement compares the decisions replayed under one configuration with
// those limitproxy logged.
type Agreement struct {
	Config string `json:"config"`
	// Compared are the requests whose line had limitproxy's policy and
	// decision; Agreed those the replay decided the same way, under the
	// same policy.
	Compared int64 `json:"compared"`
	Agreed   int64 `json:"agreed"`
	// Disagreements are the others, by what was logged and what was
	// replayed, most first.
	Disagreements []Disagreement `json:"disagreements,omitempty"`
}

// Disagreement is a number of requests logged one way and replayed
// another.
type Disagreement struct {
	LoggedPolicy   string `json:"logged_policy"`
	LoggedDecision string `json:"logged_decision"`
	Policy         string `json:"policy"`
	Decision       string `json:"decision"`
	Requests       int64  `json:"requests"`
}

// Diff compares two configurations on the same requests.
type Diff struct {
	// Changed are the requests decided differently in any way (another
	// decision or another policy).
	Changed int64 `json:"changed"`
	// RejectedOnly[i] are the requests rejected (rejected or banned)
	// under Configs[i] and not under the other.
	RejectedOnly [2]Change `json:"rejected_only"`
}

// Change is the requests rejected under one configuration only.
type Change struct {
	Config   string `json:"config"`
	Requests int64  `json:"requests"`
	// ByPolicy counts them by the policy that rejected them, most first.
	ByPolicy []PolicyCount `json:"by_policy"`
	// TopKeys are the keys they were rejected under, most first.
	TopKeys []KeyCount `json:"top_keys"`
}

// PolicyCount is a number of requests of one policy.
type PolicyCount struct {
	Policy   string `json:"policy"`
	Requests int64  `json:"requests"`
}

// report builds the Report of what e replayed.
func (e *engine) report() *Report {
	rep := &Report{
		Logs: e.logs,
		Keys: "hashed",
		Read: ReadStats{
			Lines: e.st.Lines, Replayed: e.replayed, Malformed: e.st.Malformed, Skipped: e.st.Skipped,
			NotRequests: e.notRequests, Late: e.st.Late, NoClient: e.noClient,
		},
		From: e.from, To: e.to,
	}
	if e.raw {
		rep.Keys = "raw"
	}
	rep.Warnings = e.inexact()
	for _, s := range e.sides {
		rep.Configs = append(rep.Configs, s.config)
	}
	// The rows: every configuration's policies in file order, the first
	// configuration's first; then any policy a decider named that no
	// configuration lists (a fake's), by name; then the special rows.
	var keys []rowKey
	seen := map[rowKey]bool{}
	for _, s := range e.sides {
		for _, name := range s.policies {
			if k := (rowKey{policy: name}); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	var extra []rowKey
	for _, s := range e.sides {
		for k := range s.rows {
			if k.special == "" && !seen[k] {
				seen[k] = true
				extra = append(extra, k)
			}
		}
	}
	slices.SortFunc(extra, func(a, b rowKey) int { return cmp.Compare(a.policy, b.policy) })
	keys = append(keys, extra...)
	for _, special := range []string{RowUnmatched, RowInvalid} {
		k := rowKey{special: special}
		for _, s := range e.sides {
			if s.rows[k] != nil && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		pr := PolicyReport{Policy: k.policy, Row: RowPolicy}
		if k.special != "" {
			pr.Row = k.special
		}
		for _, s := range e.sides {
			res := Result{Config: s.config, TopRejected: []KeyCount{}}
			if k.special == "" && len(s.policies) > 0 && !slices.Contains(s.policies, k.policy) && s.rows[k] == nil {
				res.Absent = true
			}
			var tl *timeline
			if rw := s.rows[k]; rw != nil {
				res.Counts = rw.counts
				res.TopRejected = e.keyCounts(rw.top, false)
				tl = &rw.tl
			}
			pr.Results = append(pr.Results, res)
			pr.tls = append(pr.tls, tl)
		}
		rep.Policies = append(rep.Policies, pr)
	}
	for _, s := range e.sides {
		if s.logged.compared == 0 {
			continue
		}
		a := Agreement{Config: s.config, Compared: s.logged.compared, Agreed: s.logged.agreed}
		for p, n := range s.logged.pairs {
			a.Disagreements = append(a.Disagreements, Disagreement{LoggedPolicy: p[0], LoggedDecision: p[1], Policy: p[2], Decision: p[3], Requests: n})
		}
		slices.SortFunc(a.Disagreements, func(x, y Disagreement) int {
			if c := cmp.Compare(y.Requests, x.Requests); c != 0 {
				return c
			}
			return cmp.Or(cmp.Compare(x.LoggedPolicy, y.LoggedPolicy), cmp.Compare(x.LoggedDecision, y.LoggedDecision),
				cmp.Compare(x.Policy, y.Policy), cmp.Compare(x.Decision, y.Decision))
		})
		rep.Logged = append(rep.Logged, a)
	}
	if len(e.sides) == 2 {
		d := &Diff{Changed: e.diff.changed}
		for i, c := range e.diff.only {
			ch := Change{Config: e.sides[i].config, Requests: c.requests, ByPolicy: []PolicyCount{}}
			for p, n := range c.byPolicy {
				ch.ByPolicy = append(ch.ByPolicy, PolicyCount{Policy: p, Requests: n})
			}
			slices.SortFunc(ch.ByPolicy, func(x, y PolicyCount) int {
				return cmp.Or(cmp.Compare(y.Requests, x.Requests), cmp.Compare(x.Policy, y.Policy))
			})
			ch.TopKeys = e.keyCounts(c.keys, true)
			d.RejectedOnly[i] = ch
		}
		rep.Diff = d
	}
	return rep
}

// keyCounts returns the top keys of sk as the report shows them; with
// policies, sk's keys are policyKeys.
func (e *engine) keyCounts(sk *topk.Sketch, policies bool) []KeyCount {
	out := []KeyCount{}
	if sk == nil {
		return out
	}
	for _, en := range sk.Top(e.top) {
		kc := KeyCount{Count: en.Count, Err: en.Err}
		key := en.Key
		if policies {
			kc.Policy, key = splitPolicyKey(key)
		}
		kc.Key = showKey(key, e.raw, e.hasher)
		out = append(out, kc)
	}
	// Hashing changed the keys: order ties by what is shown, so that the
	// output does not depend on the secret's draw beyond the hashes.
	slices.SortStableFunc(out, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// rowName is how the text shows a row's name.
func (p *PolicyReport) rowName() string {
	if p.Row != RowPolicy {
		return "(" + p.Row + ")"
	}
	return p.Policy
}

// inexact returns the report's warnings: what the logs lacked for an
// exact replay, and what each lack does to it.
func (e *engine) inexact() []string {
	var out []string
	if n := e.noReplayFields; n > 0 {
		var headers []string
		query := false
		for _, s := range e.sides {
			for _, h := range s.headers {
				if !slices.Contains(headers, h) {
					headers = append(headers, h)
				}
			}
			query = query || s.query
		}
		slices.Sort(headers)
		w := fmt.Sprintf("%d of %d requests come from lines written without [log] access_replay, so they lack its fields (received, target, h:NAME):", n, e.replayed)
		if len(headers) > 0 {
			w += fmt.Sprintf(" the request headers the policies match or key on (%s) are unknown: requests that need them are replayed as if they lacked them (a key part missing: on_missing decides, and they may all share one key);", strings.Join(headers, ", "))
		}
		if query {
			w += " the query is unknown: a policy keying on a query parameter sees none;"
		}
		w += " arrival times are ts − duration, to the millisecond. Expect disagreement with the logged decisions; for an exact replay, set [log] access_replay = true where the log is written, or \"hashed\" to keep keyed values out of it (docs/replay.md)"
		out = append(out, w)
	}
	if n := e.hashedCompared; n > 0 {
		names := slices.Clone(e.hashedNames)
		slices.Sort(names)
		out = append(out, fmt.Sprintf("%d of %d requests carry %s only as a hash ([log] access_replay = \"hashed\", written under a configuration that only keyed on them), which a configuration replayed here compares by value (a match or an estimate): a hash never equals the value compared, so expect disagreement there (docs/replay.md)", n, e.replayed, strings.Join(names, ", ")))
	}
	if n := e.noClient; n > 0 {
		why := "the log has no client address"
		if e.maskedClient == n {
			why = "the log's client addresses are masked or hashed ([log] client_address)"
		} else if e.maskedClient > 0 {
			why = fmt.Sprintf("the log has no client address, or (%d of them) a masked or hashed one ([log] client_address)", e.maskedClient)
		}
		out = append(out, fmt.Sprintf("%d of %d requests have no client address to key by: %s. Every such request is keyed by %s, one ip key for all of them; expect disagreement wherever a policy keys on ip", n, e.replayed, why, Placeholder))
	}
	return out
}

// WriteText writes the report as tables for people.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", warn)
	}
	if len(r.Warnings) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "replayed %d requests of %d lines in %s", r.Read.Replayed, r.Read.Lines, strings.Join(r.Logs, ", "))
	if !r.From.IsZero() {
		fmt.Fprintf(&b, "\nfrom %s to %s (%s)", r.From.UTC().Format(time.RFC3339Nano), r.To.UTC().Format(time.RFC3339Nano), r.To.Sub(r.From))
	}
	fmt.Fprintf(&b, "\nmalformed %d, skipped %d, not requests %d, late %d, without a client address %d",
		r.Read.Malformed, r.Read.Skipped, r.Read.NotRequests, r.Read.Late, r.Read.NoClient)
	if r.Read.NoClient > 0 {
		fmt.Fprintf(&b, " (replayed from %s: one ip key for all)", Placeholder)
	}
	b.WriteString("\n\n")

	two := len(r.Configs) > 1
	head := []string{"policy"}
	if two {
		head = append(head, "config")
	}
	text := len(head) // the columns left-aligned
	head = append(head, "requests", "allowed", "queued", "rejected", "shadow_rejected", "banned", "shadow_banned", "skipped")
	rows := [][]string{head}
	for i := range r.Policies {
		p := &r.Policies[i]
		for j, res := range p.Results {
			name := p.rowName()
			if j > 0 {
				name = ""
			}
			row := []string{name}
			if two {
				row = append(row, res.Config)
			}
			c := res.Counts
			for _, n := range []int64{c.Requests, c.Allowed, c.Queued, c.Rejected, c.ShadowRejected, c.Banned, c.ShadowBanned, c.Skipped} {
				if res.Absent {
					row = append(row, "-")
				} else {
					row = append(row, strconv.FormatInt(n, 10))
				}
			}
			rows = append(rows, row)
		}
	}
	writeTable(&b, rows, text)

	// Top rejected keys, per policy and configuration.
	listed := false
	for i := range r.Policies {
		p := &r.Policies[i]
		for _, res := range p.Results {
			if len(res.TopRejected) == 0 {
				continue
			}
			if !listed {
				fmt.Fprintf(&b, "\ntop rejected keys (rejected and banned; %s):\n", r.Keys)
				listed = true
			}
			fmt.Fprintf(&b, "  %s", p.rowName())
			if two {
				fmt.Fprintf(&b, " under %s", res.Config)
			}
			b.WriteString(":\n")
			writeKeys(&b, res.TopRejected, "    ")
		}
	}

	for _, a := range r.Logged {
		fmt.Fprintf(&b, "\nlogged decisions: %s agrees on %d of %d (%s)\n", a.Config, a.Agreed, a.Compared, percent(a.Agreed, a.Compared))
		for k, d := range a.Disagreements {
			if k == 10 {
				fmt.Fprintf(&b, "    … and %d more pairs\n", len(a.Disagreements)-k)
				break
			}
			fmt.Fprintf(&b, "    %d logged %s under %s, replayed %s under %s\n", d.Requests, d.LoggedDecision, quoteName(d.LoggedPolicy), d.Decision, quoteName(d.Policy))
		}
	}

	if d := r.Diff; d != nil {
		fmt.Fprintf(&b, "\ndecided differently: %d of %d requests\n", d.Changed, r.Read.Replayed)
		for i, ch := range d.RejectedOnly {
			fmt.Fprintf(&b, "rejected under %s, not under %s: %d", ch.Config, r.Configs[1-i], ch.Requests)
			if len(ch.ByPolicy) > 0 {
				parts := make([]string, len(ch.ByPolicy))
				for k, pc := range ch.ByPolicy {
					parts[k] = fmt.Sprintf("%s %d", quoteName(pc.Policy), pc.Requests)
				}
				fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
			}
			b.WriteString("\n")
			writeKeys(&b, ch.TopKeys, "    ")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes rows in aligned columns two spaces apart: the first
// text columns left-aligned, the others (numbers) right-aligned.
func writeTable(b *strings.Builder, rows [][]string, text int) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i > 0 {
				line.WriteString("  ")
			}
			if i < text {
				line.WriteString(cell + pad)
			} else {
				line.WriteString(pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// writeKeys writes one key a line, aligned.
func writeKeys(b *strings.Builder, keys []KeyCount, indent string) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		line := indent
		if k.Policy != "" {
			line += k.Policy + "\t"
		}
		line += k.Key + "\t" + fmt.Sprint(k.Count)
		if k.Err > 0 {
			line += fmt.Sprintf(" (may be up to %d high)", k.Err)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func quoteName(policy string) string {
	if policy == "" {
		return "no policy"
	}
	return fmt.Sprintf("%q", policy)
}

func percent(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
}
