package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDashboardMetrics: every limitproxy metric the Grafana dashboard
// queries is one docs/metrics.md lists (and the server's and proxy's
// metric tests scrape those from the binary), so they cannot drift apart.
func TestDashboardMetrics(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile("(?m)^\\| `(limitproxy_[a-z_]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(documented) < 20 {
		t.Fatalf("docs/metrics.md lists only %d metrics", len(documented))
	}
	raw, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Name string } }
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	known := map[string]bool{}
	for _, m := range documented {
		n := m[1]
		known[n] = true
		for _, s := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(n, "_seconds") {
				known[n+s] = true
			}
		}
	}
	name := regexp.MustCompile(`\blimitproxy_[a-z_]+\b`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, n := range name.FindAllString(tg.Expr, -1) {
				if !known[n] {
					t.Errorf("panel %q queries %s, which limitproxy does not export", p.Title, n)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has only %d queries", queries)
	}

	// Every query of every panel follows the dashboard's variables: job
	// and instance always, policy where the metric has a policy label
	// (docs/metrics.md's labels column).
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"job", "instance", "policy"} {
		if !vars[v] {
			t.Errorf("the dashboard has no $%s variable", v)
		}
	}
	byPolicy := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(limitproxy_[a-z_]+)` \\| [a-z]+ \\| ([^|]*)\\|").FindAllStringSubmatch(string(doc), -1) {
		if strings.Contains(m[2], "`policy`") {
			byPolicy[m[1]] = true
		}
	}
	if !byPolicy["limitproxy_requests_total"] {
		t.Fatal("docs/metrics.md's table gives limitproxy_requests_total no policy label: the labels column was not read")
	}
	selector := regexp.MustCompile(`\b((?:limitproxy|process|go)_[a-z_]+)(\{[^}]*\})?`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				base := m[1]
				for _, s := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(base, s); ok && strings.HasSuffix(b, "_seconds") {
						base = b
					}
				}
				want := []string{`job=~"$job"`, `instance=~"$instance"`}
				if byPolicy[base] {
					want = append(want, `policy=~"$policy"`)
				}
				for _, w := range want {
					if !strings.Contains(m[2], w) {
						t.Errorf("panel %q: %s%s lacks %s", p.Title, m[1], m[2], w)
					}
				}
			}
		}
	}
}

// TestSystemdUnitHardened: the systemd unit stays sandboxed: the exposure
// systemd-analyze security computes for it is at most 2.0 ("OK"; it was
// 6.0 "MEDIUM" before hardening). systemd-analyze comes with systemd,
// which this machine image and any systemd host have.
func TestSystemdUnitHardened(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed: %v", err)
	}
	unit, _ := filepath.Abs("../../deploy/limitproxy.service")
	cmd := exec.Command(bin, "security", "--offline=true", unit)
	cmd.Dir = t.TempDir()
	out, _ := cmd.CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for limitproxy\.service: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	if level > 2.0 {
		t.Errorf("exposure %s %s, want at most 2.0 (OK)", m[1], m[2])
	}
}

// unitLines returns the values of key= in the systemd unit, in order.
func unitLines(t *testing.T, key string) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/limitproxy.service")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestSystemdUnitReload: the unit reloads with `limitproxy reload` on the
// file it serves, which this command line accepts and which reports the
// outcome (exit 1 for a refused file, which fails `systemctl reload`),
// and reads its secrets from an optional EnvironmentFile.
func TestSystemdUnitReload(t *testing.T) {
	start, reload := unitLines(t, "ExecStart"), unitLines(t, "ExecReload")
	if len(start) != 1 || len(reload) != 1 {
		t.Fatalf("ExecStart %q, ExecReload %q: want one of each", start, reload)
	}
	s, r := strings.Fields(start[0]), strings.Fields(reload[0])
	if len(s) != 3 || s[1] != "-config" || len(r) != 4 || r[0] != s[0] || r[1] != "reload" || r[2] != "-config" || r[3] != s[2] {
		t.Errorf("ExecReload=%s: want %s reload -config %s", reload[0], s[0], s[2])
	}
	if env := unitLines(t, "EnvironmentFile"); len(env) != 1 || !strings.HasPrefix(env[0], "-/etc/") {
		t.Errorf("EnvironmentFile=%q: want one, optional (-), under /etc", env)
	}

	// The unit's command lines, on a test file, against a running server.
	t.Setenv("LIMITPROXY_TEST_UNIT_TOKEN", "t0ken")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("listen = %q\ntoken_env = \"LIMITPROXY_TEST_UNIT_TOKEN\"\n", ln.Addr())
	ln.Close()
	path := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), minimalConfig(admin, ""))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() { done <- run(ctx, []string{s[1], path}, &logs, &logs) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	args := []string{r[1], r[2], path}
	var code int
	// The server is up once health answers: bounded, 5 s at most.
	for begin := time.Now(); time.Since(begin) < 5*time.Second; time.Sleep(10 * time.Millisecond) {
		if code, _, _ = runCLI(t, "health", "-config", path); code == 0 {
			break
		}
	}
	if code, out, errOut := runCLI(t, args...); code != 0 || !strings.HasPrefix(out, "reload applied") {
		t.Errorf("ExecReload on a good file: exit %d, %q %q", code, out, errOut)
	}
	writeFile(t, path, minimalConfig(admin, "bogus = 1\n"))
	if code, _, errOut := runCLI(t, args...); code != 1 || !strings.Contains(errOut, path+":3:1: server.bogus: unknown key") {
		t.Errorf("ExecReload on a refused file: exit %d, %q; want 1 with the error", code, errOut)
	}
}

// TestMakeInstall: `make install` puts the binary where the systemd unit
// runs it, the unit where systemd reads it and, unless one is there, the
// README's starter configuration as /etc/limitproxy/config.toml, which the
// installed binary checks; `systemd-analyze verify` passes on the staged
// root (DESTDIR, with this host's systemd units), which it does not on a
// root without the binary; a second install keeps an edited
// configuration.
func TestMakeInstall(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed: %v", err)
	}
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root := t.TempDir()
	install := func() {
		t.Helper()
		cmd := exec.Command("make", "-s", "install", "DESTDIR="+root)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
	}
	install()
	os.Remove("../../limitproxy") // make build's output, in the tree
	// The host's own units (sysinit.target and the rest), as a root has.
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/system")); err != nil {
		t.Fatal(err)
	}
	if out, err := verifyUnit(analyze, root); err != nil {
		t.Errorf("systemd-analyze verify of the installed unit: %v\n%s", err, out)
	}
	bin := filepath.Join(root, "usr/local/bin/limitproxy")
	conf := filepath.Join(root, "etc/limitproxy/config.toml")
	if out, err := exec.Command(bin, "check", "-config", conf).CombinedOutput(); err != nil {
		t.Errorf("the installed binary's check of the installed configuration: %v\n%s", err, out)
	}
	readme, _ := os.ReadFile("../../README.md")
	installed, _ := os.ReadFile(conf)
	starter := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(readme)
	if starter == nil || !strings.HasSuffix(string(installed), string(starter[1])) {
		t.Errorf("the installed configuration is not the README's starter:\n%s", installed)
	}
	// Without the binary, verify fails: the check above can fail.
	os.Remove(bin)
	if out, err := verifyUnit(analyze, root); err == nil {
		t.Errorf("systemd-analyze verify passed without the binary:\n%s", out)
	}
	// An edited configuration is kept.
	os.WriteFile(conf, []byte("# mine\n"), 0o644)
	install()
	os.Remove("../../limitproxy")
	if b, _ := os.ReadFile(conf); string(b) != "# mine\n" {
		t.Errorf("a second install replaced the configuration: %q", b)
	}
}

// verifyUnit runs systemd-analyze verify on the unit installed under
// root.
func verifyUnit(analyze, root string) ([]byte, error) {
	cmd := exec.Command(analyze, "verify", "--root="+root, "limitproxy.service")
	cmd.Dir = root
	return cmd.CombinedOutput()
}
