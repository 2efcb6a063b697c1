package replay

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testdata/burst.log is an nginx combined log of 20 seconds (18:00:00 to
// 18:00:19, whole seconds: $time_local) and 470 requests:
//
//   - 198.51.100.1 … .10: one request every other second each (100);
//   - 198.51.100.20: one a second (20);
//   - 2001:db8::30: three a second (60);
//   - 203.0.113.66: 100 in the first second, then ten a second (290);
//
// and a TLS handshake, which is not a request. testdata/per-ip.toml is a
// token bucket per address of 2/s with a burst of 5; per-ip-5.toml one of
// 5/s with a burst of 10. A bucket starts full, earns rate tokens a
// second, and admits a request if it holds a token; requests of one
// second arrive at the same instant.
//
// Under 2/s, burst 5:
//   - the steady clients never exceed 1/s: all 120 admitted;
//   - 2001:db8::30 (its /64, the ip key's IPv6 grouping): 5 tokens, then
//     3 asked each second: seconds 0, 1, 2 admit 3 each (5→2→1→0 tokens
//     after them), then 2 a second for 17 seconds: 9+34 = 43 admitted, 17
//     rejected;
//   - 203.0.113.66: 5 of the first 100, then 2 of each 10 for 19
//     seconds: 5+38 = 43 admitted, 95+152 = 247 rejected.
//
// Admitted 120+43+43 = 206, rejected 264.
//
// Under 5/s, burst 10: 2001:db8::30 never exceeds 5/s with a full bucket
// (60 admitted); 203.0.113.66 gets 10 of the first 100, then 5 of each 10:
// 105 admitted, 185 rejected. Admitted 285, rejected 185.
//
// The requests rejected under 2/s and not 5/s: 5 of 203.0.113.66's first
// second (its 6th to 10th), 3 of each of its next 19 seconds (its 3rd to
// 5th), 62 in all, and 2001:db8::30's 17. None the other way.
func TestReplayBurst(t *testing.T) {
	rep, err := Run(context.Background(), Options{
		Config:  "testdata/per-ip.toml",
		Against: "testdata/per-ip-5.toml",
		Logs:    []string{"testdata/burst.log"},
		RawKeys: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (ReadStats{Lines: 471, Replayed: 470, NotRequests: 1}); rep.Read != want {
		t.Errorf("Read = %+v, want %+v", rep.Read, want)
	}
	if len(rep.Policies) != 1 || rep.Policies[0].Policy != "per-ip" {
		t.Fatalf("rows %+v, want one: per-ip", rep.Policies)
	}
	res := rep.Policies[0].Results
	if got, want := []Counts{res[0].Counts, res[1].Counts}, []Counts{
		{Requests: 470, Allowed: 206, Rejected: 264},
		{Requests: 470, Allowed: 285, Rejected: 185},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if got, want := res[0].TopRejected, []KeyCount{{Key: "203.0.113.66", Count: 247}, {Key: "2001:db8::", Count: 17}}; !reflect.DeepEqual(got, want) {
		t.Errorf("top rejected under 2/s: %+v, want %+v", got, want)
	}
	if got, want := res[1].TopRejected, []KeyCount{{Key: "203.0.113.66", Count: 185}}; !reflect.DeepEqual(got, want) {
		t.Errorf("top rejected under 5/s: %+v, want %+v", got, want)
	}
	want := &Diff{Changed: 79, RejectedOnly: [2]Change{
		{Config: "testdata/per-ip.toml", Requests: 79, ByPolicy: []PolicyCount{{"per-ip", 79}},
			TopKeys: []KeyCount{{Policy: "per-ip", Key: "203.0.113.66", Count: 62}, {Policy: "per-ip", Key: "2001:db8::", Count: 17}}},
		{Config: "testdata/per-ip-5.toml", ByPolicy: []PolicyCount{}, TopKeys: []KeyCount{}},
	}}
	if !reflect.DeepEqual(rep.Diff, want) {
		t.Errorf("Diff = %+v, want %+v", rep.Diff, want)
	}

	// The plot: one file, well-formed, the same bytes every time.
	dir := t.TempDir()
	paths, err := rep.WriteSVG(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || filepath.Base(paths[0]) != "per-ip.svg" {
		t.Fatalf("plots %q, want per-ip.svg", paths)
	}
	svg, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	checkXML(t, svg)
	if again, _ := rep.chart(&rep.Policies[0]); !bytes.Equal(again.svg(), svg) {
		t.Error("a second rendering differs")
	}
}

// TestReplayLimitproxyLog replays logread's sample of limitproxy's own
// log (written without access_replay): every request from the
// placeholder address.
func TestReplayLimitproxyLog(t *testing.T) {
	rep, err := Run(context.Background(), Options{
		Config: "testdata/per-ip.toml",
		Logs:   []string{"logread/testdata/limitproxy.json.log"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Read.Replayed == 0 || rep.Read.NoClient != rep.Read.Replayed {
		t.Errorf("Read = %+v: want every request replayed without a client address", rep.Read)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "(replayed from 0.0.0.0: one ip key for all)") {
		t.Errorf("no note of the placeholder in\n%s", text.String())
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no log", Options{Config: "testdata/per-ip.toml"}, "no access log to replay"},
		{"missing log", Options{Config: "testdata/per-ip.toml", Logs: []string{"testdata/nope.log"}}, "testdata/nope.log"},
		{"missing config", Options{Config: "testdata/nope.toml", Logs: []string{"testdata/burst.log"}}, "testdata/nope.toml"},
		{"bad against", Options{Config: "testdata/per-ip.toml", Against: "testdata/burst.log", Logs: []string{"testdata/burst.log"}}, "testdata/burst.log:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// checkXML fails t unless b is one well-formed XML document whose root is
// an svg element with a viewBox.
func checkXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				hasViewBox := false
				for _, a := range el.Attr {
					hasViewBox = hasViewBox || a.Name.Local == "viewBox"
				}
				if el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg" || !hasViewBox {
					t.Errorf("root %v %v, want an svg element with a viewBox", el.Name, el.Attr)
				}
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 || depth != 0 {
		t.Errorf("%d roots, depth %d at the end", roots, depth)
	}
}
