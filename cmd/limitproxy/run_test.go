package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout (code 0) or the error (else)
	}{
		{[]string{"check", "-config", "../../config.example.toml"}, 0, "ok: 5 policies, 11 limits, 1 upstream, listen :8080"},
		{[]string{"check", "-config", "../../testdata/policy/invalid/cross_field.toml"}, 1, "cross_field.toml:11:1: policy[0].upstream: unknown upstream \"backend\""},
		{[]string{"check", "-config", "/nonexistent.toml"}, 1, "/nonexistent.toml: open /nonexistent.toml"},
		{[]string{"check"}, 2, "no -config PATH given"},
		{[]string{"-config"}, 2, "flag needs an argument"},
		{[]string{"-config", "x.toml", "extra"}, 2, "unexpected argument"},
		{[]string{"version"}, 0, "limitproxy dev (go1."},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), c.args, &stdout, &stderr)
		code := exitCode(err, &stderr)
		text := stdout.String()
		if err != nil {
			text = err.Error()
		}
		if code != c.code || !strings.Contains(text, c.out) {
			t.Errorf("limitproxy %s: exit %d, %q; want exit %d with %q", strings.Join(c.args, " "), code, text, c.code, c.out)
		}
	}
}
