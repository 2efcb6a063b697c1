package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayCommand runs `limitproxy replay` on cmd/limitproxy/internal/replay's
// end-to-end fixture (the counts are worked out in its e2e_test.go): exit
// statuses as docs/cli.md says, flags before and after the logs.
func TestReplayCommand(t *testing.T) {
	const (
		cfg   = "internal/replay/testdata/per-ip.toml"
		cfg5  = "internal/replay/testdata/per-ip-5.toml"
		log   = "internal/replay/testdata/burst.log"
		wrong = "internal/replay/testdata/per-ip.toml" // not a log
	)
	svg := t.TempDir()
	for _, c := range []struct {
		args   []string
		code   int
		out    string // in stdout (code 0) or the error (else), runs of white space as one space
		stderr string // in stderr
		not    string // not in stdout, if not ""
	}{
		{[]string{"replay", "-config", cfg, "-raw-keys", log}, 0, "per-ip 470 206 0 264 0 0 0 0 top rejected keys (rejected and banned; raw): per-ip: 203.0.113.66 247 2001:db8:: 17", "", ""},
		{[]string{"replay", "-config", cfg, log, "-raw-keys", "-top", "1"}, 0, "203.0.113.66 247", "", "2001:db8::"},
		{[]string{"replay", "-config", cfg, "-against", cfg5, "-svg", svg, log}, 0, "decided differently: 79 of 470 requests", "", ""},
		{[]string{"replay", "-config", cfg, "-json", "-format", "nginx", log}, 0, `"rejected": 264`, "", ""},
		{[]string{"replay", "-config", cfg, "-format", "limitproxy", log}, 1, "no request replayed and 471 lines could not be read", "burst.log:1: ", ""},
		{[]string{"replay", "-config", cfg, "-nginx-format", "$remote_addr [$time_local] \"$request\" $status", wrong}, 1, "lines could not be read", "per-ip.toml:", ""},
		{[]string{"replay", "-config", cfg, "nope.log"}, 1, "open nope.log", "", ""},
		{[]string{"replay", "-config", "nope.toml", log}, 1, "nope.toml", "", ""},
		{[]string{"replay", log}, 2, "no -config PATH given", "", ""},
		{[]string{"replay", "-config", cfg}, 2, "no access log given", "", ""},
		{[]string{"replay", "-config", cfg, "-format", "apache", log}, 2, `-format "apache"`, "", ""},
		{[]string{"replay", "-config", cfg, "-xff", "middle", log}, 2, `-xff "middle"`, "", ""},
		{[]string{"replay", "-config", cfg, "-trusted", "10.0.0.0/8,bogus", log}, 2, `-trusted "bogus"`, "", ""},
		{[]string{"replay", "-config", cfg, "-top", "0", log}, 2, "-top 0", "", ""},
		{[]string{"replay", "-config", cfg, "-trusted-hops", "33", log}, 2, "-trusted-hops 33", "", ""},
		{[]string{"replay", "-config", cfg, "-nginx-format", "$a$b", log}, 2, "-nginx-format", "", ""},
		{[]string{"replay", "-config", cfg, "-bogus", log}, 2, "flag provided but not defined", "", ""},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), c.args, &stdout, &stderr)
		code := exitCode(err, &stderr)
		text := stdout.String()
		if err != nil {
			text = err.Error()
		}
		flat := strings.Join(strings.Fields(text), " ")
		if code != c.code || !strings.Contains(flat, c.out) || !strings.Contains(stderr.String(), c.stderr) || c.not != "" && strings.Contains(text, c.not) {
			t.Errorf("limitproxy %s: exit %d, %q, stderr %q; want exit %d with %q, stderr with %q",
				strings.Join(c.args, " "), code, text, stderr.String(), c.code, c.out, c.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(svg, "per-ip.svg")); err != nil {
		t.Errorf("-svg: %v", err)
	}
}

// TestReplayJSON: -json prints one JSON document on stdout and nothing
// else there; the plots' paths go to stderr.
func TestReplayJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "-json", "-svg", t.TempDir(), "-config", "internal/replay/testdata/per-ip.toml",
		"internal/replay/testdata/burst.log"}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Read     struct{ Replayed int64 }
		Policies []struct {
			Policy  string
			Results []struct{ Rejected int64 }
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, stdout.String())
	}
	if rep.Read.Replayed != 470 || len(rep.Policies) != 1 || rep.Policies[0].Results[0].Rejected != 264 {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(stderr.String(), "per-ip.svg") {
		t.Errorf("stderr %q: no plot", stderr.String())
	}
}
