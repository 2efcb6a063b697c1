package config

import (
	"os"
	"testing"
)

// FuzzParseRate: any string either fails with an error or yields a rate
// with a positive count and period that reads back the same.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10/s", "1/m", "100/h", "5/d", "30/5m", "7/1h30m", "0/s", "1/0s", "-1/s", "1/", "/s", "10/x", "9999999999/s", " 3 / s ", "1/-5m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRate(s)
		if err != nil {
			return
		}
		if r.N <= 0 || r.Per <= 0 {
			t.Fatalf("parseRate(%q) = %+v", s, r)
		}
		back, err := parseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("parseRate(%q) = %v; reading %q back gave %v, %v", s, r, r.String(), back, err)
		}
	})
}

// FuzzParse: no input makes Parse (the decoder, the position scanner and
// validation) panic, and every error it reports names the file.
func FuzzParse(f *testing.F) {
	example, _ := os.ReadFile("../../config.example.toml")
	f.Add(example)
	for _, name := range []string{"syntax", "unknown_keys", "bad_values", "cross_field", "missing_required"} {
		b, _ := os.ReadFile("../../testdata/policy/invalid/" + name + ".toml")
		f.Add(b)
	}
	f.Add([]byte("a = { b = [1, {c = \"]\"}], d = 'x' }\n[[x.y]]\n[x.y.z]\n\"q.k\" = \"\"\"\nmulti\n\"\"\""))
	f.Fuzz(func(t *testing.T, src []byte) {
		_, err := Parse("fuzz.toml", src)
		if err != nil {
			for _, e := range err.(Errors) {
				if e.File != "fuzz.toml" || e.Msg == "" {
					t.Fatalf("error without file or message: %#v", e)
				}
			}
		}
	})
}
