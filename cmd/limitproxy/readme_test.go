package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The addresses README.md's first session names: the demo's defaults.
const (
	readmeProxy    = "http://127.0.0.1:8080"
	readmeAdmin    = "http://127.0.0.1:9091"
	readmeUpstream = "127.0.0.1:9000"
)

// sessionStep is one command of README.md's first session and what it
// shows.
type sessionStep struct {
	cmd  string
	want []string
}

// readmeSession returns the commands of README.md's "A first session"
// and the output shown for each.
func readmeSession(t *testing.T) []sessionStep {
	t.Helper()
	src, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "\n## A first session\n")
	if !ok {
		t.Fatal(`README.md has no "A first session"`)
	}
	_, block, ok := strings.Cut(section, "```console\n")
	block, _, ok2 := strings.Cut(block, "\n```")
	if !ok || !ok2 {
		t.Fatal(`README.md's "A first session" has no console block`)
	}
	var steps []sessionStep
	for line := range strings.SplitSeq(block, "\n") {
		switch {
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, sessionStep{cmd: strings.TrimPrefix(line, "$ ")})
		case len(steps) > 0 && line != "":
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	return steps
}

// TestReadmeFirstSession runs README.md's first session against the demo
// (in-process, on free ports) with curl, as a newcomer would: its commands
// must be the ones the demo prints, and every status and field it shows
// must be what the demo answers. Allowances, for what depends on the
// clock: a t or Retry-After within 10 s of the one shown (a sliding
// window's t moves with its 10-second slot), the reports' times within
// 0.4 s (each curl's own start, on a busy machine), and the API key's
// loop at least its burst of 20 before its 429s.
func TestReadmeFirstSession(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the README's first session runs curl, which is missing")
	}
	steps := readmeSession(t)
	if len(steps) < 5 {
		t.Fatalf("README.md's first session has %d commands", len(steps))
	}

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, pw, io.Discard, demoAddrs{upstream: "127.0.0.1:0", proxy: "127.0.0.1:0", admin: "127.0.0.1:0"})
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		pr.Close()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	})
	var printed []string
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "Ctrl-C") {
		printed = append(printed, sc.Text())
	}
	go io.Copy(io.Discard, pr)
	head := regexp.MustCompile(`echo upstream on http://(\S+), proxy on (\S+), admin API on (\S+) `).FindStringSubmatch(strings.Join(printed, "\n"))
	if head == nil {
		t.Fatalf("the demo printed no addresses:\n%s", strings.Join(printed, "\n"))
	}
	upstream, proxy, admin := head[1], head[2], head[3]
	// canonical writes the demo's addresses as the README does.
	canonical := strings.NewReplacer(proxy, readmeProxy, admin, readmeAdmin, upstream, readmeUpstream,
		strings.TrimPrefix(proxy, "http://"), strings.TrimPrefix(readmeProxy, "http://")).Replace
	var commands []string
	for _, l := range printed {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "curl ") || strings.HasPrefix(l, "for ") {
			commands = append(commands, canonical(l))
		}
	}
	var shown []string
	for _, s := range steps {
		shown = append(shown, s.cmd)
	}
	if !slices.Equal(shown, commands) {
		t.Errorf("README.md's first session runs\n  %s\nthe demo prints\n  %s", strings.Join(shown, "\n  "), strings.Join(commands, "\n  "))
	}

	actual := strings.NewReplacer(readmeProxy, proxy, readmeAdmin, admin).Replace
	for _, s := range steps {
		run, cancel := context.WithTimeout(ctx, 30*time.Second)
		var stderr strings.Builder
		c := exec.CommandContext(run, "bash", "-c", actual(s.cmd))
		c.Stderr = &stderr // curl's progress meter
		out, err := c.Output()
		cancel()
		if err != nil {
			t.Fatalf("$ %s\n%s%s: %v", s.cmd, out, stderr.String(), err)
		}
		got := strings.Split(strings.TrimRight(canonical(strings.ReplaceAll(string(out), "\r\n", "\n")), "\n"), "\n")
		switch {
		case strings.HasPrefix(s.want[0], "HTTP/"):
			checkResponse(t, s, got)
		case strings.Contains(s.cmd, "time_total"):
			checkTimes(t, s, got)
		case strings.Contains(s.cmd, "X-API-Key"):
			checkBurst(t, s, got)
		case !slices.Equal(strings.Fields(strings.Join(got, " ")), strings.Fields(strings.Join(s.want, " "))):
			t.Errorf("$ %s\ngot:\n%s\nREADME.md shows:\n%s", s.cmd, strings.Join(got, "\n"), strings.Join(s.want, "\n"))
		}
	}
}

