package h1

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
)

// sinkConn is a connection whose writes are kept.
type sinkConn struct {
	net.Conn
	out bytes.Buffer
}

func (c *sinkConn) Write(p []byte) (int, error) { return c.out.Write(p) }

// TestResponseReadFromCounts: io.Copy into the response (its ReadFrom)
// reports every byte it copied, on both sides of the first 512.
func TestResponseReadFromCounts(t *testing.T) {
	for _, size := range []int{0, 1, 511, 512, 513, 5000, 100 << 10} {
		for _, method := range []string{"GET", "HEAD"} {
			w := newTestResponse(method)
			w.c.rwc = &sinkConn{}
			n, err := io.Copy(w, struct{ io.Reader }{strings.NewReader(strings.Repeat("x", size))})
			if n != int64(size) || err != nil {
				t.Errorf("%s: io.Copy of %d bytes: %d, %v", method, size, n, err)
			}
		}
	}
}
