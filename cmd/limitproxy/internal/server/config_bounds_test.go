package server

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadFIFO: a FIFO saved at the config path of a running instance is
// refused by every reload, at once; the policies in force keep serving,
// later reloads still work, and the instance stops promptly.
func TestReloadFIFO(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 10, "1/h", "")), 0o644) })
	os.Remove(r.path)
	if err := syscall.Mkfifo(r.path, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		begin := time.Now()
		resp, err := http.Post(r.admin+"/api/v1/reload", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Errors []struct{ Error string } }
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 422 || len(body.Errors) == 0 || !strings.Contains(body.Errors[0].Error, "is not a regular file (a FIFO)") {
			t.Errorf("reload of a FIFO: %d %+v", resp.StatusCode, body)
		}
		if took := time.Since(begin); took > time.Second {
			t.Errorf("reload of a FIFO took %v", took)
		}
	}
	if q := r.quota(t); q != "10" {
		t.Errorf("the policies in force changed: quota %s", q)
	}
	os.Remove(r.path)
	writeAtomic(t, r.path, configText(r.upstream.URL, 12, "1/h", ""))
	r.waitQuota(t, "12")
	begin := time.Now()
	r.stop()
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("stopping took %v", took)
	}
}
