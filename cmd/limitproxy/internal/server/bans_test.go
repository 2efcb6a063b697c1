package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestBansAPI, the whole server over loopback: a client over its limit is
// banned (the third request is rejected, the fourth refused as banned,
// with Retry-After for the ban); GET …/bans lists it at level 1; DELETE
// by the client's key lifts it and resets its counts (204): the list is
// empty and the client's next requests are served as a fresh client's,
// its next rejection a first offence again; lifting a key with no ban is
// 404; a lift by the listed hash lifts the ban only and says so (200).
func TestBansAPI(t *testing.T) {
	r := startFile(t, func(path, up string) {
		text := configText(up, 2, "1/h", "") + "  [policy.ban]\n  duration = \"1h\"\n  escalation = 2\n"
		os.WriteFile(path, []byte(withKeySecret(t, text)), 0o644)
	})
	get := func() (int, string) {
		resp, err := http.Get(r.proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	type ban struct {
		Key   string
		Level int64
		Until string
	}
	list := func() []ban {
		t.Helper()
		resp, err := http.Get(r.admin + "/api/v1/policies/all/bans")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Bans []ban }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("list: %d %v", resp.StatusCode, err)
		}
		return out.Bans
	}
	lift := func(key string) int {
		req, _ := http.NewRequest("DELETE", r.admin+"/api/v1/policies/all/bans/"+key, nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, want := range []int{200, 200, 429} {
		if code, _ := get(); code != want {
			t.Fatalf("request %d: %d, want %d", i+1, code, want)
		}
	}
	code, retry := get()
	if code != 429 || !strings.HasPrefix(retry, "3") || len(retry) != 4 {
		t.Fatalf("banned: %d Retry-After %q, want 429 with about 3600", code, retry)
	}
	// Listed hashed: client keys are hashed before they are stored
	// (docs/security-model.md).
	if bs := list(); len(bs) != 1 || bs[0].Key != testHasher.Key("9:127.0.0.1;") || bs[0].Level != 1 {
		t.Fatalf("bans %+v, want 127.0.0.1's hash at level 1", bs)
	}
	// The client's standing says the ban refuses it, and until when.
	standing := func() map[string]any {
		t.Helper()
		resp, err := http.Get(r.admin + "/api/v1/policies/all/keys/127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("keys: %d %v", resp.StatusCode, err)
		}
		return out
	}
	if s := standing(); s["next_request_allowed"] != false || s["banned_until"] != list()[0].Until || s["ban_level"] != float64(1) || s["retry_after_seconds"].(float64) < 3500 {
		t.Fatalf("standing of a banned client %v, want not allowed, banned_until %s, ban_level 1, retry_after_seconds about 3600", s, list()[0].Until)
	}
	if c := lift("127.0.0.1"); c != 204 {
		t.Fatalf("lift: %d, want 204", c)
	}
	if s := standing(); s["banned_until"] != nil || s["ban_level"] != nil {
		t.Fatalf("standing after the lift %v, want no ban fields", s)
	}
	if bs := list(); len(bs) != 0 {
		t.Fatalf("bans after the lift %+v, want none", bs)
	}
	if c := lift("127.0.0.1"); c != 404 {
		t.Fatalf("lifting again: %d, want 404", c)
	}
	// A fresh start: the quota is whole again, so the lift is not undone
	// by the next request.
	for i, want := range []int{200, 200, 429} {
		if code, _ := get(); code != want {
			t.Fatalf("request %d after the lift: %d, want %d (a fresh client's)", i+1, code, want)
		}
	}
	if bs := list(); len(bs) != 1 || bs[0].Level != 1 {
		t.Fatalf("bans %+v, want a first offence again (the lift forgot the first)", bs)
	}
	if c := lift("_?hash=" + list()[0].Key); c != 200 {
		t.Fatalf("lift by the listed hash: %d, want 200 (the ban lifted, the counts not reset)", c)
	}
	if code, _ := get(); code != 429 {
		t.Fatalf("after a lift by hash: %d, want 429 (the counts are as they were, as the answer said)", code)
	}
	resp, err := http.Get(r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`limitproxy_bans_total{policy="all"} 3`, `limitproxy_requests_total{decision="banned",policy="all"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
