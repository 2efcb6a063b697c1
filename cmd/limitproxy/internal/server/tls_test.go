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

	"github.com/limitproxy/limitproxy/policy/config"
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
// replacing the files switches the served certificate without a restart;
// a broken pair at start is refused with the files named.
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
	os.WriteFile(path, []byte(configText(up.URL, 100, "100/s", fmt.Sprintf(`[server.tls]
mode = "files"
cert_file = %q
key_file = %q
http_listen = "127.0.0.1:0"
`, certFile, keyFile))), 0o644)
	l, _ := serveFile(t, path, &syncWriter{w: new(bytes.Buffer)})

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
	// A half-written renewal (a key that does not match) is ignored.
	os.WriteFile(keyFile, k2, 0o600)
	time.Sleep(1100 * time.Millisecond) // past the once-a-second check
	if s := serial(); s != 1 {
		t.Fatalf("a mismatched pair replaced the certificate: serving %d", s)
	}
	// The renewal completes: the new certificate is served, no restart.
	writeAtomic(t, certFile, string(c2))
	deadline := time.Now().Add(10 * time.Second)
	for serial() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not served within 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
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
