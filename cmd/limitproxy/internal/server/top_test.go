package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestTopOffenders, the whole server over loopback: three addresses send
// 10, 5 and 1 requests to a policy of burst 2; GET /api/v1/top lists the
// rejected ones, most first, with exact counts (8 and 3, error 0: fewer
// keys than the sketch holds), hashed by default (16 hex digits, the same
// for the same key) and raw with top_keys = "raw"; the closest to their
// limits, the two spent ones first and the one that used half. No key
// appears in /metrics.
func TestTopOffenders(t *testing.T) {
	t.Parallel()
	for _, raw := range []bool{false, true} {
		r := startFile(t, func(path, up string) {
			text := configText(up, 2, "1/h", "")
			text = strings.Replace(text, "[server]\n", "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n", 1)
			if raw {
				text = strings.Replace(text, "[admin]\n", "[admin]\ntop_keys = \"raw\"\n", 1)
			}
			os.WriteFile(path, []byte(text), 0o644)
		})
		send := func(ip string, n int) {
			for range n {
				req, _ := http.NewRequest("GET", r.proxy+"/x", nil)
				req.Header.Set("X-Forwarded-For", ip)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		send("10.0.0.1", 10)
		send("10.0.0.2", 5)
		send("10.0.0.3", 1)
		resp, err := http.Get(r.admin + "/api/v1/top?n=5")
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Policies []struct {
				Policy        string
				TotalRejected uint64 `json:"total_rejected"`
				ErrorBound    uint64 `json:"error_bound"`
				Keys          string
				Rejected      []struct {
					Key          string
					Count, Error uint64
				}
				Closest []struct {
					Key  string
					Used float64
				}
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || len(out.Policies) != 1 {
			t.Fatalf("top: %v %+v", err, out)
		}
		p := out.Policies[0]
		if p.Policy != "all" || p.TotalRejected != 11 || p.ErrorBound != 1 || len(p.Rejected) != 2 ||
			p.Rejected[0].Count != 8 || p.Rejected[1].Count != 3 || p.Rejected[0].Error != 0 {
			t.Fatalf("rejected: %+v", p)
		}
		if len(p.Closest) != 3 || p.Closest[0].Used != 1 || p.Closest[1].Used != 1 || p.Closest[2].Used != 0.5 {
			t.Fatalf("closest: %+v", p.Closest)
		}
		hexKey := regexp.MustCompile(`^[0-9a-f]{16}$`)
		switch {
		case raw && (p.Keys != "raw" || p.Rejected[0].Key != "10.0.0.1" || p.Rejected[1].Key != "10.0.0.2" || p.Closest[2].Key != "10.0.0.3"):
			t.Errorf("raw keys: %+v", p)
		case !raw && (p.Keys != "hashed" || !hexKey.MatchString(p.Rejected[0].Key) || p.Rejected[0].Key == p.Rejected[1].Key ||
			(p.Closest[0].Key != p.Rejected[0].Key && p.Closest[1].Key != p.Rejected[0].Key)):
			t.Errorf("hashed keys: %+v", p)
		}
		resp, err = http.Get(r.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "10.0.0.") {
			t.Error("a client address appears in /metrics")
		}
		r.stop()
	}
}

// TestTopOffendersCountBans: a brute-forcer banned at its first offence
// and refused 20 more times by the ban is the top offender with all 21
// refusals, not the one rejection that began the ban; the metrics count
// its refusals as decision "banned".
func TestTopOffendersCountBans(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) {
		text := configText(up, 2, "1/h", "")
		text = strings.Replace(text, "[server]\n", "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n", 1)
		text = strings.Replace(text, "[admin]\n", "[admin]\ntop_keys = \"raw\"\n", 1)
		text += "  [policy.ban]\n  duration = \"1h\"\n"
		os.WriteFile(path, []byte(text), 0o644)
	})
	statuses := map[int]int{}
	for range 23 {
		req, _ := http.NewRequest("GET", r.proxy+"/login", nil)
		req.Header.Set("X-Forwarded-For", "10.0.0.9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	if statuses[200] != 2 || statuses[429] != 21 {
		t.Fatalf("statuses %v, want 2 admitted and 21 refused", statuses)
	}
	resp, err := http.Get(r.admin + "/api/v1/policies/all/top")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		TotalRejected uint64 `json:"total_rejected"`
		Rejected      []struct {
			Key   string
			Count uint64
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil || p.TotalRejected != 21 || len(p.Rejected) != 1 || p.Rejected[0].Key != "10.0.0.9" || p.Rejected[0].Count != 21 {
		t.Fatalf("top: %v %+v, want 10.0.0.9 refused 21 times", err, p)
	}
	resp, err = http.Get(r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`limitproxy_requests_total{decision="banned",policy="all"} 20`, `limitproxy_requests_total{decision="rejected",policy="all"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
