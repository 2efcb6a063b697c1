package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestLogFilesReopen: with [log] file and access_file the log and the
// access log go to their files, not stderr; after logrotate's move of
// both, SIGUSR1 reopens them at their names: the next lines go to new
// files (the log says "log files reopened"), and the moved files keep
// what was written before, the access lines queued at the signal
// included.
func TestLogFilesReopen(t *testing.T) {
	var logPath, accPath string
	r := startFile(t, func(path, up string) {
		dir := filepath.Dir(path)
		logPath, accPath = filepath.Join(dir, "limitproxy.log"), filepath.Join(dir, "access.log")
		text := strings.Replace(configText(up, 100, "1/s", ""), "[log]\nlevel = \"error\"\naccess = false\n",
			"[log]\nlevel = \"info\"\naccess = true\nfile = \""+logPath+"\"\naccess_file = \""+accPath+"\"\n", 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	get := func(path string) {
		t.Helper()
		resp, err := http.Get(r.proxy + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// waitFor polls (bounded) until the file at path holds want: the
	// access writer writes its batches within 100 ms.
	waitFor := func(path, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			b, _ := os.ReadFile(path)
			if strings.Contains(string(b), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never held %q:\n%s", path, want, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	get("/before")
	waitFor(accPath, `"path":"/before"`)
	waitFor(logPath, `"msg":"limitproxy started"`)
	if s := r.logs.String(); s != "" {
		t.Errorf("stderr holds lines with [log] file set:\n%s", s)
	}

	for _, p := range []string{logPath, accPath} {
		if err := os.Rename(p, p+".1"); err != nil {
			t.Fatal(err)
		}
	}
	get("/moved") // written to the moved file, or flushed there at the signal
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(logPath, `"msg":"log files reopened"`)
	get("/after")
	waitFor(accPath, `"path":"/after"`)
	old, _ := os.ReadFile(accPath + ".1")
	if !strings.Contains(string(old), `"path":"/before"`) || !strings.Contains(string(old), `"path":"/moved"`) || strings.Contains(string(old), "/after") {
		t.Errorf("the moved access log:\n%s\nwant /before and /moved, not /after", old)
	}
	if cur, _ := os.ReadFile(accPath); strings.Contains(string(cur), "/moved") || strings.Contains(string(cur), "/before") {
		t.Errorf("the new access log holds lines from before the signal:\n%s", cur)
	}
}

// TestLogFilePreflight: a log file that cannot be written is refused at
// start (and by check) at its key: a missing directory, a directory.
func TestLogFilePreflight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for key, c := range map[string]struct{ path, want string }{
		"file":        {filepath.Join(dir, "none", "x.log"), "log file " + filepath.Join(dir, "none", "x.log") + ": directory " + filepath.Join(dir, "none") + " does not exist"},
		"access_file": {dir, "is a directory"},
	} {
		cfg, err := config.Parse("c.toml", []byte("[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"\"\n[log]\n"+key+" = \""+c.path+"\"\n"+
			"[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n"+
			"[[policy]]\nname = \"p\"\nupstream = \"app\"\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1h\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		err = Preflight(cfg, PreflightOptions{})
		if err == nil || !strings.Contains(err.Error(), "c.toml:6:1: log."+key+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want c.toml:6:1: log.%s: …%s", key, err, key, c.want)
		}
	}
}
