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
