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

// TestDashboardMetrics: every limitproxy metric the Grafana dashboard
// queries is one docs/metrics.md lists (and the server's and proxy's
// metric tests scrape those from the binary), so they cannot drift apart.
func TestDashboardMetrics(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile("(?m)^\\| `(limitproxy_[a-z_]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(documented) < 20 {
		t.Fatalf("docs/metrics.md lists only %d metrics", len(documented))
	}
	raw, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Name string } }
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	known := map[string]bool{}
	for _, m := range documented {
		n := m[1]
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

	// Every query of every panel follows the dashboard's variables: job
	// and instance always, policy where the metric has a policy label
	// (docs/metrics.md's labels column).
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"job", "instance", "policy"} {
		if !vars[v] {
			t.Errorf("the dashboard has no $%s variable", v)
		}
	}
	byPolicy := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(limitproxy_[a-z_]+)` \\| [a-z]+ \\| ([^|]*)\\|").FindAllStringSubmatch(string(doc), -1) {
		if strings.Contains(m[2], "`policy`") {
			byPolicy[m[1]] = true
		}
	}
	if !byPolicy["limitproxy_requests_total"] {
		t.Fatal("docs/metrics.md's table gives limitproxy_requests_total no policy label: the labels column was not read")
	}
	selector := regexp.MustCompile(`\b((?:limitproxy|process|go)_[a-z_]+)(\{[^}]*\})?`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				base := m[1]
				for _, s := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(base, s); ok && strings.HasSuffix(b, "_seconds") {
						base = b
					}
				}
				want := []string{`job=~"$job"`, `instance=~"$instance"`}
				if byPolicy[base] {
					want = append(want, `policy=~"$policy"`)
				}
				for _, w := range want {
					if !strings.Contains(m[2], w) {
						t.Errorf("panel %q: %s%s lacks %s", p.Title, m[1], m[2], w)
					}
				}
			}
		}
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
