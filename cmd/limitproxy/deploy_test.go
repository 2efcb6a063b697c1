package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// specMetrics are docs/operating.md's metric names (TestMetrics checks that the
// binary exports them), plus the one limitproxy adds.
var specMetrics = []string{
	"limitproxy_requests_total", "limitproxy_queue_depth", "limitproxy_queue_wait_seconds",
	"limitproxy_upstream_duration_seconds", "limitproxy_store_errors_total", "limitproxy_store_keys",
	"limitproxy_store_evictions_total", "limitproxy_config_reloads_total", "limitproxy_config_last_reload_successful",
	"limitproxy_admin_unauthorized_total",
}

// TestDashboardMetrics: every limitproxy metric the Grafana dashboard
// queries is one the binary exports, so the two cannot drift apart.
func TestDashboardMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	known := map[string]bool{}
	for _, n := range specMetrics {
		known[n] = true
		for _, s := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(n, "_seconds") {
				known[n+s] = true
			}
		}
	}
	name := regexp.MustCompile(`\blimitproxy_[a-z_]+\b`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, n := range name.FindAllString(tg.Expr, -1) {
				if !known[n] {
					t.Errorf("panel %q queries %s, which limitproxy does not export", p.Title, n)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has only %d queries", queries)
	}
}

// TestSystemdUnitHardened: the systemd unit stays sandboxed: the exposure
// systemd-analyze security computes for it is at most 2.0 ("OK"; it was
// 6.0 "MEDIUM" before hardening). systemd-analyze comes with systemd,
// which this machine image and any systemd host have.
func TestSystemdUnitHardened(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed: %v", err)
	}
	unit, _ := filepath.Abs("../../deploy/limitproxy.service")
	cmd := exec.Command(bin, "security", "--offline=true", unit)
	cmd.Dir = t.TempDir()
	out, _ := cmd.CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for limitproxy\.service: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	if level > 2.0 {
		t.Errorf("exposure %s %s, want at most 2.0 (OK)", m[1], m[2])
	}
}
