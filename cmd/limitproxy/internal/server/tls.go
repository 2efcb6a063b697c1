package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/policy/config"
)

// certFiles serves the certificate of [server.tls] mode = "files", and
// picks up new files without a restart: at a handshake, at most once per
// every (a second), it compares the files' modification times with those it
// loaded and loads them again if either changed (a renewal tool replacing
// them is enough; no signal is needed). A renewal that cannot be loaded (a
// half-written pair, a key that does not match) is logged and the
// certificate in use is kept. Safe for concurrent use.
type certFiles struct {
	certFile, keyFile string
	log               *zap.Logger
	now               func() time.Time // time.Now; a test's clock
	every             time.Duration    // the least time between two looks at the files

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]time.Time // modification times of the loaded files
	checked time.Time
}

// loadCertFiles loads the pair; an error names the files and why.
func loadCertFiles(certFile, keyFile string, log *zap.Logger) (*certFiles, error) {
	c := &certFiles{certFile: certFile, keyFile: keyFile, log: log.Named("tls"), now: time.Now, every: time.Second}
	stamp, err := c.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls: cert_file %s, key_file %s: %w", certFile, keyFile, err)
	}
	c.cert, c.stamp, c.checked = &cert, stamp, c.now()
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
	if now := c.now(); now.Sub(c.checked) >= c.every {
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

// acme is [server.tls] mode = "acme": certmagic, built explicitly (its own
// cache and config; never certmagic.Default or DefaultACME).
type acme struct {
	cfg    *certmagic.Config
	cache  *certmagic.Cache
	issuer *certmagic.ACMEIssuer
	t      *config.TLS
}

// newACME prepares certificate management for t. tlsPort and httpPort are
// the ports the CA will reach for TLS-ALPN-01 and HTTP-01 (the proxy's own
// listeners, which must serve tlsConfig and challenge before obtain runs).
func newACME(t *config.TLS, tlsPort, httpPort int, log *zap.Logger) (*acme, error) {
	var roots *x509.CertPool
	if t.CARoot != "" {
		pemBytes, err := os.ReadFile(t.CARoot)
		if err != nil {
			return nil, fmt.Errorf("server.tls.ca_root: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("server.tls.ca_root %s: no PEM certificate in it", t.CARoot)
		}
	}
	a := &acme{t: t}
	log = log.Named("tls")
	a.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return a.cfg, nil },
		Logger:           log,
	})
	a.cfg = certmagic.New(a.cache, certmagic.Config{Storage: &certmagic.FileStorage{Path: t.Storage}, Logger: log})
	a.issuer = certmagic.NewACMEIssuer(a.cfg, certmagic.ACMEIssuer{
		CA: t.CA, Email: t.Email, Agreed: true, TrustedRoots: roots,
		// The challenges are answered by the proxy's own listeners: on
		// these ports certmagic finds them in use and relies on them.
		AltHTTPPort: httpPort, AltTLSALPNPort: tlsPort, Logger: log,
	})
	a.cfg.Issuers = []certmagic.Issuer{a.issuer}
	if t.Email == "" {
		// Only then would certmagic prompt; with an email the issuer
		// stays certmagic's own, which renewals tell the CA (ARI) what
		// certificate they replace with.
		a.cfg.Issuers[0] = quietIssuer{a.issuer}
	}
	return a, nil
}

// quietIssuer is certmagic's ACME issuer whose pre-check never prompts.
// ManageSync obtains "interactively": an issuer without an email (email
// is optional) would print a prompt for one on stdout, read the
// process's stdin (blocking a proxy started from a terminal) and write
// certmagic.DefaultACME, a global the other configs read. certmagic's
// background renewals already pre-check this way. (Wrapped, it loses
// one thing: certmagic tells the CA which certificate a renewal replaces
// only for its own issuer type.)
type quietIssuer struct{ *certmagic.ACMEIssuer }

// PreCheck is the ACME issuer's, never interactive.
func (q quietIssuer) PreCheck(ctx context.Context, names []string, _ bool) error {
	return q.ACMEIssuer.PreCheck(ctx, names, false)
}

// tlsConfig serves the managed certificates and TLS-ALPN-01 challenges.
func (a *acme) tlsConfig() *tls.Config {
	c := a.cfg.TLSConfig()
	c.MinVersion = tls.VersionTLS12
	c.NextProtos = append([]string{"h2", "http/1.1"}, c.NextProtos...)
	return c
}

// challenge answers HTTP-01 challenges, and passes everything else to next.
func (a *acme) challenge(next http.Handler) http.Handler { return a.issuer.HTTPChallengeHandler(next) }

// obtain gets (or loads from storage) certificates for every domain and
// keeps them renewed in the background; renewal failures are logged and
// retried by certmagic, never fatal. An error names the domains, the CA
// and why.
func (a *acme) obtain(ctx context.Context) error {
	if err := a.cfg.ManageSync(ctx, a.t.Domains); err != nil {
		return fmt.Errorf("server.tls: obtaining certificates for %s from %s: %w", strings.Join(a.t.Domains, ", "), a.t.CA, err)
	}
	return nil
}

func (a *acme) stop() { a.cache.Stop() }
