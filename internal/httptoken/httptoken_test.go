package httptoken

import "testing"

func TestHas(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"close", true}, {"Close", true}, {"keep-alive, close", true}, {"foo close", true},
		{"close,foo", true}, {"\tCLOSE\t", true},
		{"closed", false}, {"enclose", false}, {"cloſe", false}, {"", false}, {"clos", false},
	} {
		if got := Has(c.v, "close"); got != c.want {
			t.Errorf("Has(%q, close) = %v, want %v", c.v, got, c.want)
		}
	}
}

func TestEqualFold(t *testing.T) {
	for _, c := range []struct {
		s, t string
		want bool
	}{
		{"Close", "close", true}, {"CLOSE", "close", true}, {"cloſe", "close", false},
		{"Kelvin", "\u212aelvin", false}, {"a", "ab", false}, {"", "", true},
	} {
		if got := EqualFold(c.s, c.t); got != c.want {
			t.Errorf("EqualFold(%q, %q) = %v, want %v", c.s, c.t, got, c.want)
		}
	}
}
