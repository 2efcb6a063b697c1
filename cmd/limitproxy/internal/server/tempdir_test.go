package server

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestTempDirChecked: a temp_dir that does not exist, or that the
// process cannot write, stops the start with an error naming it, rather
// than failing large request bodies and answers later with 500.
func TestTempDirChecked(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nowhere")
	readOnly := t.TempDir()
	os.Chmod(readOnly, 0o555)
	t.Cleanup(func() { os.Chmod(readOnly, 0o755) })
	cases := map[string]string{"missing": missing}
	if os.Geteuid() != 0 { // root writes anywhere
		cases["read-only"] = readOnly
	}
	for name, dir := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse("t.toml", []byte(`
[server]
listen = "127.0.0.1:0"
temp_dir = "`+dir+`"
[admin]
listen = ""
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9"]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
`))
			if err != nil {
				t.Fatal(err)
			}
			// Without the check the server would start: it is stopped
			// after a while, and returns nil.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err = serve(ctx, "", cfg, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), "server.temp_dir: "+dir) {
				t.Fatalf("start with temp_dir %s: %v, want an error naming it", dir, err)
			}
		})
	}
}
