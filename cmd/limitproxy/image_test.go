package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dockerfile is what TestImageSpools reads of the Dockerfile: the build
// stage's RUN lines, and the final stage's COPY lines, user, working
// directory, environment, entrypoint and command.
type dockerfile struct {
	buildRuns        []string
	copies           [][]string // the words after COPY
	user, workdir    string
	env              []string
	entrypoint, args []string
}

func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	stage := ""
	var line string
	for raw := range strings.Lines(string(src)) {
		raw = strings.TrimRight(raw, "\n")
		if strings.HasSuffix(raw, "\\") {
			line += strings.TrimSuffix(raw, "\\") + " "
			continue
		}
		line += raw
		l := strings.TrimSpace(line)
		line = ""
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		inst, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(inst) {
		case "FROM":
			stage = rest
		case "RUN":
			if strings.Contains(stage, " AS build") {
				d.buildRuns = append(d.buildRuns, rest)
			}
		case "COPY":
			if stage == "scratch" {
				d.copies = append(d.copies, strings.Fields(rest))
			}
		case "USER":
			d.user = rest
		case "WORKDIR":
			d.workdir = rest
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			d.env = append(d.env, k+"="+strings.Trim(v, `"`))
		case "ENTRYPOINT":
			d.entrypoint = jsonWords(t, rest)
		case "CMD":
			d.args = jsonWords(t, rest)
		}
	}
	return d
}

func jsonWords(t *testing.T, s string) []string {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") {
		t.Fatalf("Dockerfile: %s: only the exec form is understood here", s)
	}
	var out []string
	for _, w := range strings.Split(strings.Trim(s, "[]"), ",") {
		out = append(out, strings.Trim(strings.TrimSpace(w), `"`))
	}
	return out
}

