package config

import (
	"strings"
	"testing"
)

// TestH2CSettings: [server] h2c is off and an upstream's protocol is
// "http1" unless set; "h2c" is read for http:// targets and refused for
// https:// ones, and any other protocol is refused.
func TestH2CSettings(t *testing.T) {
	const policy = `
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
`
	cfg, err := Load("../../testdata/policy/valid/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.H2C || cfg.Upstreams[0].Protocol != ProtocolHTTP1 {
		t.Errorf("defaults: h2c %v, protocol %q; want false and http1", cfg.Server.H2C, cfg.Upstreams[0].Protocol)
	}
	cfg, err = Parse("h2c.toml", []byte(`[server]
h2c = true
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9000"]
protocol = "h2c"
`+policy))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Server.H2C || cfg.Upstreams[0].Protocol != ProtocolH2C {
		t.Errorf("set: h2c %v, protocol %q; want true and h2c", cfg.Server.H2C, cfg.Upstreams[0].Protocol)
	}
	for protocol, want := range map[string]string{
		`"h2c"`:   "upstream[0].protocol: h2c is HTTP/2 without TLS, for http:// targets",
		`"http2"`: `upstream[0].protocol: "http2" is not one of "http1", "h2c"`,
	} {
		_, err := Parse("h2c.toml", []byte(`[[upstream]]
name = "app"
targets = ["https://127.0.0.1:9443"]
protocol = `+protocol+"\n"+policy))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("protocol = %s to an https:// target: %v, want %q", protocol, err, want)
		}
	}
}
