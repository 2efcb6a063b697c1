package replay

// Replay of a log whose keys are not valid UTF-8. The test is named for
// the behaviour that must hold; its comment describes the defect it was
// written to show, since fixed.

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
)

// sendHeader sends a GET of path to addr with the header name, value
// pairs given and returns the status, or 0 after t.Error.
func sendHeader(t *testing.T, addr, path string, header ...string) int {
	req, _ := http.NewRequest("GET", addr+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReplayKeepsInvalidUTF8Keys: HTTP allows obs-text (bytes >= 0x80)
// in header values, and the proxy keys on them byte for byte; the access
// log (zap's JSON) writes every invalid UTF-8 byte as U+FFFD, so two
// clients whose keys differ only there become one key in the replay. The
// live proxy admitted both (limit 1 each); the replay of its own log
// against the same configuration rejects one.
func TestReplayKeepsInvalidUTF8Keys(t *testing.T) {
	const cfg = `
[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "info"
access_replay = true
[[upstream]]
name = "up"
targets = ["UPSTREAM"]
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`
	codes := map[string]int{}
	cfgPath, logPath := record(t, cfg, okUpstream, func(addr string) {
		for _, k := range []string{"key-\xff", "key-\xfe"} {
			codes[k] = sendHeader(t, addr, "/x", "X-API-Key", k)
		}
	})
	if codes["key-\xff"] != 200 || codes["key-\xfe"] != 200 {
		t.Fatalf("live: %v, want both admitted (two keys)", codes)
	}
	rep, err := Run(context.Background(), Options{Config: cfgPath, Logs: []string{logPath}, RawKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Logged) != 1 || rep.Logged[0].Agreed != rep.Logged[0].Compared || rep.Logged[0].Compared != 2 {
		var text bytes.Buffer
		rep.WriteText(&text)
		t.Errorf("replay of its own log: %+v, want 2 of 2 agreed\n%s", rep.Logged, text.String())
	}
}
