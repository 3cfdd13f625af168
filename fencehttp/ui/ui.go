// Package ui is the live dashboard of `fence serve`: a page at /ui that lists the
// locks, their holders and a countdown to expiry, the grants and releases seen
// between polls, and the stale writes the server refused.
//
// The page is three static files (HTML, CSS, JavaScript; no framework, no build
// step, no external network loads) embedded in the binary. It polls the HTTP API
// (GET /v1/locks and GET /metrics) from the browser; the watch API will replace the
// polling when it exists.
//
// # Authentication
//
// A browser cannot send a bearer token when it loads a page, so the static files
// are served without authentication: they hold no secrets and no lock state. All
// state comes from the API, which keeps its own authentication. When the server
// has auth tokens, the page's API calls are answered 401 and the page asks for a
// token, keeps it in the tab's sessionStorage (gone when the tab closes, never in
// a URL or a cookie, so it cannot leak through logs or be sent by another site)
// and sends it as Authorization: Bearer on every API call.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the dashboard is served under: the page itself is Prefix,
// its assets Prefix + "/" + file.
const Prefix = "/ui"

//go:embed static
var static embed.FS

// contentTypes are the types of the embedded files, by extension: a table of our
// own rather than package mime's, which the machine's mime.types can change.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// csp confines the page to its own origin: no external scripts, styles, fonts,
// images or connections, no inline script, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler returns the handler of the dashboard. It answers GET and HEAD of Prefix
// and Prefix+"/" with the page and Prefix+"/FILE" with an asset; any other path
// under Prefix is 404 and any other method 405, both with a JSON error body as the
// API's. It needs no authentication (see the package doc). Every answer says
// Cache-Control: no-cache with an ETag, so a browser revalidates (a 304 costs a
// round trip, not the file) and never runs an old script after an upgrade.
func Handler() http.Handler {
	assets := make(map[string]asset)
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			ct = "application/octet-stream"
		}
		assets[strings.TrimPrefix(p, "static/")] = asset{body: body, contentType: ct,
			etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil { // the files are compiled in; a failure here is a broken build
		panic("ui: reading the embedded files: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			fail(w, http.StatusMethodNotAllowed, "method_not_allowed",
				"method "+r.Method+" not allowed on "+p+" (allowed: GET, HEAD)")
			return
		}
		name := strings.TrimPrefix(strings.TrimPrefix(p, Prefix), "/")
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		if !ok || (!strings.HasPrefix(p, Prefix+"/") && p != Prefix) {
			fail(w, http.StatusNotFound, "not_found", "no such page: "+p)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		// ServeContent answers If-None-Match (304), HEAD and ranges.
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// fail answers an error as the API does: {"error": "...", "code": "..."}.
func fail(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
