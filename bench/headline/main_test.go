package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeHeadline: README.md's headline table is what headline writes
// from the BENCHMARKS.md beside it, every figure found.
func TestReadmeHeadline(t *testing.T) {
	b, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	table, err := headline(string(b))
	if err != nil {
		t.Fatal(err)
	}
	want, err := splice(string(r), table)
	if err != nil {
		t.Fatal(err)
	}
	if want != string(r) {
		t.Errorf("README.md's headline table is not BENCHMARKS.md's: run `cd bench && go run ./headline`; want:\n%s", table)
	}
	if n := strings.Count(table, "\n"); n != len(figures)+2 {
		t.Errorf("%d lines, want %d", n, len(figures)+2)
	}
}

// TestHeadlineMissingFigure: a section without its figure is an error
// that names it, not a row left out.
func TestHeadlineMissingFigure(t *testing.T) {
	b, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(b), "| jwt-cached |", "| jwt-cache |", 1)
	if _, err := headline(broken); err == nil || !strings.Contains(err.Error(), "identity section has no figure") {
		t.Errorf("err = %v", err)
	}
}
