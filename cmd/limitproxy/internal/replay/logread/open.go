package logread

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
)

// Options configures a reader. The zero value detects the format and
// reads nginx logs in the combined format keyed by $remote_addr.
type Options struct {
	// Format is the log's format; Auto (the zero value) detects it from
	// the first non-empty line: '{' or a console-encoded zap line
	// ("2006-01-02T15:04:05.000Z0700<TAB>LEVEL<TAB>…") is limitproxy's,
	// anything else nginx's.
	Format Format
	// Nginx configures the reading of nginx logs.
	Nginx NginxOptions
	// MaxLineBytes is the longest line read, in bytes; a longer one is a
	// *LineError. 0 means DefaultMaxLineBytes.
	MaxLineBytes int
}

// gzipMagic starts every gzip stream (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// NewReader returns a reader of the log in r, named name in records and
// errors: it decompresses r if it is gzipped (detected by its magic bytes,
// whatever its name) and picks the format as o.Format says. Detection
// reads ahead only as far as the first non-empty line's first bytes, so it
// does not wait for more of a pipe than that. r is not closed.
func NewReader(r io.Reader, name string, o Options) (Reader, error) {
	br := bufio.NewReaderSize(r, readBufferSize)
	if b, _ := br.Peek(2); bytes.Equal(b, gzipMagic) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		br = bufio.NewReaderSize(zr, readBufferSize)
	}
	format := o.Format
	if format == Auto {
		// An nginx format of its own that starts with literal text (a
		// JSON one: escape=json, '{"time":"$msec", …') is recognized by
		// it before '{' is taken for limitproxy's.
		var prefix string
		if o.Nginx.LogFormat != "" {
			f, err := ParseLogFormat(o.Nginx.LogFormat)
			if err != nil {
				return nil, err
			}
			prefix = f.prefix
		}
		var err error
		if format, err = detect(br, prefix); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
	switch format {
	case Limitproxy:
		return NewLimitproxyReader(br, name, o), nil
	case Nginx:
		nr, err := NewNginxReader(br, name, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nr, nil
	}
	return nil, fmt.Errorf("unknown log format %q (limitproxy or nginx)", format)
}

// detect peeks at the first non-empty line of br: a line starting with
// nginxPrefix (if not "") is nginx's, one starting with '{' or zap's
// console head limitproxy's, any other nginx's. An empty log is taken to
// be limitproxy's (it has no lines to misread).
func detect(br *bufio.Reader, nginxPrefix string) (Format, error) {
	for need := 1; ; {
		_, err := br.Peek(need)
		all, _ := br.Peek(br.Buffered())
		b := bytes.TrimLeft(all, " \t\r\n")
		line, _, complete := bytes.Cut(b, []byte("\n"))
		decided := complete || len(line) >= 64+len(nginxPrefix) || err != nil || len(all) >= br.Size()
		switch {
		case nginxPrefix != "" && len(line) >= len(nginxPrefix) && string(line[:len(nginxPrefix)]) == nginxPrefix:
			return Nginx, nil
		case len(b) > 0 && b[0] == '{' && (nginxPrefix == "" || decided):
			return Limitproxy, nil
		case decided:
			if err != nil && !errors.Is(err, io.EOF) {
				return "", err
			}
			if len(b) == 0 || consoleHead(line) {
				return Limitproxy, nil
			}
			return Nginx, nil
		}
		need = len(all) + 1
	}
}

// consoleHead reports whether line starts as zap's console encoder with
// an ISO 8601 time starts a line: a time, a tab, a level in capitals, a
// tab.
func consoleHead(line []byte) bool {
	ts, rest, ok := bytes.Cut(line, []byte("\t"))
	if !ok || !looksLikeISO(string(ts)) {
		return false
	}
	level, _, ok := bytes.Cut(rest, []byte("\t"))
	if !ok {
		return false
	}
	switch string(level) {
	case "DEBUG", "INFO", "WARN", "ERROR", "DPANIC", "PANIC", "FATAL":
		return true
	}
	return false
}

// File is a log file opened by Open: a Reader that must be closed. Not
// safe for concurrent use.
type File struct {
	Reader
	f *os.File
}

// Open opens the log file at path (plain or gzipped) and returns a reader
// of it, as NewReader does; records carry path as their File.
func Open(path string, o Options) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := NewReader(f, path, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{Reader: r, f: f}, nil
}

// Position returns how far into the file the reader is, and the file's
// size, in bytes (of the file as stored: compressed, for a gzipped log).
// The reader reads ahead, by at most its buffer. size is -1 if unknown (a
// pipe).
func (f *File) Position() (read, size int64) {
	read, err := f.f.Seek(0, io.SeekCurrent)
	if err != nil {
		read = 0
	}
	size = -1
	if st, err := f.f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	return read, size
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }
