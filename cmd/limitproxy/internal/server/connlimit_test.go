package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/policy/config"
)

func TestDefaultMaxConnections(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{{0, (1<<20 - 256) / 2}, {1, 1}, {256, 64}, {512, 128}, {1024, 384}, {1 << 20, (1<<20 - 256) / 2}, {1 << 62, 1 << 30}} {
		if got := DefaultMaxConnections(c.nofile); got != c.want {
			t.Errorf("DefaultMaxConnections(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
}

// floodChildEnv, when set, makes the test binary a limitproxy process for
// TestConnectionFlood: it lowers its file-descriptor limit to 256, runs
// the configuration in the named file, and prints its address.
const floodChildEnv = "LIMITPROXY_FLOOD_CHILD"

func TestFloodChild(t *testing.T) {
	path := os.Getenv(floodChildEnv)
	if path == "" {
		t.Skip("run by TestConnectionFlood")
	}
	rl := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan listening, 1)
	go func() {
		l := <-ready
		fmt.Printf("ADDR %s\n", l.Proxy)
	}()
	runServer(context.Background(), path, cfg, os.Stderr, ready, "test")
}

// TestConnectionFlood runs limitproxy with 256 file descriptors and opens
// 600 connections to it that send nothing: a new client still gets an
// answer at once (503 with Retry-After, or its response), the log holds
// about one line a second about it, not one per failed accept, and once
// the flood ends the proxy serves again. With max_connections above what
// the descriptors allow, accepts fail (EMFILE): the listener pauses and
// logs about once a second, and serves again after the flood.
func TestConnectionFlood(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	for _, c := range []struct {
		name, extra string
		answered    bool // a new client is answered during the flood
	}{
		{"derived", "", true},
		{"above the descriptors", "max_connections = 100000\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "flood.toml")
			os.WriteFile(path, []byte(fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
read_header_timeout = "20s"
%s[admin]
listen = ""
[log]
level = "info"
[[upstream]]
name = "up"
targets = [%q]
[[policy]]
name = "all"
upstream = "up"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
  burst = 1000
`, c.extra, up.URL)), 0o644)
			cmd := exec.Command(os.Args[0], "-test.run=^TestFloodChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), floodChildEnv+"="+path)
			logPath := filepath.Join(dir, "stderr.log")
			logFile, _ := os.Create(logPath)
			defer logFile.Close()
			cmd.Stderr = logFile
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
			})
			addrc := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
						addrc <- a
					}
				}
			}()
			var addr string
			select {
			case addr = <-addrc:
			case <-time.After(20 * time.Second):
				b, _ := os.ReadFile(logPath)
				t.Fatalf("the child did not start: %s", b)
			}
			get := func(timeout time.Duration) (int, string, error) {
				cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
				resp, err := cl.Get("http://" + addr + "/")
				if err != nil {
					return 0, "", err
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode, resp.Header.Get("Retry-After"), nil
			}
			if code, _, err := get(5 * time.Second); err != nil || code != 200 {
				t.Fatalf("before the flood: %d %v", code, err)
			}
			start := time.Now()
			var flood []net.Conn
			for range 600 {
				fc, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					break
				}
				flood = append(flood, fc)
			}
			// The flood is in the listener's hands once it logs that it
			// refuses connections or that accepts fail.
			poll.For(t, 10*time.Second, func() bool {
				b, _ := os.ReadFile(logPath)
				return strings.Contains(string(b), "connection limit reached") || strings.Contains(string(b), "too many open files") || strings.Contains(string(b), "accept failed")
			}, "the child's log says nothing of the flood of %d connections", len(flood))
			code, retry, err := get(3 * time.Second)
			if c.answered && (err != nil || code != 503 && code != 200 || code == 503 && retry == "") {
				t.Errorf("during the flood a new client got %d (Retry-After %q), %v; want 503 with Retry-After or 200", code, retry, err)
			}
			for _, fc := range flood {
				fc.Close()
			}
			elapsed := time.Since(start)
			var code2 int
			var err2 error
			if !poll.Until(10*time.Second, func() bool {
				code2, _, err2 = get(2 * time.Second)
				return err2 == nil && code2 == 200
			}) {
				t.Fatalf("after the flood: %d %v", code2, err2)
			}
			elapsed = max(elapsed, time.Since(start))
			b, _ := os.ReadFile(logPath)
			accept, refused := 0, 0
			for _, line := range strings.Split(string(b), "\n") {
				switch {
				case strings.Contains(line, "too many open files") || strings.Contains(line, "accept failed"):
					accept++
				case strings.Contains(line, "connection limit reached"):
					refused++
				}
			}
			// At most one line a second of each, and one more for the
			// second begun.
			if most := int(elapsed/time.Second) + 2; accept > most || refused > most {
				t.Errorf("in %v the log has %d accept-error lines and %d refusal lines; want at most %d each", elapsed, accept, refused, most)
			}
			t.Logf("%d flood connections; in %v: %d accept-error lines, %d refusal lines", len(flood), elapsed.Round(time.Millisecond), accept, refused)
		})
	}
}
