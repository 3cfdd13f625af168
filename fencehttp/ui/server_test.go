package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// With auth tokens, the server answers the dashboard's files without a token (a
// browser cannot send one to load a page) and still refuses the API without one.
func TestServer_DashboardWithoutAuth_APIWithAuth(t *testing.T) {
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), AuthTokens: [][]byte{[]byte("s3cret")}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	do := func(path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/ui", "/ui/", "/ui/app.js", "/ui/style.css"} {
		if code, b := do(p, ""); code != 200 || strings.Contains(b, "s3cret") {
			t.Errorf("GET %s without a token: want 200 without the secret, got %d", p, code)
		}
	}
	for _, p := range []string{"/v1/locks", "/metrics", "/ui/../v1/locks", "/uix"} {
		if code, _ := do(p, ""); code != 401 && code != 400 {
			t.Errorf("GET %s without a token: want 401 (or 400 for a dot segment), got %d", p, code)
		}
	}
	if code, b := do("/v1/locks", "s3cret"); code != 200 {
		t.Errorf("GET /v1/locks with the token: want 200, got %d %s", code, b)
	}
	if code, _ := do("/ui/nope", ""); code != 404 {
		t.Errorf("GET /ui/nope: want 404, got %d", code)
	}
}
