package fencehttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// fuzzHandler is a server over the reference store whose long polls end at once, so
// no fuzz input can block.
func fuzzHandler(t testing.TB) http.Handler {
	s, err := fencehttp.NewServer(fencehttp.Config{
		Locker: inmem.NewLocker(inmem.Options{}), KV: inmem.NewGuard(),
		MaxWait: time.Millisecond, MaxBodyBytes: 4096, MaxValueBytes: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

// serve runs one request through h and checks the invariants every answer keeps:
// no 5xx, and every error is JSON {"error","code"}. It returns the status and body.
func serve(t *testing.T, h http.Handler, req *http.Request) (int, map[string]any) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code >= 500 {
		t.Fatalf("%s %s: status %d (bad input must be 4xx): %s", req.Method, req.URL, w.Code, w.Body)
	}
	var body map[string]any
	if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v: %q", req.Method, req.URL, err, w.Body)
		}
	}
	if w.Code >= 400 {
		msg, _ := body["error"].(string)
		code, _ := body["code"].(string)
		if msg == "" || code == "" {
			t.Fatalf("%s %s: status %d without a JSON {error, code}: %q", req.Method, req.URL, w.Code, w.Body)
		}
	}
	return w.Code, body
}

func FuzzAcquireRequest(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"ttl_ms":30000}`, `{"ttl_ms":1,"wait_ms":1}`, `{"ttl_ms":-1}`, `{"ttl_ms":1e99}`,
		`{"ttl_ms":null}`, `{"lease":"abc"}`, `{"lease":"0123456789abcdef0123456789abcdef","ttl_ms":100}`, `[`, `{"ttl_ms":1}{}`, "\x00\xff"} {
		for _, action := range []string{"acquire", "renew", "release"} {
			f.Add([]byte(seed), action)
		}
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, action string) {
		path := "/v1/locks/fuzz/" + url.PathEscape(action)
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		status, resp := serve(t, h, req)
		if status == http.StatusOK && action == "acquire" {
			if tok, _ := resp["token"].(float64); tok < 1 || resp["name"] != "fuzz" {
				t.Fatalf("200 to acquire without a name and token: %v", resp)
			}
		}
	})
}

func FuzzKVPutHeaders(f *testing.F) {
	f.Add("1", "", "lock", []byte("v"))
	f.Add("2", "0123456789abcdef0123456789abcdef", "lock", []byte{})
	f.Add("0", "x", "", []byte("v"))
	f.Add("-1", "a b", "%ZZ", []byte("v"))
	f.Add("9007199254740992", "", "lock", []byte("v"))
	f.Add("18446744073709551616", "\x7f", "a%2Fb", []byte("v"))
	f.Add(" 3 ", "", "l\x00", []byte("v"))
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, token, lease, lock string, value []byte) {
		req := httptest.NewRequest(http.MethodPut, "/v1/kv/fuzzkey", strings.NewReader(string(value)))
		// Header values that net/http would refuse to send are skipped: the
		// server never sees them.
		for k, v := range map[string]string{"Fence-Token": token, "Fence-Lease": lease, "Fence-Lock": lock} {
			if strings.ContainsAny(v, "\r\n\x00") {
				return
			}
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		status, resp := serve(t, h, req)
		if status == http.StatusOK {
			tok, err := fence.ParseToken(strings.TrimSpace(token))
			if err != nil || resp["token"] != float64(tok) {
				t.Fatalf("200 for Fence-Token %q: want a valid token echoed, got %v (%v)", token, resp, err)
			}
		}
		if status == http.StatusConflict && resp["code"] == "stale_token" {
			if h, _ := resp["highest"].(float64); h < 1 {
				t.Fatalf("409 stale_token without the highest token: %v", resp)
			}
		}
	})
}

func FuzzLockName(f *testing.F) {
	for _, s := range []string{"a", "jobs/nightly", "a%2Fb", "100%", "with space", "ünïcødé", ".", "..", "a//b", "", "\x00", "\xff", strings.Repeat("x", 256)} {
		f.Add(s)
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, name string) {
		// The client's escaping round-trips every valid name exactly; every invalid
		// one is a 400 JSON error.
		req := httptest.NewRequest(http.MethodGet, "/v1/locks/"+fencehttp.EscapeName(name), nil)
		status, resp := serve(t, h, req)
		if name == "" { // GET /v1/locks/ is the listing
			if _, ok := resp["locks"]; status != http.StatusOK || !ok {
				t.Fatalf("GET /v1/locks/: want 200 with a listing, got %d %v", status, resp)
			}
			return
		}
		if fence.ValidateName(name) != nil {
			if status != http.StatusBadRequest {
				t.Fatalf("invalid name %q: want 400, got %d %v", name, status, resp)
			}
			return
		}
		if status != http.StatusOK || resp["name"] != name {
			t.Fatalf("valid name %q: want 200 with the same name, got %d %v", name, status, resp)
		}
		// Raw paths as a curl user might type them: never a 5xx, always JSON errors.
		if u, err := url.ParseRequestURI("/v1/locks/" + name + "/acquire"); err == nil {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"ttl_ms":1}`))
			r.URL = u
			serve(t, h, r)
		}
	})
}
