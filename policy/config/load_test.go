package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefuses: what is not a small regular file is refused at once,
// with a message saying why, and nothing blocks.
func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	os.WriteFile(big, []byte(strings.Repeat("# padding\n", MaxFileBytes/10+1)), 0o644)
	link := filepath.Join(dir, "link.toml")
	os.Symlink(fifo, link)
	for path, want := range map[string]string{
		fifo:                          "is not a regular file (a FIFO)",
		link:                          "is not a regular file (a FIFO)",
		dir:                           "is not a regular file (a directory)",
		big:                           "a configuration file may have at most 1048576 (1 MiB)",
		filepath.Join(dir, "missing"): "no such file or directory",
	} {
		begin := time.Now()
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) = %v, want an error with %q", filepath.Base(path), err, want)
		}
		if took := time.Since(begin); took > time.Second {
			t.Errorf("Load(%s) took %v", filepath.Base(path), took)
		}
	}
}

// TestReadWithin: a read that blocks (a stuck network file system) is
// abandoned after the timeout.
func TestReadWithin(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	begin := time.Now()
	_, err := readWithin("x", 50*time.Millisecond, func(string) ([]byte, error) { <-block; return nil, nil })
	if !errors.Is(err, errTimeout) {
		t.Errorf("err = %v, want errTimeout", err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestNestingBounded: deeply nested files, which cost the TOML decoder
// memory in the square of their depth (a 32 KB one once killed a running
// instance), are refused before decoding, fast, in little memory, at the
// position of the first bracket over the limit.
func TestNestingBounded(t *testing.T) {
	for _, c := range []struct {
		name, src    string
		line, column int
	}{
		{"arrays 32 KB", "a = " + strings.Repeat("[", 32<<10), 1, 5 + MaxDepth},
		{"arrays 300 KB", "\n\na = " + strings.Repeat("[", 300<<10), 3, 5 + MaxDepth},
		{"inline tables", "a = " + strings.Repeat("{b=", 10<<10), 1, 5 + 3*MaxDepth},
		{"mixed", "x = 1\na = " + strings.Repeat("[{b=", 10<<10), 2, 5 + 4*(MaxDepth/2)},
		{"dotted key", strings.Repeat("a.", 10<<10) + "a = 1", 1, 2 * (MaxDepth + 1)},
		{"table header", "[" + strings.Repeat("a.", 10<<10) + "a]", 1, 1 + 2*(MaxDepth+1)},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		begin := time.Now()
		_, err := Parse("deep.toml", []byte(c.src))
		took := time.Since(begin)
		runtime.ReadMemStats(&after)
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || !strings.Contains(es[0].Msg, "nesting deeper than 16 levels") {
			t.Errorf("%s: %v, want the nesting error", c.name, err)
			continue
		}
		if es[0].Line != c.line || es[0].Col != c.column {
			t.Errorf("%s: at %d:%d, want %d:%d", c.name, es[0].Line, es[0].Col, c.line, c.column)
		}
		if took > time.Second {
			t.Errorf("%s: took %v", c.name, took)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
			t.Errorf("%s: allocated %d bytes", c.name, alloc)
		}
	}
}

// TestNestingIgnoresStrings: brackets and dots inside strings and comments
// are not nesting, and the limit leaves room for every real file.
func TestNestingIgnoresStrings(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	for _, src := range []string{
		`a = "` + strings.Repeat("[{.", 100) + `"`,
		`a = '` + strings.Repeat("[{.", 100) + `'`,
		"a = \"\"\"\n" + strings.Repeat("[{.\n", 100) + "\"\"\"",
		"a = '''\n" + strings.Repeat("[{.\n", 100) + "'''",
		"# " + strings.Repeat("[{.", 100) + "\na = 1",
		`a = "\"[[[[[[[[[[[[[[[[[[[[[[[[\""`,
		"a = " + deep,
		`"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s" = 1`,
	} {
		if line, col, ok := checkNesting([]byte(src)); !ok {
			t.Errorf("checkNesting(%.40q) refused at %d:%d", src, line, col)
		}
	}
	if _, _, ok := checkNesting([]byte("a = [" + deep + "]")); ok {
		t.Errorf("depth %d accepted", MaxDepth+1)
	}
	for _, dir := range []string{"../../testdata/policy/valid", "../../testdata/policy/invalid"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.toml"))
		for _, f := range append(files, "../../config.example.toml") {
			src, _ := os.ReadFile(f)
			if line, col, ok := checkNesting(src); !ok {
				t.Errorf("%s refused at %d:%d", f, line, col)
			}
		}
	}
}

// TestAdminAllowedHosts: [admin] allowed_hosts entries are kept in the
// form a request's Host is compared in: lower case, no trailing dot.
func TestAdminAllowedHosts(t *testing.T) {
	src := "[admin]\nallowed_hosts = [\"Admin.Internal.:9091\", \"ops.example\", \"[::1]:9091\", \"192.0.2.1\"]\n" +
		"[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n[[policy]]\nname = \"all\"\nupstream = \"up\"\n" +
		"  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"1/s\"\n"
	cfg, err := Parse("admin.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"admin.internal:9091", "ops.example", "[::1]:9091", "192.0.2.1"}
	if !slices.Equal(cfg.Admin.AllowedHosts, want) {
		t.Errorf("allowed_hosts = %q, want %q", cfg.Admin.AllowedHosts, want)
	}
}
