package server

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the dashboard's files
	"encoding/hex"
	"net/http"
	"time"
)

// The dashboard (docs/admin-api.md#get-dashboard): one page, its script,
// style sheet and icon, built into the binary so that it works offline. The
// page polls this listener's /metrics, /api/v1/config and /api/v1/top
// itself, and draws its charts with its own script; the server adds for
// it these files and the 15 minutes of history a page opened now starts
// from (history.go).
//
//go:embed dashboard/index.html
var dashboardHTML []byte

//go:embed dashboard/dashboard.js
var dashboardJS []byte

//go:embed dashboard/dashboard.css
var dashboardCSS []byte

//go:embed dashboard/favicon.svg
var dashboardIcon []byte

// dashboardCSP lets the page load its own script, style sheet and icon and
// fetch from its own origin, and nothing else: no inline script or style,
// no frames, no forms that post anywhere.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// registerDashboard adds GET /dashboard, its files under /dashboard/, and
// a redirect from / to the admin mux. None is under /api/: the page
// holds no data and needs no token; its script sends the token the
// operator gives it (in the URL fragment) with its own /api/ requests.
func registerDashboard(mux *http.ServeMux) {
	for _, f := range []struct {
		pattern, file, contentType string
		body                       []byte
	}{
		{"GET /dashboard", "index.html", "text/html; charset=utf-8", dashboardHTML},
		{"GET /dashboard/dashboard.js", "dashboard.js", "text/javascript; charset=utf-8", dashboardJS},
		{"GET /dashboard/dashboard.css", "dashboard.css", "text/css; charset=utf-8", dashboardCSS},
		{"GET /dashboard/favicon.svg", "favicon.svg", "image/svg+xml", dashboardIcon},
	} {
		sum := sha256.Sum256(f.body)
		etag := `"` + hex.EncodeToString(sum[:8]) + `"`
		mux.HandleFunc(f.pattern, func(w http.ResponseWriter, req *http.Request) {
			h := w.Header()
			h.Set("Content-Type", f.contentType)
			h.Set("Content-Security-Policy", dashboardCSP)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("X-Frame-Options", "DENY")
			h.Set("Referrer-Policy", "no-referrer")
			// Revalidated each load, so that an upgraded binary's page is
			// never mixed with a cached script; the ETag makes it cheap.
			h.Set("Cache-Control", "no-cache")
			h.Set("ETag", etag)
			http.ServeContent(w, req, f.file, time.Time{}, bytes.NewReader(f.body))
		})
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, "dashboard", http.StatusFound)
	})
}
