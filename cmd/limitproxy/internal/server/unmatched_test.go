package server

import (
	"os"
	"strings"
	"testing"
)

// TestUnmatchedEscapeWarned: a start whose only policy matches on a
// header, unmatched requests forwarded, logs at warn that a client
// leaves it by not sending the header; with a catch-all it does not.
func TestUnmatchedEscapeWarned(t *testing.T) {
	t.Parallel()
	const warning = `"msg":"a client leaves policy \"all\" for unlimited forwarding by not sending the headers or token claims it matches on: add a catch-all policy, or set [server] unmatched = \"refuse\""`
	for _, headerMatch := range []bool{true, false} {
		r := startFile(t, func(path, up string) {
			text := strings.Replace(configText(up, 1, "1/s", ""), "level = \"error\"", "level = \"warn\"", 1)
			if headerMatch {
				text = strings.Replace(text, "name = \"all\"\n", "name = \"all\"\nmatch = { headers = { \"X-Plan\" = \"free\" } }\n", 1)
			}
			os.WriteFile(path, []byte(text), 0o644)
		})
		r.stop()
		if got := strings.Contains(r.logs.String(), warning); got != headerMatch {
			t.Errorf("header match %v: warned %v; log:\n%s", headerMatch, got, r.logs.String())
		}
	}
}

// TestUnmatchedEscapeWarnedOnReload: a reload that puts in force a policy
// a client leaves by not sending the header it matches on logs the
// start's warning, at warn, once; a reload that changes nothing, or
// whose policies no client can leave so, does not.
func TestUnmatchedEscapeWarnedOnReload(t *testing.T) {
	t.Parallel()
	const warning = `a client leaves policy "all" for unlimited forwarding by not sending the headers or token claims it matches on: add a catch-all policy, or set [server] unmatched = "refuse"`
	plain := func(up string) string {
		return strings.Replace(configText(up, 1, "1/s", ""), "level = \"error\"", "level = \"warn\"", 1)
	}
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(plain(up)), 0o644) })
	if strings.Contains(r.logs.String(), warning) {
		t.Fatalf("warned at a start without such a policy:\n%s", r.logs.String())
	}
	matched := strings.Replace(plain(r.upstream.URL), "name = \"all\"\n", "name = \"all\"\nmatch = { headers = { \"X-Plan\" = \"free\" } }\n", 1)
	seen := 0
	warnings := func(lines []map[string]any) (n int) {
		for _, l := range lines {
			if l["msg"] == warning {
				if l["level"] != "warn" {
					t.Errorf("the warning at %v", l["level"])
				}
				n++
			}
		}
		return n
	}
	for _, step := range []struct {
		name, text string
		want       int
	}{
		{"a header-matched policy", matched, 1},
		{"the same file again", matched, 0},
		{"no header match", plain(r.upstream.URL), 0},
		{"the header match again", matched, 1},
	} {
		writeAtomic(t, r.path, step.text)
		if n := warnings(r.reloadLines(t, &seen)); n != step.want {
			t.Errorf("%s: warned %d times, want %d", step.name, n, step.want)
		}
	}
}
