package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// decoderKeys returns every key the decoder reads (rawFile's toml tags),
// as dotted paths: "log.access_replay", "policy.limits.cost_from". A
// struct named raw… is a table; anything else is a value (a map such as
// match.headers is one value: its keys are the user's).
func decoderKeys(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue
		}
		name := prefix + tag
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && strings.HasPrefix(ft.Name(), "raw") {
			decoderKeys(ft, name+".", out)
			continue
		}
		out[name] = true
	}
}

var (
	exampleTable  = regexp.MustCompile(`^\s*#?\s*\[\[?\s*([a-z_.]+)\s*\]\]?`)
	exampleKey    = regexp.MustCompile(`^\s*#?\s*([a-z_][a-z0-9_]*)\s*=\s*(.*)$`)
	exampleInline = regexp.MustCompile(`([a-z_][a-z0-9_]*)\s*=`)
	exampleString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
)

// exampleKeys returns the keys config.example.toml names, set or in a
// comment ("# temp_dir = …"), as dotted paths; the keys of an inline table
// ("match = { path = … }") are named under it, and a table's name under
// the last table header, commented or not.
func exampleKeys(src string) map[string]bool {
	out := map[string]bool{}
	table := ""
	for line := range strings.SplitSeq(src, "\n") {
		if m := exampleTable.FindStringSubmatch(line); m != nil {
			table = m[1] + "."
			continue
		}
		m := exampleKey.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key, val := m[1], m[2]
		out[table+key] = true
		if strings.HasPrefix(strings.TrimSpace(val), "{") {
			// Strings emptied first: "generic_key=login" is a value, not a key.
			val = exampleString.ReplaceAllString(val, `""`)
			body := val[:strings.LastIndex(val, "}")+1]
			// Only the outer inline table's keys: drop nested ones.
			for depth, i := 0, 0; i < len(body); i++ {
				switch body[i] {
				case '{':
					depth++
					if depth > 1 {
						j := strings.IndexByte(body[i:], '}')
						body = body[:i] + body[i+j:]
					}
				case '}':
					depth--
				}
			}
			for _, k := range exampleInline.FindAllStringSubmatch(body, -1) {
				out[table+key+"."+k[1]] = true
			}
		}
		if key == "classes" {
			// An array of inline tables, one per line below.
			out[table+"classes.name"] = true
		}
	}
	return out
}

// TestExampleListsEveryKey: config.example.toml, which says it holds
// every key, names each key the decoder reads, and no key it does not.
func TestExampleListsEveryKey(t *testing.T) {
	src, err := os.ReadFile("../../config.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	decoderKeys(reflect.TypeFor[rawFile](), "", want)
	// [[shared_limit]] and [[policy.limits]] share one decoder type:
	// shared is the policy limit's alone (name is both's: a shared
	// limit's, and a policy limit's name in the RateLimit fields).
	delete(want, "shared_limit.shared")
	got := exampleKeys(string(src))
	// A line of an array of inline tables ("{ name = …, reserve = … }").
	for _, m := range regexp.MustCompile(`(?m)^\s*#?\s*\{([^}]*)\}`).FindAllStringSubmatch(string(src), -1) {
		for _, k := range exampleInline.FindAllStringSubmatch(m[1], -1) {
			got["upstream.concurrency.classes."+k[1]] = true
		}
	}
	var missing, unknown []string
	for k := range want {
		if !got[k] && !got[sharedAlias(k)] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] && !isTable(want, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(unknown)
	if len(missing) > 0 {
		t.Errorf("config.example.toml lacks keys the decoder reads (add them, commented if need be):\n  %s", strings.Join(missing, "\n  "))
	}
	if len(unknown) > 0 {
		t.Errorf("config.example.toml names keys the decoder does not read:\n  %s", strings.Join(unknown, "\n  "))
	}
}

// sharedAlias: a [[shared_limit]] takes every key of a [[policy.limits]]
// (its algorithm and parameters); one shown under either counts.
func sharedAlias(k string) string {
	if rest, ok := strings.CutPrefix(k, "shared_limit."); ok {
		return "policy.limits." + rest
	}
	return k
}

// isTable reports whether k is a table some key of want is inside (an
// inline table such as match = { … }).
func isTable(want map[string]bool, k string) bool {
	for w := range want {
		if strings.HasPrefix(w, k+".") {
			return true
		}
	}
	return false
}
