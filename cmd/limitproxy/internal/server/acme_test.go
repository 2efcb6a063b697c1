package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"

	"github.com/limitproxy/limitproxy/policy/config"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestACME runs Pebble, Let's Encrypt's test ACME server, in process on
// loopback, with its validation pointed at limitproxy's own ports:
// limitproxy obtains a certificate for localhost, then serves HTTPS
// through to an upstream, and the client verifies the chain against
// Pebble's root. It runs once with only HTTP-01 reachable (Pebble's
// TLS-ALPN-01 port is a dead one) and once with only TLS-ALPN-01, so that
// each solver is shown to work.
func TestACME(t *testing.T) {
	t.Parallel() // with the other tests; PEBBLE_VA_NOSLEEP is set in TestMain
	// One after the other: certmagic remembers, process-wide, which
	// challenge type last worked for a name, and would offer the other
	// run's (dead) one first.
	t.Run("http-01", func(t *testing.T) { acmeRun(t, true, false) })
	t.Run("tls-alpn-01", func(t *testing.T) { acmeRun(t, false, true) })
}

func acmeRun(t *testing.T, viaHTTP, viaTLS bool) {
	quiet := log.New(io.Discard, "", 0)
	store := db.NewMemoryStore()
	authority := ca.New(quiet, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	httpPort, tlsPort := freePort(t), freePort(t)
	vaHTTP, vaTLS := freePort(t), freePort(t) // nobody listens there
	if viaHTTP {
		vaHTTP = httpPort
	}
	if viaTLS {
		vaTLS = tlsPort
	}
	validator := va.New(quiet, vaHTTP, vaTLS, false, "", store)
	front := wfe.New(quiet, store, validator, authority, nil, false, false, 0, 0) // no Retry-After: the client polls at its own pace
	pebble := httptest.NewTLSServer(front.Handler())
	defer pebble.Close()

	dir := t.TempDir()
	caRoot := filepath.Join(dir, "pebble-https.pem")
	os.WriteFile(caRoot, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pebble.Certificate().Raw}), 0o644)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	path := filepath.Join(dir, "limitproxy.toml")
	text := strings.Replace(configText(up.URL, 100, "100/s", fmt.Sprintf(`[server.tls]
mode = "acme"
domains = ["localhost"]
email = "ops@example.com"
ca = %q
ca_root = %q
storage = %q
http_listen = "127.0.0.1:%d"
`, pebble.URL+"/dir", caRoot, filepath.Join(dir, "certs"), httpPort)), `listen = "127.0.0.1:0"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, tlsPort), 1)
	os.WriteFile(path, []byte(text), 0o644)

	begin := time.Now()
	l, _ := serveFile(t, path, &syncWriter{w: new(bytes.Buffer)})
	t.Logf("certificate obtained from Pebble in %v", time.Since(begin))

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(authority.GetRootCert(0).PEM())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	_, port, _ := net.SplitHostPort(l.Proxy.String())
	resp, err := client.Get("https://localhost:" + port + "/x")
	if err != nil {
		t.Fatalf("HTTPS with the certificate from Pebble: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "upstream" {
		t.Errorf("over HTTPS: %d %q", resp.StatusCode, body)
	}
	if names := resp.TLS.PeerCertificates[0].DNSNames; len(names) != 1 || names[0] != "localhost" {
		t.Errorf("certificate names %v", names)
	}
	// Plain HTTP on http_listen is redirected to HTTPS.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(fmt.Sprintf("http://localhost:%d/a?b=c", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusPermanentRedirect || loc != "https://localhost:"+port+"/a?b=c" {
		t.Errorf("plain HTTP: %d to %q", resp.StatusCode, loc)
	}
}

// TestACMEUnreachableCA: a CA that cannot be reached stops the start with
// an error that names it.
func TestACMEUnreachableCA(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	unreachable := fmt.Sprintf("https://127.0.0.1:%d/dir", freePort(t))
	path := filepath.Join(dir, "limitproxy.toml")
	os.WriteFile(path, []byte(configText(up.URL, 1, "1/s", fmt.Sprintf(`[server.tls]
mode = "acme"
domains = ["localhost"]
ca = %q
storage = %q
http_listen = "127.0.0.1:0"
`, unreachable, filepath.Join(dir, "certs")))), 0o644)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	err = serve(ctx, path, cfg, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), unreachable) {
		t.Errorf("start with an unreachable CA: %v; want an error naming %s", err, unreachable)
	}
}

// acmeNoEmailChildEnv names, in TestACMENoEmailNeverPrompts' child, the
// config file to start with.
const acmeNoEmailChildEnv = "LIMITPROXY_TEST_ACME_NO_EMAIL"

// TestACMENoEmailNeverPrompts: with no email (it is optional), obtaining
// a certificate neither prints certmagic's prompt for one nor reads
// stdin. It runs a child process (the prompt goes to the process's own
// stdout and stdin) whose stdin stays open, as a terminal's would: a
// prompt would block it.
func TestACMENoEmailNeverPrompts(t *testing.T) {
	if path := os.Getenv(acmeNoEmailChildEnv); path != "" {
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		if err := serve(ctx, path, cfg, io.Discard, nil); err == nil {
			t.Error("start with an unreachable CA succeeded")
		}
		return
	}
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "limitproxy.toml")
	os.WriteFile(path, []byte(configText(up.URL, 1, "1/s", fmt.Sprintf(`[server.tls]
mode = "acme"
domains = ["localhost"]
ca = "https://127.0.0.1:%d/dir"
storage = %q
http_listen = "127.0.0.1:0"
`, freePort(t), filepath.Join(dir, "certs")))), 0o644)
	cmd := exec.Command(os.Args[0], "-test.run=^TestACMENoEmailNeverPrompts$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), acmeNoEmailChildEnv+"="+path)
	stdin, err := cmd.StdinPipe() // held open until the child is done
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("child: %v", err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Errorf("the child did not return in 60 s: waiting on stdin?")
	}
	if s := out.String(); strings.Contains(s, "mail address") || !strings.Contains(s, "--- PASS") {
		t.Errorf("the child printed:\n%s", s)
	}
}
