package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

// sectionsConfig is a configuration with an upstream concurrency limit and
// a policy matching by regular expression, at log level info.
func sectionsConfig(up string) string {
	return `[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[log]
level = "info"
access = false
[[upstream]]
name = "app"
targets = ["` + up + `"]
  [upstream.concurrency]
  limit = 10
[[upstream]]
name = "other"
targets = ["` + up + `"]
[[policy]]
name = "api"
upstream = "app"
match = { path_regex = "^/api/v[0-9]+/" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
[[policy]]
name = "all"
upstream = "other"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 100
  window = "1m"
`
}

// reloadLines posts a reload to the admin API (which returns once the file
// has been applied or refused, whoever triggered it first) and returns the
// log lines of the reloader written since the last call.
func (r *running) reloadLines(t *testing.T, seen *int) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest("POST", r.admin+"/api/v1/reload", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r.logs.mu.Lock()
	text := r.logs.w.String()
	r.logs.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text[*seen:]))
	*seen = len(text)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["logger"] == "reload" {
			out = append(out, l)
		}
	}
	return out
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestReloadLogsChangedSections: the "policy reloaded" line names every
// section that changed, compared whole: a ban added to a policy, an
// upstream's concurrency, [log], [server]; a file whose meaning did not
// change (a comment) names none, whatever its policies hold (a compiled
// regular expression). A good file after a refused one is logged at info,
// also when it is the configuration in force.
func TestReloadLogsChangedSections(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(sectionsConfig(up)), 0o644) })
	base := sectionsConfig(r.upstream.URL)
	seen := 0
	for _, c := range []struct {
		name, text string
		changed    []string
	}{
		{"comment", base + "# a comment\n", nil},
		{"ban", strings.Replace(base, "name = \"api\"\n", "name = \"api\"\nban = { duration = \"1m\" }\n", 1), []string{"policy:api"}},
		{"concurrency", strings.Replace(base, "limit = 10\n", "limit = 20\n", 1), []string{"upstream:app"}},
		{"log and server", strings.Replace(strings.Replace(base, `level = "info"`, `level = "debug"`, 1),
			"[admin]", "trusted_proxies = [\"10.0.0.0/8\"]\n[admin]", 1), []string{"server", "log"}},
	} {
		writeAtomic(t, r.path, c.text)
		lines := r.reloadLines(t, &seen)
		i := slices.IndexFunc(lines, func(l map[string]any) bool { return l["msg"] == "policy reloaded" })
		if i < 0 {
			t.Errorf("%s: no \"policy reloaded\" line in %v", c.name, lines)
			continue
		}
		if got := strs(lines[i]["changed"]); !slices.Equal(got, c.changed) {
			t.Errorf("%s: changed %q, want %q", c.name, got, c.changed)
		}
		writeAtomic(t, r.path, base) // back, for the next case
		r.reloadLines(t, &seen)
	}

	// Refused, then the file in force again: info, not debug.
	writeAtomic(t, r.path, base+"bogus = 1\n")
	// (The file watcher may have reloaded a file before the API did: the
	// line sought is looked for among those of the step.)
	find := func(lines []map[string]any, msg string) map[string]any {
		if i := slices.IndexFunc(lines, func(l map[string]any) bool { return l["msg"] == msg }); i >= 0 {
			return lines[i]
		}
		return nil
	}
	if l := find(r.reloadLines(t, &seen), "policy reload rejected"); l == nil {
		t.Fatal("bad file: no \"policy reload rejected\" line")
	}
	writeAtomic(t, r.path, base)
	if l := find(r.reloadLines(t, &seen), "config file accepted again; it is the configuration in force"); l == nil || l["level"] != "info" {
		t.Errorf("good file after a refused one: %v", l)
	}
	// Refused, then a changed file: reloaded, marked recovered.
	writeAtomic(t, r.path, base+"bogus = 1\n")
	r.reloadLines(t, &seen)
	writeAtomic(t, r.path, strings.Replace(base, "limit = 100\n", "limit = 200\n", 1))
	if l := find(r.reloadLines(t, &seen), "policy reloaded"); l == nil || l["recovered"] != true || !slices.Equal(strs(l["changed"]), []string{"policy:all"}) {
		t.Errorf("changed file after a refused one: %v", l)
	}
}
