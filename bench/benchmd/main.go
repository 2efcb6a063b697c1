// Command benchmd turns the output of several rounds of `go test -bench`
// into Markdown tables: per benchmark, the median of each metric with its
// min–max over the rounds, and its ratio to an anchor benchmark computed
// within each round (these machines are shared and noisy, so a ratio of
// two figures measured side by side is steadier than either figure).
//
// Usage:
//
//	benchmd [-ratio UNIT] -anchor GROUP=SUB [-anchor …] < rounds.txt
//
// Rounds are separated by lines "# round N". GROUP is a benchmark's top
// name (HotKey for BenchmarkHotKey/…), SUB the sub-benchmark to compare
// against; a SUB of "../LAST" compares each benchmark to its sibling
// whose last name element is LAST (Scaling/a/policies=1000 to
// Scaling/a/policies=1 with -anchor Scaling=../policies=1). The ratio is
// of UNIT (default ns/op).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

type anchors map[string]string

func (a anchors) String() string { return fmt.Sprint(map[string]string(a)) }

func (a anchors) Set(v string) error {
	g, s, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want GROUP=SUB, got %q", v)
	}
	a[g] = s
	return nil
}

// result is one benchmark line: metric unit → value.
type result map[string]float64

// ratioUnit is the metric whose ratio to the anchor's is reported.
var ratioUnit = "ns/op"

// anchorOf returns the benchmark name is compared to under anchor SUB
// sub of group g: g/sub, or with sub "../LAST" name's sibling LAST.
func anchorOf(g, sub, name string) string {
	if last, ok := strings.CutPrefix(sub, "../"); ok {
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return ""
		}
		return name[:i+1] + last
	}
	return g + "/" + sub
}

var line = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func main() {
	anc := anchors{}
	flag.Var(anc, "anchor", "GROUP=SUB: compare GROUP's benchmarks to GROUP/SUB (SUB ../LAST: to the sibling named LAST)")
	flag.StringVar(&ratioUnit, "ratio", "ns/op", "the unit the ratios to the anchor are of")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, anc); err != nil {
		fmt.Fprintln(os.Stderr, "benchmd:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, anc anchors) error {
	var rounds []map[string]result
	var order []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		text := sc.Text()
		if strings.HasPrefix(text, "# round") {
			rounds = append(rounds, map[string]result{})
			continue
		}
		m := line.FindStringSubmatch(text)
		if m == nil || len(rounds) == 0 {
			continue
		}
		r := result{}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("%q: %v", text, err)
			}
			r[f[i+1]] = v
		}
		rounds[len(rounds)-1][m[1]] = r
		if !seen[m[1]] {
			seen[m[1]] = true
			order = append(order, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(rounds) == 0 {
		return fmt.Errorf("no rounds in input")
	}
	groups := map[string][]string{}
	var groupOrder []string
	for _, name := range order {
		g, _, _ := strings.Cut(name, "/")
		if groups[g] == nil {
			groupOrder = append(groupOrder, g)
		}
		groups[g] = append(groups[g], name)
	}
	for _, g := range groupOrder {
		sub, anchored := anc[g]
		units := unitsOf(rounds, groups[g])
		fmt.Fprintf(out, "#### %s (%d rounds)\n\n| benchmark |", g, len(rounds))
		for _, u := range units {
			fmt.Fprintf(out, " %s |", u)
		}
		if anchored {
			fmt.Fprintf(out, " %s vs %s |", ratioUnit, strings.TrimPrefix(sub, "../"))
		}
		fmt.Fprint(out, "\n|---|")
		for range units {
			fmt.Fprint(out, "---:|")
		}
		if anchored {
			fmt.Fprint(out, "---:|")
		}
		fmt.Fprintln(out)
		for _, name := range groups[g] {
			fmt.Fprintf(out, "| %s |", strings.TrimPrefix(name, g+"/"))
			for _, u := range units {
				fmt.Fprintf(out, " %s |", summary(values(rounds, name, u), u))
			}
			if anchored {
				anchor := anchorOf(g, sub, name)
				var ratios []float64
				for _, r := range rounds {
					a, b := r[name][ratioUnit], r[anchor][ratioUnit]
					if a > 0 && b > 0 {
						ratios = append(ratios, a/b)
					}
				}
				fmt.Fprintf(out, " %s |", ratioSummary(ratios))
			}
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out)
	}
	return nil
}

func unitsOf(rounds []map[string]result, names []string) []string {
	set := map[string]bool{}
	for _, r := range rounds {
		for _, n := range names {
			for u := range r[n] {
				set[u] = true
			}
		}
	}
	pref := []string{"ns/op", "B/key", "B/op", "allocs/op"}
	var units []string
	for _, u := range pref {
		if set[u] {
			units = append(units, u)
			delete(set, u)
		}
	}
	var rest []string
	for u := range set {
		rest = append(rest, u)
	}
	sort.Strings(rest)
	return append(units, rest...)
}

func values(rounds []map[string]result, name, unit string) []float64 {
	var v []float64
	for _, r := range rounds {
		if x, ok := r[name][unit]; ok {
			v = append(v, x)
		}
	}
	return v
}

func format(x float64) string {
	switch {
	case x == float64(int64(x)) && x < 1e6:
		return strconv.FormatInt(int64(x), 10)
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	default:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
}

func summary(v []float64, unit string) string {
	if len(v) == 0 {
		return "–"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi || unit == "allocs/op" {
		return format(stats.Median(v))
	}
	return fmt.Sprintf("%s (%s–%s)", format(stats.Median(v)), format(lo), format(hi))
}

func ratioSummary(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", stats.Median(v), slices.Min(v), slices.Max(v))
}
