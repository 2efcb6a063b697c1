package logread

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLineBytes is the longest line a reader accepts when
// Options.MaxLineBytes is 0: 1 MiB. nginx's own lines are bounded by its
// large_client_header_buffers (32 KiB by default) times the variables
// logged, so a longer line is almost certainly not a log line.
const DefaultMaxLineBytes = 1 << 20

// readBufferSize is the bufio buffer: most lines are read in place, without
// a copy; a longer line is gathered in lines.long.
const readBufferSize = 64 << 10

// lines reads lines without their ends (\n or \r\n). Not safe for
// concurrent use.
type lines struct {
	br   *bufio.Reader
	name string
	max  int
	n    int    // number of the last line returned
	long []byte // a line longer than the bufio buffer
	err  error  // sticky: io.EOF or a read error
	st   *Stats
}

func newLines(r io.Reader, name string, maxBytes int, st *Stats) *lines {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxLineBytes
	}
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < readBufferSize {
		br = bufio.NewReaderSize(r, readBufferSize)
	}
	return &lines{br: br, name: name, max: maxBytes, st: st}
}

// next returns the next line, valid until the following call; io.EOF at
// the end; a *LineError for a line over the limit (which is skipped); any
// other error is the read error, wrapped with the file name, and final.
func (l *lines) next() ([]byte, error) {
	if l.err != nil {
		return nil, l.err
	}
	line, err := l.br.ReadSlice('\n')
	tooLong := false
	if err == bufio.ErrBufferFull {
		l.long = append(l.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = l.br.ReadSlice('\n')
			if !tooLong && len(l.long)+len(line) > l.max+2 { // +2: the line end
				tooLong = true
			}
			if !tooLong {
				l.long = append(l.long, line...)
			}
		}
		line = l.long
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		l.err = io.EOF
		if len(line) == 0 && !tooLong {
			return nil, io.EOF
		}
		// The last line has no end: one being written, or a file cut
		// short. It is read like any other.
	default:
		l.err = fmt.Errorf("read %s: %w", l.name, err)
		return nil, l.err
	}
	l.n++
	l.st.Lines++
	if tooLong {
		return nil, l.errorf("line longer than %d bytes", l.max)
	}
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
		if n > 1 && line[n-2] == '\r' {
			line = line[:n-2]
		}
	}
	if len(line) > l.max {
		return nil, l.errorf("line longer than %d bytes", l.max)
	}
	return line, nil
}

func (l *lines) errorf(format string, args ...any) *LineError {
	l.st.Malformed++
	return &LineError{File: l.name, Line: l.n, Msg: fmt.Sprintf(format, args...)}
}

// blank reports whether b holds nothing but spaces and tabs.
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' {
			return false
		}
	}
	return true
}
