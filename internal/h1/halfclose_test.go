package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// halfCloseHandler watches each request from its start (WatchClient(0) on
// the front; net/http watches every request itself) and answers /slow
// after 300 ms, long past the watch's start, unless the client is gone;
// canceled receives the path of every request whose context was canceled.
func halfCloseHandler(canceled chan<- string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wc, ok := w.(interface{ WatchClient(time.Duration) }); ok {
			wc.WatchClient(0)
		}
		wait := 50 * time.Millisecond
		if r.URL.Path == "/slow" {
			wait = 300 * time.Millisecond
		}
		select {
		case <-r.Context().Done():
			canceled <- r.URL.Path
			return
		case <-time.After(wait):
		}
		io.WriteString(w, r.URL.Path)
	})
}

// TestServerHalfClosedPipeline: a client that writes a slow request and
// two pipelined ones and then half-closes (shutdown(SHUT_WR), as `nc -N`
// and `printf … | nc` do) has finished sending, not gone: each of its
// three requests is answered, and then the connection ends, on the
// front as on net/http's server. net/http cancels the requests' contexts
// all the same (its background read meets the EOF, the pipelined bytes
// being already in its buffer, and cancels the connection's context,
// which every later request's derives from), so its handlers give up and
// answer empty; the front cancels none, and each answer is its own, in
// order.
func TestServerHalfClosedPipeline(t *testing.T) {
	const req = "GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\nGET /three HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, server := range []string{"front", "net/http"} {
		t.Run(server, func(t *testing.T) {
			canceled := make(chan string, 3)
			var addr string
			if server == "front" {
				_, _, addr = startFront(t, halfCloseHandler(canceled), nil)
			} else {
				_, addr = startPlain(t, halfCloseHandler(canceled), nil)
			}
			c := dial(t, addr)
			br := bufio.NewReader(c)
			io.WriteString(c, req)
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"/slow", "/two", "/three"} {
				resp, body := readResponse(t, c, br, "GET")
				if server == "net/http" && body == "" {
					body = want // canceled, answered empty
				}
				if resp.StatusCode != http.StatusOK || body != want {
					t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, want)
				}
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Errorf("after the three answers: %q, %v; want the connection closed", rest, err)
			}
			if server == "front" {
				select {
				case p := <-canceled:
					t.Errorf("%s was canceled", p)
				default:
				}
			}
		})
	}
}

// TestServerHalfCloseStillNoticed: a client that really leaves is still
// noticed while its request runs: a half-close with nothing pipelined
// (EOF, nothing pending), and a reset (RST) with requests pipelined.
func TestServerHalfCloseStillNoticed(t *testing.T) {
	for _, c := range []struct {
		name, req string
		leave     func(*net.TCPConn) error
	}{
		{"eof-nothing-pending", "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n", (*net.TCPConn).CloseWrite},
		{"reset-with-pipelined", "GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n", func(c *net.TCPConn) error {
			c.SetLinger(0)
			return c.Close()
		}},
	} {
		for _, server := range []string{"front", "net/http"} {
			if c.name == "reset-with-pipelined" && server == "net/http" {
				// net/http's background read stops at the first
				// pipelined byte: it notices no reset then (the front
				// reads on, and does).
				continue
			}
			t.Run(c.name+"/"+server, func(t *testing.T) {
				canceled := make(chan string, 3)
				var addr string
				if server == "front" {
					_, _, addr = startFront(t, halfCloseHandler(canceled), nil)
				} else {
					_, addr = startPlain(t, halfCloseHandler(canceled), nil)
				}
				conn := dial(t, addr)
				io.WriteString(conn, c.req)
				time.Sleep(50 * time.Millisecond) // the request being served; the watch on
				if err := c.leave(conn.(*net.TCPConn)); err != nil {
					t.Fatal(err)
				}
				select {
				case p := <-canceled:
					if p != "/slow" {
						t.Errorf("%s canceled, want /slow", p)
					}
				case <-time.After(10 * time.Second):
					t.Error("the departure was not noticed within 10 s")
				}
			})
		}
	}
}
