package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaBeyond lists the invalid files whose every error is one a JSON
// Schema cannot express, and why. Everything else in
// testdata/policy/invalid must be refused by config.schema.json too.
var schemaBeyond = map[string]string{
	// Not TOML: refused by the TOML parser before any schema applies.
	"syntax.toml": "not TOML (the decoder refuses it first)",
	// Every limit of a policy under one key on Redis Cluster: equality of
	// two arrays of one document's objects, which JSON Schema has no way
	// to compare.
	"cluster_keys.toml": "its one error compares the keys of two limits of a policy",
}

// compileSchema compiles config.schema.json with a real validator
// (draft 2020-12), the formats left as annotations as editors treat them.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("config.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tomlAsJSON decodes a TOML file into the generic value a JSON decoder
// would give for the same document: what an editor's schema check sees.
func tomlAsJSON(t *testing.T, path string) (any, error) {
	t.Helper()
	var m map[string]any
	if _, err := toml.DecodeFile(path, &m); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

// TestSchemaAccepts: config.example.toml, the configurations of deploy/
// and every file of testdata/policy/valid pass the schema.
func TestSchemaAccepts(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../../testdata/policy/valid/*.toml")
	files = append(files, "../../config.example.toml", "../../deploy/container.toml", "../../deploy/kubernetes/limitproxy.toml")
	for _, f := range files {
		v, err := tomlAsJSON(t, f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := s.Validate(v); err != nil {
			t.Errorf("%s: refused by the schema: %v", f, err)
		}
	}
}

// TestSchemaRefuses: every file of testdata/policy/invalid is refused by
// the schema, but those listed in schemaBeyond, which it must accept (a
// listed file the schema refuses is listed wrongly).
func TestSchemaRefuses(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../../testdata/policy/invalid/*.toml")
	if len(files) == 0 {
		t.Fatal("no invalid test files")
	}
	for _, f := range files {
		name := filepath.Base(f)
		v, err := tomlAsJSON(t, f)
		_, beyond := schemaBeyond[name]
		switch {
		case err != nil && name == "syntax.toml":
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case beyond && s.Validate(v) != nil:
			t.Errorf("%s: listed as beyond the schema, yet refused by it: %v", name, s.Validate(v))
		case !beyond && s.Validate(v) == nil:
			t.Errorf("%s: accepted by the schema", name)
		}
	}
}
