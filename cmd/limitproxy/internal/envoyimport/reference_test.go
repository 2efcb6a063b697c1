package envoyimport

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// referenceCase is one load of envoyproxy/ratelimit's own
// configurations (testdata/reference: its test/config, examples and
// integration test) and the reference's verdict (testdata/reference/
// cases.txt): loaded (refusal ""), or refused with a message that holds
// refusal, as its test/config/config_test.go expects (the examples and
// the integration test's file load). Files are paths under
// testdata/reference.
type referenceCase struct {
	name    string
	files   []string
	merge   bool // MERGE_DOMAIN_CONFIG
	refusal string
}

// referenceCases reads testdata/reference/cases.txt.
func referenceCases(t *testing.T) []referenceCase {
	b, err := os.ReadFile("testdata/reference/cases.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []referenceCase
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "|")
		for len(f) < 5 {
			f = append(f, "")
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		out = append(out, referenceCase{name: f[0], merge: f[1] == "true", files: strings.Split(f[2], ","), refusal: f[4]})
	}
	return out
}

// TestReferenceConfigs imports each of the reference's own loads and
// expects its verdict; a loaded one's TOML is a configuration limitproxy
// accepts. Every file of testdata/reference is in some case.
func TestReferenceConfigs(t *testing.T) {
	used := map[string]bool{}
	cases := referenceCases(t)
	for _, rc := range cases {
		for _, f := range rc.files {
			used[f] = true
		}
		t.Run(rc.name, func(t *testing.T) {
			var in []Input
			for _, f := range rc.files {
				src, err := os.ReadFile(filepath.Join("testdata/reference", f))
				if err != nil {
					t.Fatal(err)
				}
				in = append(in, Input{Name: filepath.Base(f), Src: src})
			}
			res, err := Import(in, Options{MergeDomains: rc.merge})
			switch {
			case rc.refusal == "" && err != nil:
				t.Fatalf("the reference loads it; the import refuses it:\n%v", err)
			case rc.refusal != "" && err == nil:
				t.Fatalf("the reference refuses it (%s); the import loads it:\n%s", rc.refusal, res.TOML)
			case err != nil:
				if !strings.Contains(err.Error(), rc.refusal) || !strings.Contains(err.Error(), filepath.Base(rc.files[len(rc.files)-1])) {
					t.Errorf("refused with\n%v\nwant a message holding %q, of %s", err, rc.refusal, filepath.Base(rc.files[len(rc.files)-1]))
				}
			default:
				if _, err := config.Parse(rc.name+".toml", res.TOML); err != nil {
					t.Errorf("limitproxy refuses the import:\n%v\n%s", err, res.TOML)
				}
			}
		})
	}
	files, _ := filepath.Glob("testdata/reference/*/*/*.yaml")
	more, _ := filepath.Glob("testdata/reference/*/*/*/*.yaml")
	for _, f := range append(files, more...) {
		if rel, _ := filepath.Rel("testdata/reference", f); !used[rel] {
			t.Errorf("%s is in no case", rel)
		}
	}
	if len(used) < 20 || !slices.ContainsFunc(cases, func(rc referenceCase) bool { return rc.refusal == "" }) {
		t.Errorf("%d files used", len(used))
	}
}
