package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// certFiles serves the certificate of [server.tls] mode = "files", and
// picks up new files without a restart: at most once a second, at a
// handshake, it compares the files' modification times with those it
// loaded and loads them again if either changed (a renewal tool replacing
// them is enough; no signal is needed). A renewal that cannot be loaded (a
// half-written pair, a key that does not match) is logged and the
// certificate in use is kept. Safe for concurrent use.
type certFiles struct {
	certFile, keyFile string
	log               *zap.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]time.Time // modification times of the loaded files
	checked time.Time
}

// loadCertFiles loads the pair; an error names the files and why.
func loadCertFiles(certFile, keyFile string, log *zap.Logger) (*certFiles, error) {
	c := &certFiles{certFile: certFile, keyFile: keyFile, log: log.Named("tls")}
	stamp, err := c.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls: cert_file %s, key_file %s: %w", certFile, keyFile, err)
	}
	c.cert, c.stamp, c.checked = &cert, stamp, time.Now()
	return c, nil
}

func (c *certFiles) stamps() ([2]time.Time, error) {
	var s [2]time.Time
	for i, f := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return s, fmt.Errorf("server.tls: %w", err)
		}
		s[i] = fi.ModTime()
	}
	return s, nil
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= time.Second {
		c.checked = now
		if stamp, err := c.stamps(); err == nil && stamp != c.stamp {
			cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
			if err != nil {
				c.log.Warn("new certificate files cannot be loaded; keeping the one in use", zap.String("cert_file", c.certFile), zap.Error(err))
			} else {
				c.cert, c.stamp = &cert, stamp
				c.log.Info("certificate reloaded", zap.String("cert_file", c.certFile))
			}
		}
	}
	return c.cert, nil
}

// redirectToHTTPS answers plain HTTP with a permanent redirect to the same
// URL over HTTPS on tlsPort.
func redirectToHTTPS(tlsPort string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if tlsPort != "443" {
			host = net.JoinHostPort(host, tlsPort)
		}
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}
