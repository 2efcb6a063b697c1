package replay

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
	"github.com/limitproxy/limitproxy/proxy"
)

func TestTimeline(t *testing.T) {
	var tl timeline
	for _, sec := range []int64{100, 100, 103, 98} { // 98: a late one, before the first
		tl.at(sec).admitted++
	}
	if tl.width != 1 || tl.base != 98 || len(tl.pts) != 6 {
		t.Fatalf("width %d base %d len %d, want 1 98 6", tl.width, tl.base, len(tl.pts))
	}
	want := []int64{1, 0, 2, 0, 0, 1}
	for i, p := range tl.pts {
		if p.admitted != want[i] {
			t.Errorf("bucket %d: %d, want %d", i, p.admitted, want[i])
		}
	}
	// A span beyond maxBuckets widens the buckets; nothing is lost.
	tl.at(98+3*maxBuckets).rejected++
	if tl.width != 4 {
		t.Errorf("width %d after a span of 3×maxBuckets, want 4", tl.width)
	}
	if len(tl.pts) > maxBuckets {
		t.Errorf("%d buckets, more than %d", len(tl.pts), maxBuckets)
	}
	var adm, rej int64
	for _, p := range tl.pts {
		adm, rej = adm+p.admitted, rej+p.rejected
	}
	if adm != 4 || rej != 1 {
		t.Errorf("totals %d, %d after widening, want 4, 1", adm, rej)
	}
	if from, to := tl.span(); from > 98 || to <= 98+3*maxBuckets || from%4 != 0 {
		t.Errorf("span [%d, %d)", from, to)
	}
}

// TestTimelineOrder: the buckets depend on the instants, not on the order
// they came in.
func TestTimelineOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	secs := make([]int64, 5000)
	for i := range secs {
		secs[i] = 1_795_000_000 + rng.Int64N(20_000)
	}
	var a, b timeline
	for _, s := range secs {
		a.at(s).admitted++
	}
	rng.Shuffle(len(secs), func(i, j int) { secs[i], secs[j] = secs[j], secs[i] })
	for _, s := range secs {
		b.at(s).admitted++
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("orders differ: width %d/%d base %d/%d", a.width, b.width, a.base, b.base)
	}
}

func TestFloorDiv(t *testing.T) {
	for _, tc := range [][3]int64{{7, 2, 3}, {-7, 2, -4}, {-8, 2, -4}, {0, 4, 0}, {-1, 4, -1}} {
		if got := floorDiv(tc[0], tc[1]); got != tc[2] {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", tc[0], tc[1], got, tc[2])
		}
	}
}

// shadowFake rejects every third request in shadow and names its policy
// with characters that need escaping in XML and in a file name.
type shadowFake struct{ n int }

func (f *shadowFake) Evaluate(r *http.Request, now time.Time) proxy.Verdict {
	f.n++
	if f.n%3 == 0 {
		return proxy.Verdict{Policy: `<a&"b'>/x`, Decision: proxy.ShadowRejected, Key: ipKey("192.0.2.1")}
	}
	return proxy.Verdict{Policy: `<a&"b'>/x`, Decision: proxy.Allowed, Key: ipKey("192.0.2.1")}
}

func (f *shadowFake) Answer(proxy.Verdict, int, int64, time.Time) {}

func TestSVG(t *testing.T) {
	var log strings.Builder
	for sec := range 30 {
		for range sec % 7 {
			log.WriteString(combined("192.0.2.1", sec, "GET", "/api/x", 200))
		}
	}
	rd, err := logread.NewReader(strings.NewReader(log.String()), "t.log", logread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine([]*side{newSide("new.toml", newFake(3), []string{"api"}), newSide("old.toml", &shadowFake{}, nil)}, 3, false, []byte("s"))
	if err := e.replay(t.Context(), rd, nil); err != nil {
		t.Fatal(err)
	}
	rep := e.report()
	dir := filepath.Join(t.TempDir(), "plots")
	paths, err := rep.WriteSVG(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	if want := []string{"api.svg", "_a__b___x.svg"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		checkXML(t, b)
		for _, s := range []string{"requests/s", "time since 2026-11-22T18:00:01Z (s)", ">new.toml", ">old.toml"} {
			if !strings.Contains(string(b), s) {
				t.Errorf("%s: no %q", p, s)
			}
		}
	}
	api, _ := os.ReadFile(paths[0])
	for _, s := range []string{">admitted<", ">rejected<", "old.toml: no request matched the policy"} {
		if !strings.Contains(string(api), s) {
			t.Errorf("api.svg: no %q", s)
		}
	}
	odd, _ := os.ReadFile(paths[1])
	if !strings.Contains(string(odd), ">shadow rejected (admitted)<") {
		t.Error("no shadow series where there were shadow rejections")
	}
	// Deterministic: the same report, the same bytes.
	paths2, err := rep.WriteSVG(filepath.Join(t.TempDir(), "again"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range paths {
		a, _ := os.ReadFile(paths[i])
		b, _ := os.ReadFile(paths2[i])
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two writes", names[i])
		}
	}
}

// TestSVGLongSpan: a week's log is drawn in hours, in buckets of more
// than a second, still well-formed.
func TestSVGLongSpan(t *testing.T) {
	var tl timeline
	t0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC).Unix()
	for h := range 7 * 24 {
		p := tl.at(t0 + int64(h)*3600)
		p.admitted, p.rejected = int64(h), int64(h%5)
	}
	rep := &Report{Configs: []string{"a.toml"}, Policies: []PolicyReport{{Policy: "p", Row: RowPolicy, Results: []Result{{Config: "a.toml"}}, tls: []*timeline{&tl}}}}
	c, ok := rep.chart(&rep.Policies[0])
	if !ok {
		t.Fatal("no chart")
	}
	b := c.svg()
	checkXML(t, b)
	if !strings.Contains(string(b), "(h)</text>") || !strings.Contains(string(b), fmt.Sprintf("%s buckets", time.Duration(tl.width)*time.Second)) {
		t.Errorf("axis not in hours or buckets not named:\n%.600s", b)
	}
}
