package config

import (
	"reflect"
	"strconv"
	"strings"
)

// An error's key is its TOML path ("policy[2].limits[0].rate"), which a
// program reads; a person reads "policy \"login\" limits[0].rate". Error
// prints the policy's name when it has one (Error.Policy), and an
// unknown key comes with the nearest key the table takes, when one is
// near (a misspelling).

// namePolicies sets Policy on each error of es whose key is under a
// policy of raw that has a name no other policy has (a name given twice
// names neither: the index does).
func namePolicies(es Errors, raw *rawFile) {
	seen := map[string]int{}
	for _, p := range raw.Policy {
		seen[p.Name.V]++
	}
	for _, e := range es {
		rest, ok := strings.CutPrefix(e.Key, "policy[")
		if !ok {
			continue
		}
		n, _, ok := strings.Cut(rest, "]")
		i, err := strconv.Atoi(n)
		if !ok || err != nil || i < 0 || i >= len(raw.Policy) {
			continue
		}
		if name := raw.Policy[i].Name.V; name != "" && seen[name] == 1 {
			e.Policy = name
		}
	}
}

// suggestKey returns the key nearest to name that the table at path (a
// toml.Key without its last element) takes, if one is within two edits
// (and fewer than half of name's letters); "" if none is.
func suggestKey(path []string, name string) string {
	t := reflect.TypeFor[rawFile]()
	for _, p := range path {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return ""
		}
		f, ok := fieldByTag(t, p)
		if !ok {
			return ""
		}
		t = f.Type
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	best, bestD := "", 3
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		if d := editDistance(name, tag); d < bestD && 2*d < len(name) {
			best, bestD = tag, d
		}
	}
	return best
}

// fieldByTag returns t's field whose toml tag is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if tag == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// nearest returns the one of names nearest to s, if it is within maxD
// edits (and fewer than half of s's letters); "" if none is.
func nearest(s string, names []string, maxD int) string {
	best, bestD := "", maxD+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestD && 2*d < len(s) {
			best, bestD = n, d
		}
	}
	return best
}

// nearestZone returns the name of the zone database (zoneNames) that s
// most likely misspells: the one equal to it but for case, or else
// within three edits ignoring case and fewer than a third of its letters
// (so that "PST" is not taken for "EST"); "" if none is.
func nearestZone(s string) string {
	lower := strings.ToLower(s)
	best, bestD := "", 4
	for _, n := range zoneNames {
		d := editDistance(lower, strings.ToLower(n))
		if d < bestD && 3*d < len(s) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance (optimal string
// alignment) of a and b, in bytes: insertions, deletions, substitutions
// and swaps of two neighbours count one each.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
