package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server"
	"github.com/limitproxy/limitproxy/policy/config"
)

// runCLI runs the command line args and returns its exit status and what
// it printed on stdout and stderr (the error included, as main prints it).
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	code = exitCode(err, &errOut)
	return code, out.String(), errOut.String()
}

// minimalConfig is a configuration that serves, with extra inserted
// after its [server] table's listen line.
func minimalConfig(admin, extra string) string {
	return fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
%s[admin]
%s[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "p"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
`, extra, admin)
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckOpensWhatServingOpens: `check` finds, all at once and each at
// its key's position, what would stop the start: a certificate file
// missing, the token's variable unset, the key hash's secret too short,
// the overrides file's directory missing; and an unset variable of a {$NAME} placeholder. A start of the
// same file reports the same list.
func TestCheckOpensWhatServingOpens(t *testing.T) {
	t.Setenv("LIMITPROXY_TEST_CLI_TOKEN", "")
	t.Setenv("LIMITPROXY_TEST_CLI_HASH", "fifteen bytes..")
	dir := t.TempDir()
	text := minimalConfig(`listen = "127.0.0.1:0"
token_env = "LIMITPROXY_TEST_CLI_TOKEN"
key_hash_secret_env = "LIMITPROXY_TEST_CLI_HASH"
[store]
overrides_file = "`+filepath.Join(dir, "no-dir", "ov.json")+`"
`, `[server.tls]
mode = "files"
cert_file = "`+filepath.Join(dir, "cert.pem")+`"
key_file = "`+filepath.Join(dir, "key.pem")+`"
`)
	path := writeFile(t, filepath.Join(dir, "c.toml"), text)
	code, stdout, stderr := runCLI(t, "check", "-config", path)
	want := []string{
		path + ":5:1: server.tls.cert_file: open " + filepath.Join(dir, "cert.pem"),
		path + ":6:1: server.tls.key_file: open " + filepath.Join(dir, "key.pem"),
		path + ":9:1: admin.token_env: environment variable LIMITPROXY_TEST_CLI_TOKEN is empty or unset",
		path + ":10:1: admin.key_hash_secret_env: environment variable LIMITPROXY_TEST_CLI_HASH is unset or shorter than 16 bytes",
		path + ":12:1: store.overrides_file: ",
	}
	wantCheckErrors(t, code, stdout, stderr, want)
	cfg, err := config.LoadWith(path, server.LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := server.New(cfg, server.Options{Path: path, Stderr: &bytes.Buffer{}})
	random := regexp.MustCompile(`\.tmp[0-9]+`) // the overrides' probe file
	if err := srv.Run(t.Context()); err == nil || random.ReplaceAllString(err.Error(), "") != random.ReplaceAllString(strings.TrimSpace(stderr), "") {
		t.Errorf("start: %v\nwant what check said:\n%s", err, stderr)
	}

	unset := writeFile(t, filepath.Join(dir, "env.toml"), strings.Replace(minimalConfig("", ""), `"http://127.0.0.1:1"`, `"http://{$LIMITPROXY_TEST_CLI_UNSET}:80"`, 1))
	code, _, stderr = runCLI(t, "check", "-config", unset)
	if w := unset + ":6:1: upstream[0].targets: environment variable LIMITPROXY_TEST_CLI_UNSET is unset"; code != 1 || !strings.HasPrefix(stderr, w) {
		t.Errorf("check of an unset variable: exit %d, %q; want exit 1 with %q", code, stderr, w)
	}
}

// TestCheckAllAtOnce: a file that does not validate (an unknown key, a
// placeholder's variable unset) still has what it would open checked, so
// that one run of check lists every problem, in file order: a bad listen
// address, a missing certificate, an unset token variable and a missing
// overrides directory beside the file's own errors; a key whose value is
// in error is not checked again.
func TestCheckAllAtOnce(t *testing.T) {
	t.Setenv("LIMITPROXY_TEST_CLI_TOKEN", "")
	dir := t.TempDir()
	path := writeFile(t, filepath.Join(dir, "c.toml"), `[server]
listen = "0.0.0.0:80800"
  [server.tls]
  mode = "files"
  cert_file = "`+filepath.Join(dir, "cert.pem")+`"
  key_file = "`+filepath.Join(dir, "key.pem")+`"
[admin]
listen = "localhost"
token_env = "LIMITPROXY_TEST_CLI_TOKEN"
[store]
overrides_file = "`+filepath.Join(dir, "no-dir", "ov.json")+`"
[[upstream]]
name = "app"
targets = ["http://{$LIMITPROXY_TEST_CLI_UNSET}:1"]
[[policy]]
name = "p"
upstream = "app"
  [[policy.limits]]
  algoritm = "token_bucket"
  rate = "10/s"
`)
	code, stdout, stderr := runCLI(t, "check", "-config", path)
	want := []string{
		path + `:2:1: server.listen: "0.0.0.0:80800": port "80800" is not a number from 0 to 65535`,
		path + ":5:3: server.tls.cert_file: open " + filepath.Join(dir, "cert.pem"),
		path + ":6:3: server.tls.key_file: open " + filepath.Join(dir, "key.pem"),
		path + `:8:1: admin.listen: "localhost": address localhost: missing port in address`,
		path + ":9:1: admin.token_env: environment variable LIMITPROXY_TEST_CLI_TOKEN is empty or unset",
		path + ":11:1: store.overrides_file: overrides file " + filepath.Join(dir, "no-dir", "ov.json") + ": directory " + filepath.Join(dir, "no-dir") + " does not exist",
		path + ":14:1: upstream[0].targets: environment variable LIMITPROXY_TEST_CLI_UNSET is unset",
		path + `:18:3: policy "p" limits[0].algorithm: is required`,
		path + `:19:3: policy "p" limits[0].algoritm: unknown key "algoritm" (did you mean "algorithm"?)`,
	}
	wantCheckErrors(t, code, stdout, stderr, want)
}

// wantCheckErrors fails the test unless check exited 1 (code), printed
// nothing on stdout and on stderr one line per error, each beginning with
// the matching line of want.
func wantCheckErrors(t *testing.T, code int, stdout, stderr string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 1 || stdout != "" || len(lines) != len(want) {
		t.Fatalf("check: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and %d errors", code, stdout, stderr, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want it to begin %q", i, lines[i], w)
		}
	}
}

// TestCommandHelp: every command's -h (and -help, --help) prints its own
// usage and flags on stdout and exits 0; the top level's lists every
// command; -version, --version and version print the same line.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		for _, h := range []string{"-h", "-help", "--help"} {
			args := []string{h}
			if c.name != "" {
				args = []string{c.name, h}
			}
			code, stdout, stderr := runCLI(t, args...)
			if code != 0 || stderr != "" || !strings.Contains(stdout, "usage:") || !strings.Contains(stdout, c.title()) {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0 with %s's usage", strings.Join(args, " "), code, stdout, stderr, c.title())
			}
			if c.name == "check" && !strings.Contains(stdout, "-connect") {
				t.Errorf("check -h does not list -connect:\n%s", stdout)
			}
		}
	}
	_, top, _ := runCLI(t, "-h")
	for _, c := range commands[1:] {
		if !strings.Contains(top, "limitproxy "+c.name) {
			t.Errorf("the usage lacks %s:\n%s", c.name, top)
		}
	}
	_, v, _ := runCLI(t, "version")
	for _, args := range [][]string{{"-version"}, {"--version"}} {
		if code, out, _ := runCLI(t, args...); code != 0 || out != v || !strings.HasPrefix(out, "limitproxy ") {
			t.Errorf("%s: exit %d, %q; want %q", args[0], code, out, v)
		}
	}
}

// TestDefaultConfig: without -config, the system's file if it exists,
// else ./limitproxy.toml; neither: a usage error naming both.
func TestDefaultConfig(t *testing.T) {
	if _, err := os.Stat(defaultConfigs[0]); err == nil {
		t.Skipf("%s exists on this machine", defaultConfigs[0])
	}
	dir := t.TempDir()
	t.Chdir(dir)
	code, _, stderr := runCLI(t, "check")
	if code != 2 || !strings.Contains(stderr, "none of /etc/limitproxy/config.toml, limitproxy.toml exists") {
		t.Errorf("check without a file: exit %d, %q", code, stderr)
	}
	writeFile(t, "limitproxy.toml", minimalConfig("", ""))
	code, stdout, stderr := runCLI(t, "check")
	if code != 0 || !strings.HasPrefix(stdout, "limitproxy.toml: ok: 1 policy, ") {
		t.Errorf("check with ./limitproxy.toml: exit %d, %q, %q", code, stdout, stderr)
	}
}

// TestCompletionScripts: the script for each shell parses in that shell,
// and bash's offers every command, and every flag of each command, as
// the command table has them.
func TestCompletionScripts(t *testing.T) {
	dir := t.TempDir()
	for _, shell := range completionShells() {
		code, script, stderr := runCLI(t, "completion", shell)
		if code != 0 {
			t.Fatalf("completion %s: exit %d, %s", shell, code, stderr)
		}
		path := writeFile(t, filepath.Join(dir, "limitproxy."+shell), script)
		bin, err := exec.LookPath(shell)
		if err != nil {
			t.Errorf("%s is not installed (Debian's %s package): %v", shell, shell, err)
			continue
		}
		if out, err := exec.Command(bin, "-n", path).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
	}
	if code, _, _ := runCLI(t, "completion", "tcsh"); code != 2 {
		t.Errorf("completion tcsh: exit %d, want 2", code)
	}

	// bash: what completing offers, run in bash.
	offers := func(words ...string) []string {
		t.Helper()
		line := strings.Join(words, " ")
		prog := fmt.Sprintf("source %q\nCOMP_WORDS=(%s)\nCOMP_CWORD=%d\n_limitproxy\nprintf '%%s\\n' \"${COMPREPLY[@]}\"\n",
			filepath.Join(dir, "limitproxy.bash"), line, len(words)-1)
		out, err := exec.Command("bash", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash completing %q: %v\n%s", line, err, out)
		}
		return strings.Fields(string(out))
	}
	got := strings.Join(offers("limitproxy", "''"), " ")
	for _, c := range commands[1:] {
		if !strings.Contains(" "+got+" ", " "+c.name+" ") {
			t.Errorf("completing a command offers %q, without %s", got, c.name)
		}
	}
	for _, c := range completionTable() {
		words := []string{"limitproxy", "-"}
		if c.name != "" {
			words = []string{"limitproxy", c.name, "-"}
		}
		got := " " + strings.Join(offers(words...), " ") + " "
		for _, f := range c.flags {
			if !strings.Contains(got, " -"+f.name+" ") {
				t.Errorf("completing a flag of %q offers%s, without -%s", c.name, got, f.name)
			}
		}
	}
	if got := offers("limitproxy", "completion", "''"); strings.Join(got, " ") != "bash fish zsh" && strings.Join(got, " ") != "bash zsh fish" {
		t.Errorf("completing completion's argument offers %q", got)
	}
}

// TestReloadNothingListens: reload of a file no server runs says so, and
// where it asked.
func TestReloadNothingListens(t *testing.T) {
	addr := freeAddr(t)
	path := writeFile(t, filepath.Join(t.TempDir(), "c.toml"), minimalConfig(fmt.Sprintf("listen = %q\n", addr), ""))
	code, _, stderr := runCLI(t, "reload", "-config", path)
	if w := "reload: nothing listens on " + addr + ", the [admin] listen of " + path + ": is limitproxy running with this file?"; code != 1 || !strings.HasPrefix(stderr, w) {
		t.Errorf("reload with no server: exit %d, %q; want exit 1 and %q", code, stderr, w)
	}
}

// TestReloadCommand: `limitproxy reload` asks the running server through
// its admin API, with the token token_env names: a good file is applied
// (exit 0), a refused one prints every error at its position (exit 1) and
// the configuration in force stays, a wrong token is refused (exit 1).
func TestReloadCommand(t *testing.T) {
	adminAddr := freeAddr(t)
	t.Setenv("LIMITPROXY_TEST_RELOAD_TOKEN", "s3cret")
	admin := fmt.Sprintf("listen = %q\ntoken_env = \"LIMITPROXY_TEST_RELOAD_TOKEN\"\n", adminAddr)
	path := writeFile(t, filepath.Join(t.TempDir(), "c.toml"), minimalConfig(admin, ""))
	cfg, err := config.LoadWith(path, server.LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := server.New(cfg, server.Options{Path: path, Stderr: &bytes.Buffer{}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}

	writeFile(t, path, strings.Replace(minimalConfig(admin, ""), `rate = "10/s"`, `rate = "20/s"`, 1))
	if code, stdout, stderr := runCLI(t, "reload", "-config", path); code != 0 || !strings.HasPrefix(stdout, "reload applied: hash ") {
		t.Errorf("reload of a good file: exit %d, %q, %q", code, stdout, stderr)
	}

	writeFile(t, path, strings.Replace(minimalConfig(admin, ""), `rate = "10/s"`, `rate = "ten"`+"\n  bogus = 1", 1))
	code, stdout, stderr := runCLI(t, "reload", "-config", path)
	for _, w := range []string{path + ":14:3: policy \"p\" limits[0].rate: bad rate \"ten\"", path + ":15:3: policy \"p\" limits[0].bogus: unknown key", "reload refused: the configuration in force stays"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("reload of a bad file: stderr lacks %q:\n%s", w, stderr)
		}
	}
	if code != 1 || stdout != "" {
		t.Errorf("reload of a bad file: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}

	t.Setenv("LIMITPROXY_TEST_RELOAD_TOKEN", "wrong")
	if code, _, stderr := runCLI(t, "reload", "-config", path); code != 1 || !strings.Contains(stderr, "401") {
		t.Errorf("reload with a wrong token: exit %d, %q", code, stderr)
	}
	t.Setenv("LIMITPROXY_TEST_RELOAD_TOKEN", "")
	if code, _, stderr := runCLI(t, "reload", "-config", path); code != 1 || !strings.Contains(stderr, "admin.token_env: environment variable LIMITPROXY_TEST_RELOAD_TOKEN is empty or unset") {
		t.Errorf("reload without the token: exit %d, %q", code, stderr)
	}
}
