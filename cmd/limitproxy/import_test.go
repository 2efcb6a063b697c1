package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

const importTestdata = "internal/envoyimport/testdata/"

// TestImportCommand: import writes the TOML to -o (replacing the file
// whole), warns on stderr for what it notes, exits 1 with every error of
// a refused file and leaves -o alone, and 2 without files.
func TestImportCommand(t *testing.T) {
	dir := t.TempDir()
	out := writeFile(t, filepath.Join(dir, "rls.toml"), "# before\n")

	code, stdout, stderr := runCLI(t, "import", "-o", out, importTestdata+"valid/metrics.yaml")
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, `metrics.yaml:13:9: rate_limit name "route methods" is written "route-methods"`) {
		t.Errorf("stderr does not warn of the limit's name:\n%s", stderr)
	}
	if strings.Contains(stderr, "metadata") {
		t.Errorf("stderr warns of metadata, which changes no answer:\n%s", stderr)
	}
	got, _ := os.ReadFile(out)
	want, _ := os.ReadFile(importTestdata + "valid/metrics.toml")
	if gotS := strings.ReplaceAll(string(got), importTestdata+"valid/", ""); gotS != string(want) {
		t.Errorf("-o file differs from valid/metrics.toml:\n%s", got)
	}

	writeFile(t, out, "# before\n")
	code, _, stderr = runCLI(t, "import", "-o", out, importTestdata+"invalid/several_errors.yaml")
	if code != 1 || strings.Count(stderr, "duplicate descriptor composite key") != 2 {
		t.Errorf("refused file: exit %d, stderr:\n%s", code, stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != "# before\n" {
		t.Errorf("a refused import changed -o:\n%s", b)
	}
	if code, _, _ := runCLI(t, "import"); code != 2 {
		t.Errorf("import without files: exit %d, want 2", code)
	}
}

// TestImportOutputIsAccepted: every imported file of testdata/valid is a
// configuration limitproxy accepts, once its configuration has [rls].
func TestImportOutputIsAccepted(t *testing.T) {
	files, _ := filepath.Glob(importTestdata + "valid/*.toml")
	if len(files) == 0 {
		t.Fatal("no imported files")
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := config.Parse(f, src); err != nil {
			t.Errorf("%s refused:\n%v", f, err)
		}
	}
}

// TestImportEnv: -env reads the reference's settings that change its
// answers from the environment, as it reads them.
func TestImportEnv(t *testing.T) {
	t.Setenv("LIMIT_RESPONSE_HEADERS_ENABLED", "true")
	t.Setenv("LIMIT_REMAINING_HEADER", "X-Left")
	t.Setenv("SHADOW_MODE", "1")
	t.Setenv("QUOTA_MODE", "")
	t.Setenv("MERGE_DOMAIN_CONFIG", "T")
	t.Setenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
	t.Setenv("EXPIRATION_JITTER_MAX_SECONDS", "300")
	code, stdout, stderr := runCLI(t, "import", "-env", importTestdata+"valid/merge_a.yaml", importTestdata+"valid/merge_b.yaml")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{"response_headers = \"envoy\"", "remaining_header = \"X-Left\"", "shadow_mode = true", "stop_increment_when_over_limit = true", "expiration_jitter_max = \"300s\""} {
		if !strings.Contains(stdout, want+"  #") {
			t.Errorf("no %s in:\n%s", want, stdout)
		}
	}
	for _, unwanted := range []string{"limit_header", "reset_header", "quota_mode"} {
		if strings.Contains(stdout, unwanted) {
			t.Errorf("%s in:\n%s", unwanted, stdout)
		}
	}
	if _, err := config.Parse("env.toml", []byte(stdout)); err != nil {
		t.Errorf("refused: %v", err)
	}
	// Without -env, the environment is not read (and two files of one
	// domain are refused, as without MERGE_DOMAIN_CONFIG).
	if code, stdout, _ := runCLI(t, "import", importTestdata+"valid/merge_a.yaml", importTestdata+"valid/merge_b.yaml"); code != 1 || strings.Contains(stdout, "shadow_mode") {
		t.Errorf("without -env: exit %d, %s", code, stdout)
	}
	// EXPIRATION_JITTER_MAX_SECONDS of 0 (or unset) writes nothing: the
	// default; one that is not a number is refused.
	t.Setenv("EXPIRATION_JITTER_MAX_SECONDS", "0")
	if _, stdout, _ := runCLI(t, "import", "-env", importTestdata+"valid/merge_a.yaml"); strings.Contains(stdout, "expiration_jitter") {
		t.Errorf("EXPIRATION_JITTER_MAX_SECONDS=0: %s", stdout)
	}
	t.Setenv("EXPIRATION_JITTER_MAX_SECONDS", "5m")
	if code, _, stderr := runCLI(t, "import", "-env", importTestdata+"valid/merge_a.yaml"); code != 1 || !strings.Contains(stderr, "EXPIRATION_JITTER_MAX_SECONDS") {
		t.Errorf("EXPIRATION_JITTER_MAX_SECONDS=5m: exit %d, %s", code, stderr)
	}
	t.Setenv("EXPIRATION_JITTER_MAX_SECONDS", "")
	t.Setenv("SHADOW_MODE", "maybe")
	if code, _, stderr := runCLI(t, "import", "-env", importTestdata+"valid/merge_a.yaml"); code != 1 || !strings.Contains(stderr, "SHADOW_MODE") {
		t.Errorf("SHADOW_MODE=maybe: exit %d, %s", code, stderr)
	}
}

// TestImportJoinedKeys: -joined-keys writes count_keys = "joined", the
// reference's naming of its counts, and lookup = "joined", its lookup;
// without it the defaults stay.
func TestImportJoinedKeys(t *testing.T) {
	code, stdout, stderr := runCLI(t, "import", "-joined-keys", importTestdata+"valid/merge_a.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	cfg, err := config.Parse("joined.toml", []byte(stdout))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RLS.CountKeys != config.CountKeysJoined {
		t.Errorf("count_keys %q, want joined:\n%s", cfg.RLS.CountKeys, stdout)
	}
	if cfg.RLS.Lookup != config.LookupJoined {
		t.Errorf("lookup %q, want joined:\n%s", cfg.RLS.Lookup, stdout)
	}
	if _, stdout, _ := runCLI(t, "import", importTestdata+"valid/merge_a.yaml"); strings.Contains(stdout, "count_keys") || strings.Contains(stdout, "lookup =") {
		t.Errorf("count_keys or lookup written without -joined-keys:\n%s", stdout)
	}
}
