package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestMetrics sends known traffic and scrapes /metrics: docs/metrics.md's names,
// labels and counts, runtime and process metrics, and no client key in any
// label. With token_env set, /api/ refuses a missing token with 401 and
// counts it.
func TestMetrics(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) {
		text := strings.Replace(configText(up, 2, "1/h", ""), "[admin]\nlisten = \"127.0.0.1:0\"",
			"[admin]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"LIMITPROXY_TEST_TOKEN\"", 1)
		text = strings.Replace(text, "[[policy]]\nname = \"all\"", `[[policy]]
name = "sh"
upstream = "app"
mode = "shadow"
match = { path = "/s" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
[[policy]]
name = "all"
match = { path_prefix = "/x" }`, 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	get := func(path string) int {
		resp, err := http.Get(r.proxy + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/x", "/x", "/x", "/s", "/s", "/nope"} {
		get(p)
	}
	resp, err := http.Post(r.admin+"/api/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("reload without the token: %d", resp.StatusCode)
	}
	resp, err = http.Get(r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		`limitproxy_requests_total{decision="allowed",policy="all"} 2`,
		`limitproxy_requests_total{decision="rejected",policy="all"} 1`,
		`limitproxy_requests_total{decision="allowed",policy="sh"} 1`,
		`limitproxy_requests_total{decision="shadow_rejected",policy="sh"} 1`,
		`limitproxy_requests_total{decision="unmatched",policy=""} 1`,
		// /nope too: unmatched = "forward" sends it to the only upstream.
		`limitproxy_upstream_duration_seconds_count{code="200",upstream="app"} 5`,
		`limitproxy_config_reloads_total{result="failure"} 0`,
		`limitproxy_config_last_reload_successful 1`,
		`limitproxy_store_keys{backend="memory"} 2`,
		`limitproxy_store_evictions_total{backend="memory"} 0`,
		`limitproxy_store_spent_evictions_total{backend="memory"} 0`,
		`limitproxy_store_errors_total{backend="memory"} 0`,
		`limitproxy_admin_unauthorized_total 1`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "limitproxy_") && strings.Contains(line, "127.0.0.1") {
			t.Errorf("a client address in a label: %s", line)
		}
	}
	// With the token, the API answers.
	req, _ := http.NewRequest("GET", r.admin+"/api/v1/config", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /api/v1/config with the token: %d", resp.StatusCode)
	}
}

// TestClientKeyAPI inspects and resets one client through the admin API:
// a drained client shows no remaining quota; after DELETE it is admitted.
func TestClientKeyAPI(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 2, "1/h", "")), 0o644) })
	status := func(method, url string) (int, map[string]any) {
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	for range 3 {
		status("GET", r.proxy+"/x")
	}
	if s, _ := status("GET", r.proxy+"/x"); s != 429 {
		t.Fatalf("drained client: %d", s)
	}
	s, v := status("GET", r.admin+"/api/v1/policies/all/keys/127.0.0.1")
	if s != 200 || v["next_request_allowed"] != false || v["remaining"] != float64(0) || v["limit"] != float64(2) {
		t.Fatalf("GET one client: %d %v", s, v)
	}
	if s, v := status("GET", r.admin+"/api/v1/policies/all/keys/127.0.0.1"); s != 200 || v["remaining"] != float64(0) {
		t.Fatalf("looking changed the state: %v", v)
	}
	if s, _ := status("DELETE", r.admin+"/api/v1/policies/all/keys/127.0.0.1"); s != 204 {
		t.Fatalf("DELETE one client: %d", s)
	}
	if s, _ := status("GET", r.proxy+"/x"); s != 200 {
		t.Fatalf("after the reset the client got %d", s)
	}
	if s, _ := status("GET", r.admin+"/api/v1/policies/none/keys/127.0.0.1"); s != 404 {
		t.Errorf("unknown policy: %d", s)
	}
	if s, _ := status("GET", r.admin+"/api/v1/policies/all/keys/not-an-ip"); s != 400 {
		t.Errorf("a bad address: %d", s)
	}
}

// TestBuildInfo: /metrics has limitproxy_build_info = 1 with the version
// the process was started with, the Go version and a revision.
func TestBuildInfo(t *testing.T) {
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 2, "1/h", "")), 0o644) })
	text := scrape(t, strings.TrimPrefix(r.admin, "http://"))
	want := `limitproxy_build_info{goversion="` + runtime.Version() + `",revision="`
	var line string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, "limitproxy_build_info{") {
			line = l
		}
	}
	if !strings.HasPrefix(line, want) || !strings.Contains(line, `,version="`) || !strings.HasSuffix(line, "} 1") {
		t.Errorf("build info %q, want %s…,version=…} 1", line, want)
	}
}
