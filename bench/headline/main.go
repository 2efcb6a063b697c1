// Command headline writes README.md's table of headline figures from
// BENCHMARKS.md, so that the README quotes what the harness measured and
// nothing typed by hand: each row is read from the generated section
// that holds it, and names that section.
//
//	cd bench && go run ./headline [-root ..]    (rewrites README.md between <!-- headline:begin --> and <!-- headline:end -->)
//
// TestReadmeHeadline fails when README.md is not what this writes from
// the BENCHMARKS.md beside it: regenerate both in the same commit.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	root := flag.String("root", "..", "the repository's root")
	flag.Parse()
	readme := filepath.Join(*root, "README.md")
	if err := rewrite(readme, filepath.Join(*root, "BENCHMARKS.md")); err != nil {
		fmt.Fprintln(os.Stderr, "headline:", err)
		os.Exit(1)
	}
}

// rewrite puts the headline table built from the BENCHMARKS.md at bench
// into the README at readme.
func rewrite(readme, bench string) error {
	r, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(bench)
	if err != nil {
		return err
	}
	table, err := headline(string(b))
	if err != nil {
		return err
	}
	out, err := splice(string(r), table)
	if err != nil {
		return err
	}
	return os.WriteFile(readme, []byte(out), 0o644)
}

// figure is one headline: what it measures, the pattern that finds it in
// its section (its first group is the figure), how to write it, and the
// section's name.
type figure struct {
	what, section string
	re            *regexp.Regexp
	format        func(m []string) string
}

var figures = []figure{
	{"Forwarding under a limit, CPU per request against nginx `limit_req`", "proxy",
		regexp.MustCompile(`(?m)^- Forwarding under a limit that never rejects, limitproxy against nginx limit_req: .*?, ([0-9.]+×) \(([0-9.]+×)–([0-9.]+×)\) the proxy CPU per request`),
		func(m []string) string { return fmt.Sprintf("%s (%s–%s)", m[1], m[2], m[3]) }},
	{"The 429 path, CPU per request against nginx `limit_req`", "proxy",
		regexp.MustCompile(`(?m)^- Over the limit \(mostly 429s\), limitproxy against nginx limit_req: .*?\*\*([0-9.]+×) \(([0-9.]+×)–([0-9.]+×)\) the proxy CPU per request\*\*`),
		func(m []string) string { return fmt.Sprintf("%s (%s–%s)", m[1], m[2], m[3]) }},
	{"A token-bucket decision, against `golang.org/x/time/rate`'s `Allow`", "limiter",
		regexp.MustCompile(`(?m)^\| token_bucket \| [^|]+\| [^|]+\| [^|]+\| ([0-9.]+×) \(([0-9.]+)–([0-9.]+)\) \|`),
		func(m []string) string { return fmt.Sprintf("%s (%s–%s×) the time", m[1], m[2], m[3]) }},
	{"A request matching the last of 1000 policies, against one policy", "scaling",
		regexp.MustCompile(`(?m)^\| token_bucket/keys=1/policies=1000 \|.*\| ([0-9.]+×) \(([0-9.]+)–([0-9.]+)\) \|$`),
		func(m []string) string { return fmt.Sprintf("%s (%s–%s×) the time", m[1], m[2], m[3]) }},
	{"Goodput of a saturated backend kept by the adaptive limit, at 1× to 4× its capacity", "capacity",
		regexp.MustCompile(`(?m)^\| 1× \(\d+ r/s\) \| limitproxy adaptive \| [^|]+\| (\d+%) \|(?s:.*)^\| 4× \(\d+ r/s\) \| limitproxy adaptive \| [^|]+\| (\d+%) \|`),
		func(m []string) string { return fmt.Sprintf("%s to %s of possible", m[1], m[2]) }},
	{"Redis calls per decision of a bounded limit, 3 instances on Zipf keys (exact: 1)", "leases",
		regexp.MustCompile(`(?m)^\| bounded \|(?: [^|]+\|){4} ([0-9.]+) \(([0-9.]+)–([0-9.]+)\) \|`),
		func(m []string) string { return fmt.Sprintf("%s (%s–%s)", m[1], m[2], m[3]) }},
	{"A request keyed by a verified JWT's `sub` (token cached), against keyed by address", "identity",
		regexp.MustCompile(`(?m)^\| jwt-cached \|.*\| ([0-9.]+×) \(([0-9.]+)–([0-9.]+)\) \|$`),
		func(m []string) string { return fmt.Sprintf("%s (%s–%s×) the time", m[1], m[2], m[3]) }},
}

// headline returns the README's table for the BENCHMARKS.md text b.
func headline(b string) (string, error) {
	var w bytes.Buffer
	w.WriteString("| headline | figure | from |\n|---|---|---|\n")
	for _, f := range figures {
		sec, err := section(b, f.section)
		if err != nil {
			return "", err
		}
		m := f.re.FindStringSubmatch(sec)
		if m == nil {
			return "", fmt.Errorf("BENCHMARKS.md's %s section has no figure for %q", f.section, f.what)
		}
		date := regexp.MustCompile(`on (\d{4}-\d{2}-\d{2})`).FindStringSubmatch(sec)
		when := ""
		if date != nil {
			when = ", " + date[1]
		}
		fmt.Fprintf(&w, "| %s | %s | [%s](BENCHMARKS.md#%s)%s |\n", f.what, f.format(m), f.section, anchor(sec), when)
	}
	return w.String(), nil
}

// section returns the text of BENCHMARKS.md's section name.
func section(b, name string) (string, error) {
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	i, j := strings.Index(b, begin), strings.Index(b, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("BENCHMARKS.md has no %s section", name)
	}
	return b[i+len(begin) : j], nil
}

// anchor is the GitHub anchor of a section's first heading.
func anchor(sec string) string {
	m := regexp.MustCompile(`(?m)^## (.+)$`).FindStringSubmatch(sec)
	if m == nil {
		return ""
	}
	var a strings.Builder
	for _, r := range strings.ToLower(m[1]) {
		switch {
		case r == ' ':
			a.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '×' && r != '–' && r != '—':
			a.WriteRune(r)
		}
	}
	return a.String()
}

// splice puts table between readme's headline markers.
func splice(readme, table string) (string, error) {
	const begin, end = "<!-- headline:begin -->\n", "<!-- headline:end -->"
	i, j := strings.Index(readme, begin), strings.Index(readme, end)
	if i < 0 || j < i {
		return "", errors.New("README.md has no <!-- headline:begin --> … <!-- headline:end --> markers")
	}
	return readme[:i+len(begin)] + table + readme[j:], nil
}
