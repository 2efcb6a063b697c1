package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/policy/config"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// selfSigned returns a PEM certificate and key for 127.0.0.1 with the
// given serial number, and the certificate itself (its own root).
func selfSigned(t *testing.T, serial int64) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "limitproxy test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cert, _ = x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), cert
}

// TestTLSFiles: HTTPS from certificate files, through to the upstream;
// replacing the files switches the served certificate without a restart
// (a half-written renewal is logged and ignored); a broken pair at start
// is refused with the files named. The files are looked at once a second
// by the real clock; TestCertFilesCheck pins that on a test's clock.
func TestTLSFiles(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1, x1 := selfSigned(t, 1)
	c2, k2, x2 := selfSigned(t, 2)
	os.WriteFile(certFile, c1, 0o600)
	os.WriteFile(keyFile, k1, 0o600)
	path := filepath.Join(dir, "limitproxy.toml")
	os.WriteFile(path, []byte(strings.Replace(configText(up.URL, 100, "100/s", fmt.Sprintf(`[server.tls]
mode = "files"
cert_file = %q
key_file = %q
http_listen = "127.0.0.1:0"
`, certFile, keyFile)), `level = "error"`, `level = "warn"`, 1)), 0o644)
	logs := &syncWriter{w: new(bytes.Buffer)}
	l, _ := serveFile(t, path, logs)

	roots := x509.NewCertPool()
	roots.AddCert(x1)
	roots.AddCert(x2)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
	serial := func() int64 {
		t.Helper()
		resp, err := client.Get("https://" + l.Proxy.String() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "upstream" {
			t.Fatalf("over HTTPS: %d %q", resp.StatusCode, body)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 1 {
		t.Fatalf("serving certificate %d, want 1", s)
	}
	// A half-written renewal (a key that does not match) is ignored: the
	// handshakes go on with the certificate in use until one, a second
	// after the start, has the files looked at and the pair refused.
	os.WriteFile(keyFile, k2, 0o600)
	poll.For(t, 10*time.Second, func() bool {
		if s := serial(); s != 1 {
			t.Fatalf("a mismatched pair replaced the certificate: serving %d", s)
		}
		return strings.Contains(logs.String(), "new certificate files cannot be loaded")
	}, "no handshake had the mismatched pair refused")
	if s := serial(); s != 1 {
		t.Fatalf("a mismatched pair replaced the certificate: serving %d", s)
	}
	// The renewal completes: the new certificate is served, no restart.
	writeAtomic(t, certFile, string(c2))
	poll.For(t, 10*time.Second, func() bool { return serial() == 2 }, "the renewed certificate was not served")
	// A broken pair at start: a clear error naming the files.
	os.WriteFile(keyFile, []byte("not a key"), 0o600)
	cfg := strings.Replace(configText(up.URL, 1, "1/s", ""), "[admin]\nlisten = \"127.0.0.1:0\"", "[admin]\nlisten = \"\"", 1)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte(cfg+fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\n", certFile, keyFile)), 0o644)
	badCfg, err := config.Load(bad)
	if err != nil {
		t.Fatal(err)
	}
	err = serve(t.Context(), bad, badCfg, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "key_file "+keyFile) {
		t.Errorf("a broken key at start: %v, want an error naming the files", err)
	}
}

// TestCertFilesCheck: the files are looked at, at a handshake, once every
// second of the clock and not more often; a pair that does not match is
// logged and the certificate in use kept; the completed renewal is served
// at the first look after it.
func TestCertFilesCheck(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1, _ := selfSigned(t, 1)
	c2, k2, _ := selfSigned(t, 2)
	os.WriteFile(certFile, c1, 0o600)
	os.WriteFile(keyFile, k1, 0o600)
	core, logs := observer.New(zapcore.InfoLevel)
	c, err := loadCertFiles(certFile, keyFile, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	now := c.checked
	c.now = func() time.Time { return now }
	serial := func() int64 {
		t.Helper()
		cert, err := c.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		x, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.SerialNumber.Int64()
	}
	warnings := func() int {
		return logs.FilterMessage("new certificate files cannot be loaded; keeping the one in use").Len()
	}
	// A half-written renewal: the new key, the old certificate.
	os.WriteFile(keyFile, k2, 0o600)
	now = now.Add(999 * time.Millisecond)
	if s, w := serial(), warnings(); s != 1 || w != 0 {
		t.Fatalf("999ms after the load: serving %d, %d warnings; want 1 and no look at the files", s, w)
	}
	now = now.Add(time.Millisecond)
	if s, w := serial(), warnings(); s != 1 || w != 1 {
		t.Fatalf("a second after the load, a mismatched pair: serving %d, %d warnings; want 1 and 1", s, w)
	}
	// The renewal completes; the next look is a second after the last.
	os.WriteFile(certFile, c2, 0o600)
	now = now.Add(999 * time.Millisecond)
	if s := serial(); s != 1 {
		t.Fatalf("999ms after the last look: serving %d, want still 1", s)
	}
	now = now.Add(time.Millisecond)
	if s := serial(); s != 2 {
		t.Fatalf("a second after the last look, the renewed pair: serving %d, want 2", s)
	}
	if n := logs.FilterMessage("certificate reloaded").Len(); n != 1 || warnings() != 1 {
		t.Errorf("%d reloads and %d warnings logged, want 1 and 1", n, warnings())
	}
}
