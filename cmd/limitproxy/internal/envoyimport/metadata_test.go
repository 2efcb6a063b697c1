package envoyimport

import (
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestMetadata: a rate_limit's descriptor's metadata is written as its
// policy's metadata, which the configuration reads back as the Struct
// the reference's parseMetadata makes of the YAML (convertMap: keys as
// fmt's %v; yaml's numbers as numbers); -env's RESPONSE_DYNAMIC_METADATA
// writes dynamic_metadata, its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// stop_increment_when_over_limit.
func TestMetadata(t *testing.T) {
	meta := `
        team: "pay \"ments\""
        n: 3
        f: 2.5
        big: 1e300
        on: true
        1: one
        list: [a, 2, [x], {k: v}]
        nested: {deep: {deeper: -7}}
`
	src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata:" + meta
	r, err := Import([]Input{{Name: "m.yaml", Src: []byte(src)}}, Options{Settings: Settings{DynamicMetadata: true, StopIncrement: true}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("m.toml", r.TOML)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.TOML)
	}
	if !cfg.RLS.DynamicMetadata || !cfg.RLS.StopIncrementWhenOverLimit {
		t.Errorf("[rls] %+v", cfg.RLS)
	}
	var y map[string]interface{} // as the reference's YamlDescriptor.Metadata
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(meta, "\n        ", "\n")), &y); err != nil {
		t.Fatal(err)
	}
	want, err := structpb.NewStruct(stringKeys(y).(map[string]interface{}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := structpb.NewStruct(cfg.Policies[0].RLS.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("metadata:\n got %v\nwant %v\n%s", got, want, r.TOML)
	}
}

// TestMetadataDropped: the reference's GetLimit answers without metadata
// a rate_limit whose descriptor has detailed_metric and nothing below
// (its NewRateLimit has none): the import writes none there. Under a
// value_to_metric descriptor the call decides (a value found through a
// wildcard or a bare key drops it): the import writes the metadata and
// the policy's value_to_metric entries, which limitproxy decides with.
func TestMetadataDropped(t *testing.T) {
	for _, c := range []struct {
		yaml     string
		sent     int    // policies with metadata
		toMetric string // their value_to_metric lines
	}{
		{"  - key: k\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata: {a: 1}\n", 0, ""},
		{"  - key: k\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata: {a: 1}\n    descriptors:\n      - key: j\n        rate_limit: {unit: minute, requests_per_unit: 1}\n", 1, ""},
		{"  - key: k\n    value: \"x*\"\n    value_to_metric: true\n    descriptors:\n      - key: j\n        rate_limit: {unit: minute, requests_per_unit: 1}\n        metadata: {a: 1}\n", 2, `value_to_metric = ["k"]value_to_metric = ["k"]`},                                                                      // the literal copy's and the wildcard's
		{"  - key: k\n    value_to_metric: true\n    descriptors:\n      - key: k\n        share_threshold: true\n        value_to_metric: true\n        value: \"*\"\n        rate_limit: {unit: minute, requests_per_unit: 1}\n        metadata: {a: 1}\n", 2, `value_to_metric = ["k#1"]value_to_metric = ["k#1"]`}, // share_threshold's key is its pattern's
		{"  - key: k\n    value: \"x\"\n    value_to_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata: {a: 1}\n", 1, `value_to_metric = ["k"]`},
		{"  - key: k\n    value: \"x\"\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata: {a: 1}\n", 1, ""},
	} {
		r, err := Import([]Input{{Name: "m.yaml", Src: []byte("domain: d\ndescriptors:\n" + c.yaml)}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sent := strings.Count(string(r.TOML), "\nmetadata = "); sent != c.sent {
			t.Errorf("%d policies with metadata, want %d:\n%s\n%s", sent, c.sent, c.yaml, r.TOML)
		}
		var lines []string
		for _, l := range strings.Split(string(r.TOML), "\n") {
			if v, _, ok := strings.Cut(l, "  #"); ok && strings.HasPrefix(l, "value_to_metric = ") {
				lines = append(lines, v)
			}
		}
		if got := strings.Join(lines, ""); got != c.toMetric {
			t.Errorf("value_to_metric %q, want %q:\n%s\n%s", got, c.toMetric, c.yaml, r.TOML)
		}
		if _, err := config.Parse("m.toml", r.TOML); err != nil {
			t.Errorf("%v\n%s", err, r.TOML)
		}
	}
}