// checkResponse compares a curl -i answer with what the README shows: the
// status line, each field shown (t and Retry-After within 10 s), and the
// body, where "..." stands for anything.
func checkResponse(t *testing.T, s sessionStep, got []string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("$ %s\n"+format+"\ngot:\n%s", append(append([]any{s.cmd}, args...), strings.Join(got, "\n"))...)
	}
	if got[0] != s.want[0] {
		fail("status %q, README.md shows %q", got[0], s.want[0])
	}
	fields := map[string]string{}
	var body string
	for i, l := range got[1:] {
		if l == "" {
			body = strings.Join(got[i+2:], "\n")
			break
		}
		name, value, _ := strings.Cut(l, ":")
		fields[strings.ToLower(name)] = strings.TrimSpace(value)
	}
	timeRE := regexp.MustCompile(`(t=|^)(\d+)`)
	for _, l := range s.want[1:] {
		name, value, ok := strings.Cut(l, ": ")
		if !ok || strings.HasPrefix(l, "{") {
			if !wildMatch(l, body) {
				fail("body %q, README.md shows %q", body, l)
			}
			continue
		}
		g, present := fields[strings.ToLower(name)]
		if !present {
			fail("no %s field; README.md shows %q", name, l)
			continue
		}
		if n := strings.ToLower(name); n != "ratelimit" && n != "retry-after" {
			if g != value {
				fail("%s: %q, README.md shows %q", name, g, value)
			}
			continue
		}
		// Seconds may differ by 10; the rest must be as shown.
		var gotSecs, wantSecs []int64
		strip := func(v string, secs *[]int64) string {
			return timeRE.ReplaceAllStringFunc(v, func(m string) string {
				sub := timeRE.FindStringSubmatch(m)
				n, _ := strconv.ParseInt(sub[2], 10, 64)
				*secs = append(*secs, n)
				return sub[1] + "N"
			})
		}
		if strip(g, &gotSecs) != strip(value, &wantSecs) || len(gotSecs) != len(wantSecs) {
			fail("%s: %q, README.md shows %q", name, g, value)
			continue
		}
		for i := range gotSecs {
			if math.Abs(float64(gotSecs[i]-wantSecs[i])) > 10 {
				fail("%s: %q, README.md shows %q", name, g, value)
				break
			}
		}
	}
}

// wildMatch reports whether s is pattern, where "..." stands for anything.
func wildMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "...")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1:] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(pattern, "...") || s == ""
}

// checkTimes compares the reports' "CODE after Ns" lines, in the order of
// their times, within 0.4 s of those shown.
func checkTimes(t *testing.T, s sessionStep, got []string) {
	t.Helper()
	parse := func(lines []string) (codes []string, secs []float64) {
		type line struct {
			code string
			secs float64
		}
		var ls []line
		for _, l := range lines {
			var c string
			var n float64
			code, rest, _ := strings.Cut(l, " after ")
			c = code
			n, _ = strconv.ParseFloat(strings.TrimSuffix(rest, "s"), 64)
			ls = append(ls, line{c, n})
		}
		slices.SortFunc(ls, func(a, b line) int { return int(math.Copysign(1, a.secs-b.secs)) })
		for _, l := range ls {
			codes, secs = append(codes, l.code), append(secs, l.secs)
		}
		return codes, secs
	}
	gc, gs := parse(got)
	wc, ws := parse(s.want)
	ok := slices.Equal(gc, wc)
	for i := range min(len(gs), len(ws)) {
		ok = ok && math.Abs(gs[i]-ws[i]) <= 0.4
	}
	if !ok {
		t.Errorf("$ %s\ngot:\n%s\nREADME.md shows:\n%s", s.cmd, strings.Join(got, "\n"), strings.Join(s.want, "\n"))
	}
}

