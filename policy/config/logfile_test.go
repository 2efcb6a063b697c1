package config

import (
	"strings"
	"testing"
)

// TestLogFileKeys: [log] file and access_file are taken as given; an
// empty one, and an access_file that is the file, are errors at their
// keys.
func TestLogFileKeys(t *testing.T) {
	base := "[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n[[policy]]\nname = \"p\"\nupstream = \"app\"\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1h\"\n"
	cfg, err := Parse("c.toml", []byte("[log]\nfile = \"/var/log/l.log\"\naccess_file = \"/var/log/a.log\"\n"+base))
	if err != nil || cfg.Log.File != "/var/log/l.log" || cfg.Log.AccessFile != "/var/log/a.log" {
		t.Fatalf("%v %+v", err, cfg.Log)
	}
	for src, want := range map[string]string{
		"[log]\nfile = \"\"\n":                                 `c.toml:2:1: log.file: is empty: leave it out to log to stderr`,
		"[log]\nfile = \"/x.log\"\naccess_file = \"/x.log\"\n": `c.toml:3:1: log.access_file: is log.file: leave it out to write the access log there`,
	} {
		if _, err := Parse("c.toml", []byte(src+base)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", src, err, want)
		}
	}
}
