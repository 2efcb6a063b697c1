// Package idletest holds many idle client connections open against a
// server under test, from a child process, so that a test can measure
// what the server holds for each (issue 40). The child is the test
// binary itself, run again for one test function that calls Child, so
// that its sockets take none of the test process's descriptors (a
// descriptor limit of 20,000 holds the server's 10,000 ends of the
// connections, not both ends) and none of its memory.
//
// A test package using it has a test that hands over to the child:
//
//	func TestIdleClient(t *testing.T) { idletest.Child(t) }
//
// and calls Hold(t, "TestIdleClient", addr, n, request) from the test
// that measures.
package idletest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The environment that tells a test binary it runs as Hold's child.
const (
	envAddr    = "IDLETEST_ADDR"
	envConns   = "IDLETEST_CONNS"
	envRequest = "IDLETEST_REQUEST"
)

// workers is how many connections the child opens at once.
const workers = 16

// Answers counts the answers the connections got, by status code.
type Answers map[int]int

// Hold opens n connections to addr from a child process, the test
// binary run for the test named run (which must call Child), each
// sending request (a whole HTTP/1.1 request, kept alive) and reading its
// answer, and returns once every connection has its answer, with their
// status codes; it fails t if any connection fails. The connections stay
// open and idle until release is called (or the test ends), when the
// child closes them with a reset and exits. It raises the soft limit on
// open files to the hard one, and skips t if n connections (the
// server's ends, here) cannot fit under it.
func Hold(t testing.TB, run, addr string, n int, request string) (Answers, func()) {
	t.Helper()
	if err := RaiseFiles(uint64(n) + 500); err != nil {
		t.Skipf("holding %d connections: %v", n, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envAddr+"="+addr, envConns+"="+strconv.Itoa(n), envRequest+"="+strconv.Quote(request))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			stdin.Close()
			done := make(chan struct{})
			go func() { io.Copy(io.Discard, stdout); cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(release)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "idletest: ") {
				lines <- strings.TrimPrefix(l, "idletest: ")
				return
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			release()
			t.Fatalf("the idle client exited before its connections were open")
		}
		ans, err := parseAnswers(l)
		if err != nil {
			release()
			t.Fatalf("idle client: %s", l)
		}
		return ans, release
	case <-time.After(2 * time.Minute):
		release()
		t.Fatalf("the idle client did not open %d connections within 2 minutes", n)
	}
	return nil, release
}

// Child is the child's side of Hold: when this process was started by
// Hold it opens the connections, reports, and waits for its input to
// close; otherwise it skips t.
func Child(t *testing.T) {
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skip("run by idletest.Hold only")
	}
	n, _ := strconv.Atoi(os.Getenv(envConns))
	req, err := strconv.Unquote(os.Getenv(envRequest))
	if err != nil || n <= 0 {
		fmt.Printf("idletest: error: bad environment\n")
		os.Exit(1)
	}
	if err := RaiseFiles(uint64(n) + 100); err != nil {
		fmt.Printf("idletest: error: %v\n", err)
		os.Exit(1)
	}
	conns, ans, err := open(addr, n, req)
	if err != nil {
		fmt.Printf("idletest: error: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("idletest: %s\n", ans)
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close() // a reset: SO_LINGER 0
	}
	os.Exit(0)
}

// open opens n connections to addr, workers at a time, each sending req
// and reading its answer.
func open(addr string, n int, req string) ([]net.Conn, Answers, error) {
	conns := make([]net.Conn, n)
	ans := Answers{}
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				c, code, err := get(addr, req)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("connection %d: %w", i, err)
				}
				ans[code]++
				mu.Unlock()
				conns[i] = c
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return conns, ans, firstErr
}

// get connects to addr, sends req and reads its answer whole.
func get(addr, req string) (net.Conn, int, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, 0, err
	}
	// Closed with a reset, so that no port of this process's waits in
	// TIME_WAIT after the test.
	c.(*net.TCPConn).SetLinger(0)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.Close {
		err = fmt.Errorf("answered %d with Connection: close", resp.StatusCode)
	}
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	c.SetDeadline(time.Time{})
	return c, resp.StatusCode, nil
}

// String writes the answers as "200:3 429:9997", codes in order.
func (a Answers) String() string {
	var b strings.Builder
	for code := range 1000 {
		if n := a[code]; n > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d:%d", code, n)
		}
	}
	return b.String()
}

func parseAnswers(s string) (Answers, error) {
	a := Answers{}
	for f := range strings.FieldsSeq(s) {
		code, n, ok := strings.Cut(f, ":")
		c, err1 := strconv.Atoi(code)
		k, err2 := strconv.Atoi(n)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad answer count %q", f)
		}
		a[c] = k
	}
	if len(a) == 0 {
		return nil, fmt.Errorf("no answers: %q", s)
	}
	return a, nil
}

// RaiseFiles raises this process's soft limit on open files to n, or
// fails if the hard limit is lower (raising that takes
// CAP_SYS_RESOURCE, which it tries).
func RaiseFiles(n uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= n {
		return nil
	}
	if l.Max < n {
		raised := syscall.Rlimit{Cur: n, Max: n}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return fmt.Errorf("%d open files needed, the hard limit is %d and cannot be raised: %w", n, l.Max, err)
		}
		return nil
	}
	l.Cur = n
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}
