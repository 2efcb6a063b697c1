package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay"
)

const warnConfig = `
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9000"]

[[policy]]
name = "api"
upstream = "app"
key = ["ip", "header:X-API-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`

// accessLine is an access-log line as the proxy writes it at its
// defaults (no access_replay), with client as given.
func accessLine(i int, client string) string {
	return fmt.Sprintf(`{"level":"info","ts":"2026-11-22T18:46:%02d.%03dZ","logger":"access","msg":"request","method":"GET","host":"h","path":"/x","status":200,"duration":0.001,"policy":"api","decision":"allowed","upstream":"app","queue_wait":0,"client":%q,"key":"0123456789abcdef","bytes_sent":2,"bytes_received":0,"user_agent":"t","request_id":"r%d"}`,
		i/1000%60, i%1000, client, i)
}

func writeFiles(t *testing.T, lines []string) (cfg, log string) {
	dir := t.TempDir()
	cfg, log = filepath.Join(dir, "c.toml"), filepath.Join(dir, "a.log")
	os.WriteFile(cfg, []byte(warnConfig), 0o644)
	os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	return cfg, log
}

// TestReplayWarnsInexact: replaying a log written without access_replay
// says so, names the headers the policies need that it lacks, and says
// to expect disagreement; a log with masked or hashed client addresses
// says every request is keyed by the placeholder. Neither warns when the
// log has what is needed.
func TestReplayWarnsInexact(t *testing.T) {
	for _, c := range []struct {
		name   string
		client string
		want   []string
		not    string
	}{
		{"full", "203.0.113.7", []string{"warning: 3 of 3 requests come from lines written without [log] access_replay", "(X-Api-Key)", "Expect disagreement", "access_replay = true"}, "no client address"},
		{"masked", "203.0.113.0/24", []string{"warning: 3 of 3 requests have no client address to key by: the log's client addresses are masked or hashed", "0.0.0.0"}, ""},
		{"hashed", "5f0c2a91d3b7e468", []string{"masked or hashed ([log] client_address)"}, ""},
	} {
		cfg, log := writeFiles(t, []string{accessLine(0, c.client), accessLine(1, c.client), accessLine(2, c.client)})
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{"replay", "-config", cfg, log}, &stdout, &stderr); err != nil {
			t.Fatalf("%s: %v %s", c.name, err, stderr.String())
		}
		out := strings.Join(strings.Fields(stdout.String()), " ")
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the report lacks %q:\n%s", c.name, w, stdout.String())
			}
		}
		if c.not != "" && strings.Contains(out, c.not) {
			t.Errorf("%s: the report has %q:\n%s", c.name, c.not, stdout.String())
		}
	}
	// With access_replay's fields (received, target, h:NAME) and whole
	// addresses: no warning.
	line := strings.Replace(accessLine(0, "203.0.113.7"), `"request_id"`, `"received":"2026-11-22T18:46:00.000Z","target":"/x","h:X-Api-Key":"k","request_id"`, 1)
	cfg, log := writeFiles(t, []string{line})
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"replay", "-config", cfg, log}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "warning") {
		t.Errorf("a warning for a log with access_replay's fields:\n%s", stdout.String())
	}
}

// openPTY opens a pseudo-terminal pair (as posix_openpt, unlockpt,
// ptsname do).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestReplayProgress: on a terminal, replay shows lines read, lines/s and
// the share of the log, and erases the line at the end; on a file, a pipe
// or /dev/null it shows nothing.
func TestReplayProgress(t *testing.T) {
	master, slave := openPTY(t)
	if !isTerminal(slave) {
		t.Fatal("a pty's slave is not a terminal")
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	plain, _ := os.Create(filepath.Join(t.TempDir(), "out"))
	defer plain.Close()
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	for _, f := range []*os.File{devnull, plain, w} {
		if replayProgress(f) != nil {
			t.Errorf("%s: progress on what is not a terminal", f.Name())
		}
	}
	if replayProgress(&bytes.Buffer{}) != nil {
		t.Error("progress on a buffer")
	}

	var lines []string
	for i := range 10000 {
		lines = append(lines, accessLine(i, "203.0.113.7"))
	}
	cfg, log := writeFiles(t, lines)
	got := make(chan string, 1)
	go func() {
		var all []byte
		buf := make([]byte, 4096)
		master.SetReadDeadline(time.Now().Add(20 * time.Second))
		for {
			n, err := master.Read(buf)
			all = append(all, buf[:n]...)
			if err != nil || bytes.Contains(all, []byte("\r\033[K")) && !bytes.HasSuffix(all, []byte("\033[K")) || bytes.HasSuffix(all, []byte("\r\033[K")) {
				got <- string(all)
				return
			}
		}
	}()
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"replay", "-config", cfg, log}, &stdout, slave); err != nil {
		t.Fatal(err)
	}
	out := <-got
	if !regexp.MustCompile(`^\rreplay: [0-9]+ lines read, [0-9]+ lines/s, [0-9]+% of the logs\x1b\[K`).MatchString(out) {
		t.Errorf("progress on the terminal: %q", out)
	}
	if !strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("the progress line is not erased at the end: %q", out)
	}
	if strings.Contains(stdout.String(), "lines read") {
		t.Error("progress in the report")
	}
}

// TestProgressLine: the line is redrawn at most every progressEvery, with
// the share of the logs when their size is known.
func TestProgressLine(t *testing.T) {
	var b bytes.Buffer
	now := time.Unix(0, 0)
	f := progressLine(&b, func() time.Time { return now })
	f(replay.Progress{Lines: 4096, Read: 50, Size: 200, Elapsed: time.Second})
	now = now.Add(progressEvery / 2)
	f(replay.Progress{Lines: 8192, Read: 100, Size: 200, Elapsed: time.Second})
	now = now.Add(progressEvery)
	f(replay.Progress{Lines: 12288, Elapsed: 2 * time.Second})
	f(replay.Progress{Done: true})
	want := "\rreplay: 4096 lines read, 4096 lines/s, 25% of the logs\033[K\rreplay: 12288 lines read, 6144 lines/s\033[K\r\033[K"
	if b.String() != want {
		t.Errorf("%q\nwant %q", b.String(), want)
	}
}
