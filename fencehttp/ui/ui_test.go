package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, vs := range header {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandler_ServesIndex(t *testing.T) {
	h := Handler()
	index, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/ui", "/ui/", "/ui/index.html"} {
		resp := get(t, h, http.MethodGet, p, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: want 200, got %d", p, resp.StatusCode)
		}
		if got := body(t, resp); got != string(index) {
			t.Fatalf("GET %s: want index.html (%d bytes), got %d bytes", p, len(index), len(got))
		}
	}
}

func TestHandler_Headers(t *testing.T) {
	h := Handler()
	for path, want := range map[string]string{
		"/ui":           "text/html; charset=utf-8",
		"/ui/app.js":    "text/javascript; charset=utf-8",
		"/ui/style.css": "text/css; charset=utf-8",
	} {
		resp := get(t, h, http.MethodGet, path, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: want 200, got %d", path, resp.StatusCode)
		}
		for k, v := range map[string]string{
			"Content-Type":           want,
			"Cache-Control":          "no-cache",
			"X-Content-Type-Options": "nosniff",
			"X-Frame-Options":        "DENY",
		} {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("GET %s: %s: want %q, got %q", path, k, v, got)
			}
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %q", path, csp, d)
			}
		}
		etag := resp.Header.Get("ETag")
		if !regexp.MustCompile(`^"[0-9a-f]{24}"$`).MatchString(etag) {
			t.Fatalf("GET %s: want a strong ETag, got %q", path, etag)
		}
		again := get(t, h, http.MethodGet, path, http.Header{"If-None-Match": {etag}})
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s: want 304, got %d", path, etag, again.StatusCode)
		}
		head := get(t, h, http.MethodHead, path, nil)
		if head.StatusCode != http.StatusOK || body(t, head) != "" {
			t.Errorf("HEAD %s: want 200 and no body, got %d", path, head.StatusCode)
		}
	}
}

func TestHandler_EveryFileHasAType(t *testing.T) {
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		resp := get(t, Handler(), http.MethodGet, "/ui/"+strings.TrimPrefix(p, "static/"), nil)
		if ct := resp.Header.Get("Content-Type"); ct == "application/octet-stream" || ct == "" {
			t.Errorf("%s: served as %q; add its extension to contentTypes", p, ct)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHandler_Refusals(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/ui/nope.js", 404, "not_found"},
		{http.MethodGet, "/ui/static/app.js", 404, "not_found"},
		{http.MethodGet, "/uiapp.js", 404, "not_found"},
		{http.MethodPost, "/ui", 405, "method_not_allowed"},
		{http.MethodPut, "/ui/app.js", 405, "method_not_allowed"},
	} {
		resp := get(t, h, tc.method, tc.path, nil)
		b := body(t, resp)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" ||
			!strings.Contains(b, `"code":"`+tc.code+`"`) || !strings.HasPrefix(b, `{"error":"`) {
			t.Errorf("%s %s: want %d JSON code %q, got %d %q %s", tc.method, tc.path, tc.status, tc.code,
				resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
	if got := get(t, h, http.MethodDelete, "/ui", nil).Header.Get("Allow"); got != "GET, HEAD" {
		t.Errorf("DELETE /ui: Allow: want %q, got %q", "GET, HEAD", got)
	}
}

// externalRef matches a URL with a scheme, a protocol-relative URL, or a CSS import.
var externalRef = regexp.MustCompile(`(?i)\b(?:https?|wss?|ftp):|["'(=\s]//[a-z0-9.-]+\.[a-z]{2,}|@import`)

// The page loads nothing from another origin: no CDN, no web fonts, no analytics.
// The Content-Security-Policy enforces it in the browser; this keeps the files
// honest. A URL with a scheme, or a protocol-relative one, is refused in any file;
// in the page, every src and href must be a file of ours or an empty data: URL.
func TestAssets_NoExternalURL(t *testing.T) {
	ref := regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*"([^"]*)"`)
	files := 0
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := externalRef.FindString(line); m != "" {
				t.Errorf("%s:%d: external reference %q in %q", p, i+1, m, strings.TrimSpace(line))
			}
		}
		if strings.HasSuffix(p, ".html") {
			for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
				u := m[1]
				if u == "data:," {
					continue
				}
				if !strings.HasPrefix(u, Prefix+"/") {
					t.Errorf("%s: reference %q is not under %s/", p, u, Prefix)
					continue
				}
				if _, err := static.ReadFile("static/" + strings.TrimPrefix(u, Prefix+"/")); err != nil {
					t.Errorf("%s: reference %q names no embedded file", p, u)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 3 {
		t.Fatalf("want at least index.html, app.js and style.css embedded, got %d files", files)
	}
}

// The checker above must be able to fail.
func TestAssets_NoExternalURL_Catches(t *testing.T) {
	for _, bad := range []string{
		`<script src="https://cdn.example.com/x.js">`,
		`<link href="//fonts.googleapis.com/css">`,
		`@import url(fonts.css);`,
		`fetch('http://10.0.0.1/v1/locks')`,
		`new WebSocket("wss://x.example.org")`,
	} {
		if externalRef.FindString(bad) == "" {
			t.Errorf("the external-URL check misses %q", bad)
		}
	}
}
