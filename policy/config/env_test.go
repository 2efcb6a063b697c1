package config

import (
	"strings"
	"testing"
	"time"
)

// TestExpandEnv: {$NAME} and {$NAME:default} are replaced, {$$ is a
// literal {$, what is not a placeholder stays as written, and an unset
// variable without a default is an error naming it.
func TestExpandEnv(t *testing.T) {
	env := map[string]string{"HOST": "db.internal", "EMPTY": "", "A_1": "x"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, c := range []struct{ in, out, err string }{
		{"plain", "plain", ""},
		{"{$HOST}:6379", "db.internal:6379", ""},
		{"{$NOPE:127.0.0.1:6379}", "127.0.0.1:6379", ""},
		{"{$HOST:fallback}", "db.internal", ""},
		{"[{$EMPTY}]", "[]", ""},
		{"{$EMPTY:d}", "", ""},
		{"{$A_1}{$A_1}", "xx", ""},
		{"{$$HOST}", "{$HOST}", ""},
		{"a{$$}b", "a{$}b", ""},
		{"{$}", "{$}", ""},
		{"{$1X}", "{$1X}", ""},
		{"{$HOST", "{$HOST", ""},
		{"{$HOST:open", "{$HOST:open", ""},
		{"^/a{$x", "^/a{$x", ""},
		{"{$NOPE}", "", "environment variable NOPE is unset"},
		{"ok {$HOST} {$NOPE}", "", "environment variable NOPE is unset"},
	} {
		got, err := expandEnv(c.in, lookup)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("expandEnv(%q) = %q, %v; want error %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.out):
			t.Errorf("expandEnv(%q) = %q, %v; want %q", c.in, got, err, c.out)
		}
	}
}

// TestParseEnv: placeholders apply to every string value (strings, arrays
// of strings, durations, rates, header values), a variable's value is
// never TOML (it cannot add a key), and every unset variable without a
// default is an error at its key's file:line:col, all of them at once.
func TestParseEnv(t *testing.T) {
	t.Setenv("LP_LISTEN", "127.0.0.1:8181")
	t.Setenv("LP_TARGET", "http://10.0.0.9:80")
	t.Setenv("LP_RATE", "7/s")
	t.Setenv("LP_TIMEOUT", "3s")
	t.Setenv("LP_TRICK", "x\"\nlisten = \"0.0.0.0:1")
	src := `[server]
listen = "{$LP_LISTEN}"
[log]
level = "{$LP_LEVEL:warn}"
[[upstream]]
name = "app"
targets = ["{$LP_TARGET}"]
timeout = "{$LP_TIMEOUT}"
[[policy]]
name = "p"
upstream = "app"
match = { headers = { X-Tenant = "{$LP_TRICK}" } }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "{$LP_RATE}"
  burst = 1
`
	cfg, err := Parse("env.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Listen != "127.0.0.1:8181" || cfg.Log.Level != "warn" || cfg.Upstreams[0].Targets[0].String() != "http://10.0.0.9:80" ||
		cfg.Upstreams[0].Timeout != 3*time.Second || !strings.Contains(cfg.Policies[0].Limits[0].String(), "7") {
		t.Errorf("expanded: listen %q level %q target %v timeout %v rate %v", cfg.Server.Listen, cfg.Log.Level,
			cfg.Upstreams[0].Targets[0], cfg.Upstreams[0].Timeout, cfg.Policies[0].Limits[0])
	}

	bad := `[server]
listen = "{$LP_UNSET_1}"
[[upstream]]
name = "app"
targets = ["http://a", "{$LP_UNSET_2}"]
`
	_, err = Parse("bad.toml", []byte(bad))
	want := []string{
		`bad.toml:2:1: server.listen: environment variable LP_UNSET_1 is unset`,
		`bad.toml:5:1: upstream[0].targets: element 1: environment variable LP_UNSET_2 is unset`,
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v\nwant it to hold %q", err, w)
		}
	}

	// A placeholder where a number goes is a string, and stays one: the
	// error names what was written, not what it expanded to.
	t.Setenv("LP_LIMIT", "5")
	_, err = Parse("num.toml", []byte("[store]\nmax_keys = \"{$LP_LIMIT}\"\n"))
	if w := `num.toml:2:1: store.max_keys: must be an integer, not the string "{$LP_LIMIT}" ({$NAME} placeholders are replaced in string values only; an integer cannot take one)`; err == nil || !strings.HasPrefix(err.Error(), w+"\n") {
		t.Errorf("placeholder for a number: %v\nwant %s", err, w)
	}
}
