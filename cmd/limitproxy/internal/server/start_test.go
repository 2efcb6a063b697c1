package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestStartFailureReleases: a start that fails at a later step (the admin
// token unset, the admin address taken, a certificate that does not
// load) returns its error and releases what the earlier steps opened:
// the proxy's listener and http_listen's are free again at once.
func TestStartFailureReleases(t *testing.T) {
	t.Setenv("LIMITPROXY_TEST_UNSET_TOKEN", "")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate\n"), 0o600)
	for _, c := range []struct {
		name, admin, tls, want string
	}{
		{"token unset", "listen = \"127.0.0.1:0\"\ntoken_env = \"LIMITPROXY_TEST_UNSET_TOKEN\"\n", "", "admin.token_env"},
		{"admin address taken", fmt.Sprintf("listen = %q\n", taken.Addr()), "", "admin: listen"},
		{"certificate", "listen = \"127.0.0.1:0\"\n", fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\nhttp_listen = \"127.0.0.1:%d\"\n",
			garbage, garbage, freePort(t)), "server.tls: cert_file"},
	} {
		proxyAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		text := configText("http://127.0.0.1:1", 1, "1/s", c.tls)
		text = strings.Replace(text, "listen = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
			fmt.Sprintf("listen = %q\n[admin]\n%s", proxyAddr, c.admin), 1)
		cfg, err := config.Parse("start.toml", []byte(text))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = serve(context.Background(), "", cfg, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: serve = %v, want an error beginning %q", c.name, err, c.want)
		}
		addrs := []string{proxyAddr}
		if cfg.Server.TLS != nil {
			addrs = append(addrs, cfg.Server.TLS.HTTPListen)
		}
		for _, a := range addrs {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Errorf("%s: %s still held after the failed start: %v", c.name, a, err)
				continue
			}
			ln.Close()
		}
	}
}
