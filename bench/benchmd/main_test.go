package main

import (
	"strings"
	"testing"
)

// TestRun checks medians, min–max, and that ratios are taken within each
// round: the anchor's noise in round 2 must cancel out of the ratio.
func TestRun(t *testing.T) {
	in := `# round 1
BenchmarkHot/a-2   10   50.0 ns/op   0 B/op   0 allocs/op
BenchmarkHot/x-2   10  100.0 ns/op   0 B/op   0 allocs/op
# round 2
BenchmarkHot/a-2   10  100.0 ns/op   0 B/op   0 allocs/op
BenchmarkHot/x-2   10  200.0 ns/op   0 B/op   0 allocs/op
# round 3
BenchmarkHot/a-2   10   60.0 ns/op   0 B/op   0 allocs/op
BenchmarkHot/x-2   10  120.0 ns/op   0 B/op   0 allocs/op
`
	wantOutput(t, in, anchors{"Hot": "x"},
		"#### Hot (3 rounds)",
		"| a | 60 (50–100) | 0 | 0 | 0.50× (0.50–0.50) |",
		"| x | 120 (100–200) | 0 | 0 | 1.00× (1.00–1.00) |",
	)
}

// TestSiblingAnchor: with SUB "../LAST" each benchmark is compared to its
// own sibling, in the unit -ratio names.
func TestSiblingAnchor(t *testing.T) {
	in := `# round 1
BenchmarkS/a/n=1-2   10   50.0 ns/op   10.0 cpu-ns/op
BenchmarkS/a/n=9-2   10   60.0 ns/op   11.0 cpu-ns/op
BenchmarkS/b/n=1-2   10   70.0 ns/op   20.0 cpu-ns/op
BenchmarkS/b/n=9-2   10   80.0 ns/op   30.0 cpu-ns/op
`
	defer func(u string) { ratioUnit = u }(ratioUnit)
	ratioUnit = "cpu-ns/op"
	wantOutput(t, in, anchors{"S": "../n=1"},
		"| benchmark | ns/op | cpu-ns/op | cpu-ns/op vs n=1 |",
		"| a/n=9 | 60 | 11 | 1.10× (1.10–1.10) |",
		"| b/n=9 | 80 | 30 | 1.50× (1.50–1.50) |",
		"| b/n=1 | 70 | 20 | 1.00× (1.00–1.00) |",
	)
}

// wantOutput runs in through run with the anchors a and fails the test
// unless the output contains each of want.
func wantOutput(t *testing.T, in string, a anchors, want ...string) {
	t.Helper()
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, a); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
