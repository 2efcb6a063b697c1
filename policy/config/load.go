package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Configuration input is bounded, so that no file saved at the watched
// path, however made, can stop a running instance: its size, its nesting
// (the TOML decoder's memory grows with the square of it), its kind (a
// FIFO or a device would block a read for ever) and the time a read may
// take (a stuck network file system).

// MaxFileBytes is the largest configuration file accepted: 1 MiB, a
// hundred times the largest real configuration seen.
const MaxFileBytes = 1 << 20

// MaxDepth is the deepest nesting of arrays, inline tables, table headers
// and dotted keys accepted; the format itself needs 4.
const MaxDepth = 16

// readTimeout bounds the whole read of a configuration file.
const readTimeout = 5 * time.Second

// errTimeout reports a read that did not finish within readTimeout.
var errTimeout = errors.New("reading took longer than the limit")

// readConfigFile reads the file at path, which must be a regular file (or
// a link to one) of at most MaxFileBytes, within readTimeout. It opens the
// file without blocking, so that a FIFO cannot stall it. A read that
// overruns the timeout is abandoned: its goroutine ends when the read
// returns, and the caller has its error at once.
func readConfigFile(path string) ([]byte, error) {
	return readWithin(path, readTimeout, readRegular)
}

// readWithin runs read(path) and returns its result, or an error once
// timeout has passed.
func readWithin(path string, timeout time.Duration, read func(string) ([]byte, error)) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := read(path)
		done <- result{b, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.b, r.err
	case <-timer.C:
		return nil, fmt.Errorf("%w (%v)", errTimeout, timeout)
	}
}

func readRegular(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("is not a regular file (%s)", fileKind(st.Mode()))
	}
	if st.Size() > MaxFileBytes {
		return nil, tooLarge(st.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, tooLarge(int64(len(b)))
	}
	return b, nil
}

func tooLarge(n int64) error {
	return fmt.Errorf("is %d bytes or more; a configuration file may have at most %d (1 MiB)", n, MaxFileBytes)
}

// fileKind names a file mode that is not a regular file's.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// checkNesting returns the position of the first place in src nested
// deeper than MaxDepth, counting the brackets of arrays and inline tables,
// and the dots of table headers and keys, outside strings and comments. It
// is a linear scan, done before the decoder sees the file. ok is false when
// the depth is over the limit.
func checkNesting(src []byte) (line, col int, ok bool) {
	line, lineStart := 1, 0
	depth := 0    // open [ and { of values
	keyDepth := 0 // dots in the current key or table header
	inKey := true // at the start of a line: a key or a header may follow
	header := 0   // 1 or 2 while inside [..] or [[..]] of a table header
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case '\n':
			line, lineStart = line+1, i+1
			if depth == 0 {
				inKey, keyDepth, header = true, 0, 0
			}
		case '#':
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			end, nl := skipTOMLString(src, i)
			line += nl
			if nl > 0 {
				lineStart = lastNewline(src, i, end) + 1
			}
			i = end
		case '=':
			if depth == 0 && header == 0 {
				inKey = false
			}
		case '.':
			if (inKey && depth == 0) || header > 0 {
				if keyDepth++; keyDepth > MaxDepth {
					return line, i - lineStart + 1, false
				}
			}
		case '[':
			if inKey && depth == 0 && header == 0 {
				header = 1
				if i+1 < len(src) && src[i+1] == '[' {
					header, i = 2, i+1
				}
				continue
			}
			fallthrough
		case '{':
			if depth++; depth > MaxDepth {
				return line, i - lineStart + 1, false
			}
			if c == '{' {
				// Keys of an inline table may be dotted too.
				inKey = true
				keyDepth = 0
			}
		case ']':
			if header > 0 && depth == 0 {
				header, inKey, keyDepth = 0, false, 0
				if i+1 < len(src) && src[i+1] == ']' {
					i++
				}
				continue
			}
			fallthrough
		case '}':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth > 0 {
				inKey, keyDepth = true, 0
			}
		}
	}
	return 0, 0, true
}

// skipTOMLString returns the index of the last byte of the string that starts
// at src[i] (a basic or literal string, single- or multi-line), and how
// many newlines it holds. An unterminated string runs to the end: the
// decoder reports it.
func skipTOMLString(src []byte, i int) (end, newlines int) {
	q := src[i]
	multi := i+2 < len(src) && src[i+1] == q && src[i+2] == q
	j := i + 1
	if multi {
		j = i + 3
	}
	for ; j < len(src); j++ {
		switch c := src[j]; {
		case c == '\\' && q == '"':
			if j+1 < len(src) && src[j+1] == '\n' {
				newlines++
			}
			j++
		case c == '\n':
			newlines++
			if !multi {
				return j - 1, newlines - 1 // the decoder reports it
			}
		case c == q:
			if !multi {
				return j, newlines
			}
			if j+2 < len(src) && src[j+1] == q && src[j+2] == q {
				// Up to two more quotes may close a multi-line string.
				j += 2
				for j+1 < len(src) && src[j+1] == q {
					j++
				}
				return j, newlines
			}
		}
	}
	return len(src) - 1, newlines
}

func lastNewline(src []byte, from, to int) int {
	for k := min(to, len(src)-1); k >= from; k-- {
		if src[k] == '\n' {
			return k
		}
	}
	return from
}