// checkBurst checks the API key's loop: as many answers as shown, the
// burst of 20 admitted first, then 429s, and nothing but 200 and 429 (a
// token every 100 ms lets more through, as many as the loop takes time).
func checkBurst(t *testing.T, s sessionStep, got []string) {
	t.Helper()
	g, w := strings.Fields(strings.Join(got, " ")), strings.Fields(strings.Join(s.want, " "))
	ok := len(g) == len(w) && len(g) > 20 && slices.Contains(g, "429") && slices.Contains(w, "429")
	for i, c := range g {
		ok = ok && (c == "200" || c == "429") && (i >= 20 || c == "200")
	}
	if !ok {
		t.Errorf("$ %s\ngot:\n%s\nREADME.md shows:\n%s", s.cmd, strings.Join(got, "\n"), strings.Join(s.want, "\n"))
	}
}

// TestReadmeTestInstalls: the README's test command says what it installs
// as scripts/test.sh installs it: every Debian package the script may
// apt-get install, and the Go tools it may go install, are named in the
// README's comment (by the name a reader knows), and the README names
// nothing the script does not install.
func TestReadmeTestInstalls(t *testing.T) {
	script, err := os.ReadFile("../../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "installs what it needs: ")
	said, _, ok2 := strings.Cut(rest, ")")
	if !ok || !ok2 {
		t.Fatal("README: no \"installs what it needs: …)\" comment")
	}
	said = strings.Join(strings.Fields(strings.ReplaceAll(said, "#", "")), " ")
	// Debian's package → the name the README gives it.
	known := map[string]string{"redis-server": "redis-server", "nginx-light": "nginx", "python3-flask": "Flask",
		"caddy": "caddy", "nodejs": "nodejs", "chromium": "chromium", "$sh": "zsh, fish"}
	var want []string
	for _, m := range regexp.MustCompile(`apt-get install -y -qq (\S+)`).FindAllStringSubmatch(string(script), -1) {
		pkg := strings.Trim(m[1], `"`)
		name, ok := known[pkg]
		if !ok {
			t.Errorf("scripts/test.sh installs %s, which this test does not know: name it in the README and here", pkg)
			continue
		}
		want = append(want, name)
	}
	for _, tool := range []string{"staticcheck", "deadcode"} {
		if !strings.Contains(string(script), "go install") || !strings.Contains(string(script), tool) {
			t.Errorf("scripts/test.sh no longer installs %s", tool)
		}
		want = append(want, tool)
	}
	for _, w := range want {
		for _, n := range strings.Split(w, ", ") {
			if !strings.Contains(said, n) {
				t.Errorf("README's test command does not say it installs %s (it says: %s)", n, said)
			}
		}
	}
	for _, n := range strings.Split(said, ", ") {
		if !slices.ContainsFunc(want, func(w string) bool { return slices.Contains(strings.Split(w, ", "), n) }) {
			t.Errorf("README's test command says it installs %q, which scripts/test.sh does not", n)
		}
	}
}

// TestReadmeStarterConfig: the README's starter configuration (its one
// toml block) is a valid configuration that `limitproxy check` passes, of
// the size the README promises a newcomer (15 to 25 lines), serving one
// policy that limits every request per client address.
func TestReadmeStarterConfig(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("README: %d toml blocks, want the one starter configuration", len(blocks))
	}
	text := blocks[0][1]
	if n := strings.Count(string(text), "\n"); n < 15 || n > 25 {
		t.Errorf("the starter configuration has %d lines, want 15 to 25", n)
	}
	path := filepath.Join(t.TempDir(), "limitproxy.toml")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"check", "-config", path}, &out, &errOut); err != nil {
		t.Fatalf("limitproxy check of the README's starter: %v\n%s%s", err, out.String(), errOut.String())
	}
	if want := path + ": ok: 1 polic"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("check said %q, want it to start %q", out.String(), want)
	}
}
