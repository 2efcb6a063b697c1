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
		{"admin address taken", fmt.Sprintf("listen = %q\n", taken.Addr()), "", "admin.listen: listen tcp " + taken.Addr().String()},
		{"certificate", "listen = \"127.0.0.1:0\"\n", fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\nhttp_listen = \"127.0.0.1:%d\"\n",
			garbage, garbage, freePort(t)), "server.tls.cert_file"},
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

// TestStartReportsEveryProblem: a start that would fail on several things
// it opens (a certificate file missing, the token's variable unset, the
// overrides file's directory missing, temp_dir missing, a listen address
// that does not parse) reports them all in one error, each at its key's
// file:line:col, rather than one per try; Preflight, which `check` runs,
// reports the same.
func TestStartReportsEveryProblem(t *testing.T) {
	t.Setenv("LIMITPROXY_TEST_UNSET_TOKEN", "")
	dir := t.TempDir()
	text := fmt.Sprintf(`[server]
listen = "127.0.0.1:%d"
temp_dir = %q
[server.tls]
mode = "files"
cert_file = %q
key_file = %q
[admin]
listen = "127.0.0.1:0"
token_env = "LIMITPROXY_TEST_UNSET_TOKEN"
[store]
overrides_file = %q
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "p"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
`, freePort(t), filepath.Join(dir, "no-tmp"), filepath.Join(dir, "missing.crt"), filepath.Join(dir, "missing.key"), filepath.Join(dir, "no-dir", "overrides.json"))
	cfg, err := config.Parse("all.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"all.toml:3:1: server.temp_dir: " + filepath.Join(dir, "no-tmp"),
		"all.toml:6:1: server.tls.cert_file: open " + filepath.Join(dir, "missing.crt") + ": no such file or directory",
		"all.toml:7:1: server.tls.key_file: open " + filepath.Join(dir, "missing.key") + ": no such file or directory",
		"all.toml:10:1: admin.token_env: environment variable LIMITPROXY_TEST_UNSET_TOKEN is empty or unset",
		"all.toml:12:1: store.overrides_file: ",
	}
	started := serve(context.Background(), "", cfg, io.Discard, nil)
	checked := Preflight(cfg, PreflightOptions{})
	for name, err := range map[string]error{"start": started, "Preflight": checked} {
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(want) {
			t.Errorf("%s: %d errors, want %d:\n%v", name, len(lines), len(want), err)
			continue
		}
		for i, w := range want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%s: error %d = %q, want it to begin %q", name, i, lines[i], w)
			}
		}
	}
}

// TestPreflightBind: with Bind, a listen address already taken is an
// error at its key; without, only its syntax is checked.
func TestPreflightBind(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	text := fmt.Sprintf("[server]\nlisten = %q\n[admin]\nlisten = \"\"\n[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n[[policy]]\nname = \"p\"\nupstream = \"app\"\n[[policy.limits]]\nalgorithm = \"token_bucket\"\nrate = \"1/s\"\n", taken.Addr())
	cfg, err := config.Parse("bind.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := Preflight(cfg, PreflightOptions{}); err != nil {
		t.Errorf("without Bind: %v", err)
	}
	err = Preflight(cfg, PreflightOptions{Bind: true})
	if err == nil || !strings.HasPrefix(err.Error(), "bind.toml:2:1: server.listen: listen tcp "+taken.Addr().String()) {
		t.Errorf("with Bind: %v", err)
	}
}

// TestStartAddressesTaken: a start whose proxy and admin addresses are
// both taken fails with both, each at its key's position (as check -bind
// reports them), not with the first alone and unpositioned.
func TestStartAddressesTaken(t *testing.T) {
	var taken [2]net.Listener
	for i := range taken {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		taken[i] = ln
	}
	text := fmt.Sprintf("[server]\nlisten = %q\n[admin]\nlisten = %q\n[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n[[policy]]\nname = \"p\"\nupstream = \"app\"\n[[policy.limits]]\nalgorithm = \"token_bucket\"\nrate = \"1/s\"\n", taken[0].Addr(), taken[1].Addr())
	cfg, err := config.Parse("taken.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Path: "taken.toml", Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Run(t.Context())
	want := []string{
		"taken.toml:2:1: server.listen: listen tcp " + taken[0].Addr().String(),
		"taken.toml:4:1: admin.listen: listen tcp " + taken[1].Addr().String(),
	}
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != len(want) {
		t.Fatalf("start: %v\nwant %d errors", err, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want it to begin %q", i, lines[i], w)
		}
	}
}

// TestPreflightPortAlone: a listen address that is a port alone, the
// commonest slip, is answered with the address to write.
func TestPreflightPortAlone(t *testing.T) {
	text := "[server]\nlisten = \"8080\"\n[admin]\nlisten = \"\"\n[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n[[policy]]\nname = \"p\"\nupstream = \"app\"\n[[policy.limits]]\nalgorithm = \"token_bucket\"\nrate = \"1/s\"\n"
	cfg, err := config.Parse("port.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := `port.toml:2:1: server.listen: "8080" is a port alone: write ":8080" for every address, or "127.0.0.1:8080" for loopback only`
	if err := Preflight(cfg, PreflightOptions{}); err == nil || err.Error() != want {
		t.Errorf("Preflight: %v\nwant %s", err, want)
	}
}