// TestImageSpools runs the static binary as the container image does —
// built by the Dockerfile's own build-stage steps (scripts/build-static.sh),
// in a root holding only what the Dockerfile copies, chrooted, as its
// non-root USER, with its environment and working directory — and sends
// it a request body over 64 KiB and a large answer, both spooled to
// temp_dir (the image's /tmp): 200, not 500; then checks a configuration
// with a calendar window's time_zone, which needs the zone database the
// binary carries. Root is needed to chroot and
// change user; CI runs as root.
func TestImageSpools(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux (chroot, setuid)")
	}
	repo, _ := filepath.Abs("../..")
	d := parseDockerfile(t, filepath.Join(repo, "Dockerfile"))

	// The build stage's output, /out.
	out := filepath.Join(t.TempDir(), "out")
	for _, run := range d.buildRuns {
		if !strings.Contains(run, "/out") {
			continue // go mod download: the module cache is here already
		}
		cmd := exec.Command("bash", "-euc", strings.ReplaceAll(run, "/out", out))
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "VERSION=test")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s: %v\n%s", run, err, b)
		}
	}

	// The image's root: what COPY puts there, nothing else.
	root := t.TempDir()
	os.Chmod(root, 0o755)
	for _, words := range d.copies {
		from, chown := "", ""
		for len(words) > 0 && strings.HasPrefix(words[0], "--") {
			k, v, _ := strings.Cut(strings.TrimPrefix(words[0], "--"), "=")
			switch k {
			case "from":
				from = v
			case "chown":
				chown = v
			}
			words = words[1:]
		}
		src, dst := words[0], filepath.Join(root, words[1])
		switch {
		case from == "build" && strings.HasPrefix(src, "/out/"):
			src = filepath.Join(out, strings.TrimPrefix(src, "/out/"))
		case from == "build":
			// From the builder's system (Debian, as this one).
		case from == "":
			src = filepath.Join(repo, src)
		default:
			t.Fatalf("Dockerfile: COPY --from=%s is not understood here", from)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command("cp", "-a", "-T", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("COPY %s %s: %v\n%s", src, dst, err, b)
		}
		if chown != "" {
			if b, err := exec.Command("chown", "-R", chown, dst).CombinedOutput(); err != nil {
				t.Fatalf("chown: %v\n%s", err, b)
			}
		}
	}

	// An upstream that counts the body it gets, and sends 8 MiB on /big.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(8<<20))
			w.Write(bytes.Repeat([]byte("x"), 8<<20))
			return
		}
		fmt.Fprintf(w, "%d", n)
	}))
	t.Cleanup(up.Close)

	// The image's configuration, on loopback ports, in front of up; the
	// memory budget 0 sends every buffered answer to temp_dir.
	cfgPath := filepath.Join(root, "etc/limitproxy/config.toml")
	src, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	proxyPort, adminPort := freePort(t), freePort(t)
	text := strings.Replace(string(src), `listen = ":8080"`, fmt.Sprintf("listen = \"127.0.0.1:%d\"\nresponse_buffer_budget = 0", proxyPort), 1)
	text = strings.Replace(text, `listen = ":9091"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, adminPort), 1)
	text = strings.Replace(text, `targets = ["http://app:8000"]`, fmt.Sprintf(`targets = [%q]`, up.URL), 1)
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}

	uid, gid, _ := strings.Cut(d.user, ":")
	u, _ := strconv.Atoi(uid)
	g, _ := strconv.Atoi(gid)
	argv := append(append([]string{}, d.entrypoint...), d.args...)
	var stderr syncBuffer
	cmd := &exec.Cmd{
		Path: argv[0], Args: argv, Dir: d.workdir,
		// The image's environment, and the token `docker run -e` passes.
		Env:         append(append([]string{}, d.env...), "LIMITPROXY_ADMIN_TOKEN=t"),
		Stderr:      &stderr,
		SysProcAttr: &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)}},
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", proxyPort)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("the image's binary exited: %v\n%s", waitErr, stderr.String())
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening after 15 s\n%s", stderr.String())
		}
	}

	body := bytes.Repeat([]byte("b"), 200<<10)
	resp, err := http.Post("http://"+addr+"/upload", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != strconv.Itoa(len(body)) {
		t.Fatalf("a 200 KiB request body: %d %q, want 200 %d\n%s", resp.StatusCode, got, len(body), stderr.String())
	}

	resp, err = http.Get("http://" + addr + "/big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, bufio.NewReader(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 200 || err != nil || n != 8<<20 {
		t.Fatalf("an 8 MiB buffered answer: %d, %d bytes, %v; want 200, %d\n%s", resp.StatusCode, n, err, 8<<20, stderr.String())
	}
	if strings.Contains(stderr.String(), "temp_dir") {
		t.Errorf("the log speaks of temp_dir:\n%s", stderr.String())
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "tmp")); len(ents) != 0 {
		t.Errorf("/tmp holds %d files: spool files are unlinked at once", len(ents))
	}

	// A calendar window's time zone loads in the image, which has no zone
	// database of its own: the binary carries Go's (time/tzdata). An
	// unknown zone is reported at its line.
	for _, c := range []struct{ zone, want string }{
		{"Pacific/Chatham", "ok: 1 policy, 1 limit"},
		{"Europe/Berln", `zoned.toml:8:1: policy "zoned" limits[0].time_zone: unknown time zone "Europe/Berln" (did you mean "Europe/Berlin"?)`},
	} {
		zoned := fmt.Sprintf("[[upstream]]\nname = \"app\"\ntargets = [%q]\n[[policy]]\nname = \"zoned\"\nupstream = \"app\"\n[[policy.limits]]\n"+
			"time_zone = %q\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"month\"\n", up.URL, c.zone)
		if err := os.WriteFile(filepath.Join(root, "etc/limitproxy/zoned.toml"), []byte(zoned), 0o644); err != nil {
			t.Fatal(err)
		}
		check := &exec.Cmd{Path: d.entrypoint[0], Args: []string{d.entrypoint[0], "check", "-config", "/etc/limitproxy/zoned.toml"},
			Dir: d.workdir, Env: d.env, SysProcAttr: &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)}}}
		b, _ := check.CombinedOutput()
		if !strings.Contains(string(b), c.want) {
			t.Errorf("the image's check of a month in %s: %s\nwant %q", c.zone, b, c.want)
		}
	}
}

// freeAddr returns a loopback address (127.0.0.1:port) whose port was
// free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a process's stderr, read while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
