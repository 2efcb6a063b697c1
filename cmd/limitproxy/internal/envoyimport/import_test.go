package envoyimport

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenCase is one import of the files of testdata/DIR named by files
// (the case's own name when nil).
type goldenCase struct {
	dir, name string
	files     []string
	o         Options
}

// goldenCases lists every YAML file of testdata/valid and testdata/invalid
// once: alone, or in the case that groups it with others.
func goldenCases(t *testing.T) []goldenCase {
	grouped := map[string]goldenCase{
		"merge_a.yaml":      {dir: "valid", name: "merge", files: []string{"merge_a.yaml", "merge_b.yaml"}, o: Options{MergeDomains: true}},
		"merge_b.yaml":      {},
		"dup_domain_a.yaml": {dir: "invalid", name: "dup_domain", files: []string{"dup_domain_a.yaml", "dup_domain_b.yaml"}},
		"dup_domain_b.yaml": {},
		"merge_dup_a.yaml":  {dir: "invalid", name: "merge_dup", files: []string{"merge_dup_a.yaml", "merge_dup_b.yaml"}, o: Options{MergeDomains: true}},
		"merge_dup_b.yaml":  {},
	}
	options := map[string]Options{
		"valid/replaces.yaml": {Listen: "127.0.0.1:18081"},
	}
	var cases []goldenCase
	for _, dir := range []string{"valid", "invalid"} {
		ents, err := os.ReadDir(filepath.Join("testdata", dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".yaml") {
				continue
			}
			if g, ok := grouped[e.Name()]; ok {
				if g.name != "" {
					cases = append(cases, g)
				}
				continue
			}
			cases = append(cases, goldenCase{dir: dir, name: strings.TrimSuffix(e.Name(), ".yaml"), files: []string{e.Name()}, o: options[dir+"/"+e.Name()]})
		}
	}
	return cases
}

// TestGolden imports each case and compares the TOML (testdata/valid/
// NAME.toml) or the errors (testdata/invalid/NAME.golden) with the
// golden file; -update rewrites them.
func TestGolden(t *testing.T) {
	for _, gc := range goldenCases(t) {
		t.Run(gc.dir+"/"+gc.name, func(t *testing.T) {
			var in []Input
			for _, f := range gc.files {
				src, err := os.ReadFile(filepath.Join("testdata", gc.dir, f))
				if err != nil {
					t.Fatal(err)
				}
				in = append(in, Input{Name: f, Src: src})
			}
			res, err := Import(in, gc.o)
			var got []byte
			ext := ".toml"
			switch {
			case gc.dir == "valid" && err != nil:
				t.Fatalf("refused: %v", err)
			case gc.dir == "invalid" && err == nil:
				t.Fatalf("accepted:\n%s", res.TOML)
			case err != nil:
				got, ext = []byte(err.Error()+"\n"), ".golden"
			default:
				got = res.TOML
			}
			golden := filepath.Join("testdata", gc.dir, gc.name+ext)
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestGolden -update writes it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
}

// TestGoldenFilesHaveCases refuses a golden file no case writes.
func TestGoldenFilesHaveCases(t *testing.T) {
	var want []string
	for _, gc := range goldenCases(t) {
		ext := ".toml"
		if gc.dir == "invalid" {
			ext = ".golden"
		}
		want = append(want, filepath.Join("testdata", gc.dir, gc.name+ext))
	}
	got, _ := filepath.Glob("testdata/valid/*.toml")
	more, _ := filepath.Glob("testdata/invalid/*.golden")
	got = append(got, more...)
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("%s: no case writes it", g)
		}
	}
}
