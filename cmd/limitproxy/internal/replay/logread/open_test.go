package logread_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
)

func gzipped(t *testing.T, parts ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, p := range parts { // one gzip member each, as `cat a.gz b.gz` makes
		zw := gzip.NewWriter(&b)
		if _, err := io.WriteString(zw, p); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// TestOpenDetects: the format from the first non-empty line, gzip from
// the magic bytes whatever the name.
func TestOpenDetects(t *testing.T) {
	combined, err := os.ReadFile("testdata/combined.log")
	if err != nil {
		t.Fatal(err)
	}
	json, err := os.ReadFile("testdata/limitproxy.json.log")
	if err != nil {
		t.Fatal(err)
	}
	console, err := os.ReadFile("testdata/limitproxy.console.log")
	if err != nil {
		t.Fatal(err)
	}
	half := len(combined) / 2
	half += bytes.IndexByte(combined[half:], '\n') + 1
	dir := t.TempDir()
	files := []struct {
		name    string
		data    []byte
		format  logread.Format
		records int
	}{
		{"access.log", combined, logread.Nginx, 8},
		{"access.log.1.gz", gzipped(t, string(combined)), logread.Nginx, 8},
		{"rotated-without-suffix", gzipped(t, string(combined[:half]), string(combined[half:])), logread.Nginx, 8},
		{"limitproxy.log.gz", gzipped(t, string(json)), logread.Limitproxy, 12},
		{"leading-blank-lines.log", append([]byte("\n  \n"), json...), logread.Limitproxy, 12},
		{"console.log", console, logread.Limitproxy, 12},
		{"empty.log", nil, logread.Limitproxy, 0},
		{"empty.log.gz", gzipped(t, ""), logread.Limitproxy, 0},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := logread.Open(path, logread.Options{})
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		recs, _ := readAll(t, r)
		r.Close()
		if len(recs) != f.records {
			t.Errorf("%s: %d records, want %d", f.name, len(recs), f.records)
		}
		for _, rec := range recs {
			if rec.Format != f.format || rec.File != path {
				t.Errorf("%s: format %q, file %q", f.name, rec.Format, rec.File)
				break
			}
		}
	}
}

// TestOpenErrors: a missing file, a format named wrongly, a gzip stream
// cut short (a final error, not a LineError).
func TestOpenErrors(t *testing.T) {
	if _, err := logread.Open(filepath.Join(t.TempDir(), "nope.log"), logread.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := logread.NewReader(strings.NewReader("x"), "x", logread.Options{Format: "apache"}); err == nil || err.Error() != `unknown log format "apache" (limitproxy or nginx)` {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := logread.NewReader(strings.NewReader("x"), "x.log", logread.Options{Format: logread.Nginx, Nginx: logread.NginxOptions{LogFormat: "$remote_addr"}}); err == nil ||
		!strings.HasPrefix(err.Error(), "x.log: log format has no time variable") {
		t.Errorf("bad nginx format: %v", err)
	}
	// Explicit format: a JSON-looking first line read as nginx is malformed.
	r, err := logread.NewReader(strings.NewReader(jsonRejected+"\n"), "x.log", logread.Options{Format: logread.Nginx})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); !errors.Is(err, logread.ErrMalformed) {
		t.Errorf("JSON read as nginx: %v", err)
	}

	data, err := os.ReadFile("testdata/combined.log")
	if err != nil {
		t.Fatal(err)
	}
	gz := gzipped(t, string(data))
	r, err = logread.NewReader(bytes.NewReader(gz[:len(gz)-20]), "cut.log.gz", logread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for range 20 {
		if _, last = r.Next(); last != nil && !errors.Is(last, logread.ErrMalformed) {
			break
		}
	}
	if !errors.Is(last, io.ErrUnexpectedEOF) || !strings.HasPrefix(last.Error(), "read cut.log.gz: ") {
		t.Fatalf("cut gzip: %v", last)
	}
	if _, err := r.Next(); err != last {
		t.Errorf("the error is not final: %v", err)
	}
}

// slowReader returns its data one byte per Read and then blocks (fails
// the test) if read further: detection must not wait for more than the
// first line's start.
type slowReader struct {
	t    *testing.T
	data string
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.data == "" {
		s.t.Error("read past the data: detection waited for more input")
		return 0, io.EOF
	}
	p[0] = s.data[0]
	s.data = s.data[1:]
	return 1, nil
}

// TestDetectDoesNotWait: on a pipe, detection reads no further than it
// must.
func TestDetectDoesNotWait(t *testing.T) {
	for _, line := range []string{jsonRejected[:10], "192.0.2.1 - - [22/Nov/2026:18:46:44 +0000] \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"\n"} {
		r, err := logread.NewReader(&slowReader{t: t, data: line}, "pipe", logread.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if line[0] == '{' {
			if _, ok := r.(*logread.LimitproxyReader); !ok {
				t.Errorf("%T for JSON", r)
			}
		} else if _, ok := r.(*logread.NginxReader); !ok {
			t.Errorf("%T for nginx", r)
		}
	}
}

// TestDetectJSONNginx: an nginx format of JSON lines is told from
// limitproxy's by its own beginning.
func TestDetectJSONNginx(t *testing.T) {
	o := logread.Options{Nginx: logread.NginxOptions{LogFormat: `log_format j escape=json '{"time":"$msec","addr":"$remote_addr","req":"$request","status":$status}';`}}
	for _, tt := range []struct {
		line string
		want logread.Format
	}{
		{`{"time":"1795373204.250","addr":"192.0.2.1","req":"GET / HTTP/1.1","status":200}`, logread.Nginx},
		{jsonRejected, logread.Limitproxy},
		{`{"t`, logread.Limitproxy}, // too short to be the nginx format
	} {
		r, err := logread.NewReader(strings.NewReader(tt.line+"\n"), "x", o)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.Next()
		if err != nil && tt.line != `{"t` {
			t.Fatalf("%s: %v", tt.line, err)
		}
		if err == nil && rec.Format != tt.want {
			t.Errorf("%s: format %q, want %q", tt.line, rec.Format, tt.want)
		}
		if _, ok := r.(*logread.NginxReader); ok != (tt.want == logread.Nginx) {
			t.Errorf("%s: %T", tt.line, r)
		}
	}
	if _, err := logread.NewReader(strings.NewReader(""), "x", logread.Options{Nginx: logread.NginxOptions{LogFormat: "$a$b"}}); err == nil {
		t.Error("a bad nginx format is not reported")
	}
}
