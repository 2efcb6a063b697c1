package h1

import (
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

type op struct {
	kind string
	k, v string
	n    int
}

func (o op) String() string { return fmt.Sprintf("%s(%s,%q,%d)", o.kind, o.k, o.v, o.n) }

func randomScript(r *rand.Rand) []op {
	keys := []string{"Content-Type", "Content-Length", "Transfer-Encoding", "Connection", "Trailer", "X-Foo", "Date", "Content-Encoding", http.TrailerPrefix + "X-P", "X-T"}
	vals := map[string][]string{
		"Content-Type":      {"text/x", ""},
		"Content-Length":    {"0", "1", "5", "10", "abc", "2048", "3000"},
		"Transfer-Encoding": {"chunked", "identity", "gzip", ""},
		"Connection":        {"close", "keep-alive", "Close", "upgrade"},
		"Trailer":           {"X-T", "X-T, X-Foo", "Content-Length"},
		"X-Foo":             {"foo", " sp ", "a\r\nb"},
		"Date":              {"yesterday"},
		"Content-Encoding":  {"gzip", ""},
		"X-T":               {"t"},
	}
	var ops []op
	n := 1 + r.Intn(6)
	for range n {
		switch x := r.Intn(10); {
		case x < 3:
			k := keys[r.Intn(len(keys))]
			vs := vals[k]
			if vs == nil {
				vs = []string{"p"}
			}
			ops = append(ops, op{kind: "set", k: k, v: vs[r.Intn(len(vs))]})
		case x < 4:
			ops = append(ops, op{kind: "del", k: keys[r.Intn(len(keys))]})
		case x < 6:
			codes := []int{100, 103, 200, 200, 201, 204, 304, 404, 101, 500}
			ops = append(ops, op{kind: "code", n: codes[r.Intn(len(codes))]})
		case x < 9:
			sizes := []int{0, 1, 5, 10, 100, 511, 512, 600, 1000, 2047, 2048, 2049, 3000, 5000}
			kind := "write"
			if r.Intn(4) == 0 {
				kind = "write-binary"
			}
			ops = append(ops, op{kind: kind, n: sizes[r.Intn(len(sizes))]})
		default:
			ops = append(ops, op{kind: "flush"})
		}
	}
	return ops
}

func runScript(w http.ResponseWriter, ops []op) {
	const text = "abcdefghijklmnopqrstuvwxyz0123456789\n"
	for _, o := range ops {
		switch o.kind {
		case "set":
			w.Header().Set(o.k, o.v)
		case "del":
			w.Header().Del(o.k)
		case "code":
			w.WriteHeader(o.n)
		case "write":
			w.Write([]byte(strings.Repeat(text, o.n/len(text)+1)[:o.n]))
		case "write-binary":
			w.Write(make([]byte, o.n))
		case "flush":
			w.(http.Flusher).Flush()
		}
	}
}

// TestResponseRandomScripts runs random sequences of handler calls
// (fields set and deleted, WriteHeader, Writes of text or binary bytes
// from 0 to 5000, Flush) for GET and HEAD, two requests on a
// connection (pipelined or one after the other), on the front and on
// net/http, and compares the bytes they send (Date masked).
//
// Found in review, now fixed: with seed 1, 2 of the 2000 scripts diverge (both set an empty
// Transfer-Encoding, then fields after WriteHeader that the front puts
// in the head): see te-empty-then-late-field in responseCases.
func TestResponseRandomScripts(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	var scripts [][]op
	for len(scripts) < 2000 {
		scripts = append(scripts, randomScript(r))
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/probe" {
			io.WriteString(w, "probe")
			return
		}
		i, _ := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/"))
		runScript(w, scripts[i])
	})
	_, plain := startPlain(t, h, nil)
	var seen servedLog
	_, _, front := startFront(t, seen.wrap(h), nil)
	// Every script ends with Connection: close: a front that keeps the
	// connection would cost each script silence (2 s) to find it open.
	requireCloseHonoured(t, front, "/probe")
	fails := 0
	for i, s := range scripts {
		method := "GET"
		if i%3 == 0 {
			method = "HEAD"
		}
		first := []string{"Host: a"}
		if i%5 == 0 {
			first = append(first, "Connection: keep-alive, close")
		}
		p := "/" + strconv.Itoa(i)
		reqs := []string{reqHead(method+" "+p+" HTTP/1.1", first...), reqHead(method+" "+p+" HTTP/1.1", "Host: a", "Connection: close")}
		want := exchange(t, plain, reqs, i%2 == 0)
		got := exchange(t, front, reqs, i%2 == 0)
		// Bodiless GETs and HEADs: the front's to serve, not net/http's.
		by := seen.servers(p)
		if want != got || by != "front" {
			diff := "the same bytes"
			if want != got {
				diff = describeDiff(want, got)
			}
			if fails++; fails <= 10 {
				t.Errorf("%s %v (%q), served by %q (want the front):\n%s", method, s, reqs, by, diff)
			}
		}
		if fails >= 10 {
			// A divergence that common costs seconds a script (a
			// connection left open is found so after silence): stop.
			t.Fatalf("stopped after %d diverging scripts of %d run", fails, i+1)
		}
	}
	if fails > 0 {
		t.Errorf("%d of %d scripts diverge", fails, len(scripts))
	}
}
