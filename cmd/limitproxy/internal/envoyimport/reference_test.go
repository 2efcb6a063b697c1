package envoyimport

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// ReferenceCase is one load of envoyproxy/ratelimit's own configurations
// (testdata/reference, its test/config, examples and integration test)
// and the reference's verdict: loaded (Refusal ""), or refused with a
// message that holds Refusal, as its test/config/config_test.go expects
// (the examples and the integration test's file load). Files are paths
// under testdata/reference.
type ReferenceCase struct {
	Name    string
	Files   []string
	Merge   bool // MERGE_DOMAIN_CONFIG
	Refusal string
}

// ReferenceCases are the reference's own loads.
var ReferenceCases = []ReferenceCase{
	{Name: "basic", Files: []string{"test/config/basic_config.yaml"}},
	{Name: "merge", Files: []string{"test/config/merge_domain_key1.yaml", "test/config/merge_domain_key2.yaml"}, Merge: true},
	{Name: "shadow_mode", Files: []string{"test/config/shadowmode_config.yaml"}},
	{Name: "wildcard", Files: []string{"test/config/wildcard.yaml"}},
	{Name: "share_threshold", Files: []string{"test/config/share_threshold.yaml"}},
	{Name: "metadata", Files: []string{"test/config/metadata.yaml"}},
	{Name: "duplicate_domain_alone", Files: []string{"test/config/duplicate_domain.yaml"}},
	{Name: "example_config", Files: []string{"examples/ratelimit/config/config.yaml"}},
	{Name: "example", Files: []string{"examples/ratelimit/config/example.yaml"}},
	{Name: "examples_together", Files: []string{"examples/ratelimit/config/config.yaml", "examples/ratelimit/config/example.yaml"}},
	{Name: "integration_reload", Files: []string{"test/integration/reload.yaml"}},
	{Name: "empty_domain", Files: []string{"test/config/empty_domain.yaml"}, Refusal: "empty_domain.yaml: config file cannot have empty domain"},
	{Name: "duplicate_domain", Files: []string{"test/config/basic_config.yaml", "test/config/duplicate_domain.yaml"}, Refusal: "duplicate_domain.yaml:1:1: duplicate domain 'test-domain' in config file"},
	{Name: "empty_key", Files: []string{"test/config/empty_key.yaml"}, Refusal: "empty_key.yaml:3:5: descriptor has empty key"},
	{Name: "duplicate_key", Files: []string{"test/config/duplicate_key.yaml"}, Refusal: "duplicate descriptor composite key 'test-domain.key1_value1'"},
	{Name: "duplicate_key_merge", Files: []string{"test/config/merge_domain_key1.yaml", "test/config/merge_domain_key1.yaml"}, Merge: true, Refusal: "duplicate descriptor composite key 'test-domain.key1_value1'"},
	{Name: "bad_limit_unit", Files: []string{"test/config/bad_limit_unit.yaml"}, Refusal: "invalid rate limit unit 'foo'"},
	{Name: "replaces_self", Files: []string{"test/config/replaces_self.yaml"}, Refusal: "replaces should not contain name of same descriptor"},
	{Name: "replaces_empty", Files: []string{"test/config/replaces_empty.yaml"}, Refusal: "should not have an empty replaces entry"},
	{Name: "bad_yaml", Files: []string{"test/config/bad_yaml.yaml"}, Refusal: "bad_yaml.yaml:2:1: error loading config file: yaml: line 2: found unexpected end of stream"},
	{Name: "misspelled_key", Files: []string{"test/config/misspelled_key.yaml"}, Refusal: "config error, unknown key 'ratelimit'"},
	{Name: "misspelled_key2", Files: []string{"test/config/misspelled_key2.yaml"}, Refusal: "config error, unknown key 'requestsperunit'"},
	{Name: "non_string_key", Files: []string{"test/config/non_string_key.yaml"}, Refusal: "non_string_key.yaml:1:1: config error, key is not of type string: 0.25"},
	{Name: "non_map_list", Files: []string{"test/config/non_map_list.yaml"}, Refusal: "non_map_list.yaml:3:5: config error, yaml file contains list of type other than map: a"},
	{Name: "unlimited_with_unit", Files: []string{"test/config/unlimited_with_unit.yaml"}, Refusal: "should not specify rate limit unit when unlimited"},
}

// TestReferenceConfigs imports each of the reference's own loads and
// expects its verdict; a loaded one's TOML is a configuration limitproxy
// accepts. Every file of testdata/reference is in some case.
func TestReferenceConfigs(t *testing.T) {
	used := map[string]bool{}
	for _, rc := range ReferenceCases {
		for _, f := range rc.Files {
			used[f] = true
		}
		t.Run(rc.Name, func(t *testing.T) {
			var in []Input
			for _, f := range rc.Files {
				src, err := os.ReadFile(filepath.Join("testdata/reference", f))
				if err != nil {
					t.Fatal(err)
				}
				in = append(in, Input{Name: filepath.Base(f), Src: src})
			}
			res, err := Import(in, Options{MergeDomains: rc.Merge})
			switch {
			case rc.Refusal == "" && err != nil:
				t.Fatalf("the reference loads it; the import refuses it:\n%v", err)
			case rc.Refusal != "" && err == nil:
				t.Fatalf("the reference refuses it (%s); the import loads it:\n%s", rc.Refusal, res.TOML)
			case err != nil:
				if !strings.Contains(err.Error(), rc.Refusal) {
					t.Errorf("refused with\n%v\nwant a message holding %q", err, rc.Refusal)
				}
			default:
				if _, err := config.Parse(rc.Name+".toml", res.TOML); err != nil {
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
	if len(used) < 20 || !slices.ContainsFunc(ReferenceCases, func(rc ReferenceCase) bool { return rc.Refusal == "" }) {
		t.Errorf("%d files used", len(used))
	}
}
