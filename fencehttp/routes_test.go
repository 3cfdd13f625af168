package fencehttp_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
)

// The HTTP edges of issue 29: action words route by the last raw segment for
// every method, Allow headers list what each route serves, GET / goes to the
// dashboard, scoped tokens read the route as the router does, and what net/http
// answers itself before any handler is pinned.

var lockActions = []string{"acquire", "renew", "release", "revoke", "heal"}

// sendNoBody sends method on url without a body, with hc (nil: one that does not
// follow redirects), and returns the answer, its JSON decoded unless it is a
// HEAD's.
func sendNoBody(t *testing.T, hc *http.Client, method, url string) answer {
	t.Helper()
	if hc == nil {
		hc = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	req, err := http.NewRequestWithContext(ctxFor(t), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodHead {
		return send(t, hc, req)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("HEAD %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, raw: string(data)}
}

// When the last raw segment is an action word, the path is that action's route
// for every method: GET /v1/locks/x/acquire answered 200 as the state of a lock
// "x/acquire"; now every method but POST is 405 with Allow: POST.
func TestServer_ActionPath_OtherMethods405AllowPOST(t *testing.T) {
	base := shared.srv.URL
	name := fencehttp.EscapeName(uniq(t, "x"))
	for _, action := range lockActions {
		for _, method := range []string{"GET", "HEAD", "PUT", "DELETE", "PATCH"} {
			for _, path := range []string{"/v1/locks/" + name + "/" + action, "/v1/locks/jobs/nightly/" + action} {
				a := sendNoBody(t, nil, method, base+path)
				if a.status != http.StatusMethodNotAllowed || a.header.Get("Allow") != "POST" {
					t.Errorf("%s %s: want 405 with Allow: POST, got %d Allow %q %s", method, path, a.status, a.header.Get("Allow"), a.raw)
					continue
				}
				if method != "HEAD" {
					wantError(t, method+" "+path, a, http.StatusMethodNotAllowed, "method_not_allowed")
				}
			}
		}
	}
	// Nothing was read or taken: the lock "x/acquire" was never the route.
	if a := call(t, "GET", base+"/v1/locks/"+name+"%2Facquire", "", nil); a.status != 200 || a.json["held"] != false || a.json["last_token"] != nil {
		t.Fatalf("the lock %s/acquire after the 405s: want 200, free and never granted, got %d %s", name, a.status, a.raw)
	}
}

// A lock whose name ends in an action word is addressed with that slash
// escaped, as EscapeName (and so the Client) sends it: its acquire, state and
// release work. The same name with the slash unescaped is the action's route on
// the name before it, and an escaped action word after an unescaped slash is
// refused, since a proxy normalising escapes would make it the action's route.
func TestServer_LockNamedAfterAnAction_AddressedEscaped(t *testing.T) {
	base := shared.srv.URL
	if got := fencehttp.EscapeName("x/acquire"); got != "x%2Facquire" {
		t.Fatalf(`EscapeName("x/acquire") = %q; want "x%%2Facquire"`, got)
	}
	for _, action := range lockActions {
		name := uniq(t, "x") + "/" + action
		esc := fencehttp.EscapeName(name)
		a := call(t, "POST", base+"/v1/locks/"+esc+"/acquire", `{"ttl_ms":60000}`, nil)
		if a.status != 200 || a.json["name"] != name {
			t.Fatalf("acquire %q as %s: want 200 with its name, got %d %s", name, esc, a.status, a.raw)
		}
		if st := call(t, "GET", base+"/v1/locks/"+esc, "", nil); st.status != 200 || st.json["name"] != name || st.json["held"] != true {
			t.Fatalf("GET %s: want the lock %q held, got %d %s", esc, name, st.status, st.raw)
		}
		if st := call(t, "POST", base+"/v1/locks/"+esc+"/release", `{"lease":"`+a.json["lease"].(string)+`"}`, nil); st.status != 200 {
			t.Fatalf("release %q: want 200, got %d %s", name, st.status, st.raw)
		}
		// Through the Client, which escapes every name.
		lease, err := shared.client.Acquire(ctxFor(t), name, time.Minute)
		if err != nil || lease.Name() != name {
			t.Fatalf("Client.Acquire(%q): %v", name, err)
		}
		info, err := shared.client.Inspect(ctxFor(t), name)
		if err != nil || !info.Held || info.Token != lease.Token() {
			t.Fatalf("Client.Inspect(%q): want held with token %d, got %+v, %v", name, lease.Token(), info, err)
		}
		if err := lease.Release(ctxFor(t)); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
		// x/%61cquire: "acquire" with an escaped letter, after an unescaped '/'.
		odd := strings.Replace(esc, "%2F"+action, fmt.Sprintf("/%%%02X%s", action[0], action[1:]), 1)
		for _, method := range []string{"GET", "HEAD"} {
			if a := sendNoBody(t, nil, method, base+"/v1/locks/"+odd); a.status != 400 {
				t.Fatalf("%s %s: want 400, got %d %s", method, odd, a.status, a.raw)
			} else if method == "GET" {
				wantError(t, "GET "+odd, a, 400, "invalid")
			}
		}
	}
}

// Each route's Allow header lists exactly the methods it serves: every other
// method is 405 with that list, and no listed method is 405. /v1/locks/{name}
// listed POST, which answered 404.
func TestServer_AllowHeaders_ListWhatEachRouteServes(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	routes := []struct{ path, allow string }{
		{"/", "GET, HEAD"},
		{"/healthz", "GET, HEAD"},
		{"/readyz", "GET, HEAD"},
		{"/metrics", "GET, HEAD"},
		{"/v1/openapi.json", "GET, HEAD"},
		{"/ui", "GET, HEAD"},
		{"/ui/app.js", "GET, HEAD"},
		{"/v1/locks", "GET, HEAD"},
		{"/v1/locks/", "GET, HEAD"},
		{"/v1/locks/x", "GET, HEAD"},
		{"/v1/locks/jobs/x", "GET, HEAD"},
		{"/v1/locks/x/bogus", "GET, HEAD"}, // the lock "x/bogus"
		{"/v1/locks/acquire", "GET, HEAD"}, // the lock "acquire": an action needs a name before it
		{"/v1/locks/x%2Facquire", "GET, HEAD"},
		{"/v1/locks/x/acquire", "POST"},
		{"/v1/locks/x/renew", "POST"},
		{"/v1/locks/x/release", "POST"},
		{"/v1/locks/x/revoke", "POST"},
		{"/v1/locks/x/heal", "POST"},
		{"/v1/kv/k", "GET, HEAD, PUT, DELETE"},
		{"/v1/fences/k", "POST"},
	}
	for _, rt := range routes {
		allow := strings.Split(rt.allow, ", ")
		for _, method := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
			if rt.path == "/v1/kv/k" && method == "DELETE" {
				continue // the fenced delete of a key: its own handler's, tested with it
			}
			a := sendNoBody(t, nil, method, hs.URL+rt.path)
			listed := false
			for _, m := range allow {
				listed = listed || m == method
			}
			switch {
			case listed && a.status == http.StatusMethodNotAllowed:
				t.Errorf("%s %s: 405 (%s), but the route's Allow lists %s", method, rt.path, a.raw, method)
			case !listed && (a.status != http.StatusMethodNotAllowed || a.header.Get("Allow") != rt.allow):
				t.Errorf("%s %s: want 405 with Allow %q, got %d Allow %q %s", method, rt.path, rt.allow, a.status, a.header.Get("Allow"), a.raw)
			case !listed && method != "HEAD" && a.json["code"] != "method_not_allowed":
				t.Errorf("%s %s: 405 without the JSON code: %s", method, rt.path, a.raw)
			}
		}
	}
	// A path no route has is 404 whatever the method, never 405: /v1/batch, a
	// route of older servers, too.
	for _, method := range []string{"GET", "POST", "DELETE"} {
		for _, path := range []string{"/v1/nope", "/v1/batch"} {
			wantError(t, method+" "+path, call(t, method, hs.URL+path, "", nil), http.StatusNotFound, "not_found")
		}
	}
}

// GET / redirects to the dashboard, without a token on a server with auth (as
// the dashboard's page itself), and the page is there.
func TestServer_GetRoot_RedirectsToDashboard(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{AuthTokens: [][]byte{[]byte("s3cret")}})
	for _, method := range []string{"GET", "HEAD"} {
		a := sendNoBody(t, nil, method, hs.URL+"/")
		if a.status != http.StatusFound || a.header.Get("Location") != "/ui" || a.raw != "" {
			t.Fatalf("%s /: want 302 to /ui without a body, got %d Location %q %q", method, a.status, a.header.Get("Location"), a.raw)
		}
	}
	resp, err := hs.Client().Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(page), "/ui/app.js") {
		t.Fatalf("GET / followed: want the dashboard's page at /ui, got %d at %s %q", resp.StatusCode, resp.Request.URL.Path, resp.Header.Get("Content-Type"))
	}
}

// A malformed percent escape in the request target (GET /v1/locks/%zz) is
// refused by net/http while it reads the request, before any handler: a plain
// text 400 and the connection closed, not the API's JSON. The server's docs say
// so; this pins what it answers.
func TestServer_MalformedEscapeInPath_NetHTTPPlainText400(t *testing.T) {
	for _, target := range []string{"/v1/locks/%zz", "/v1/locks/x%2/acquire", "/v1/kv/%"} {
		c, br := rawRequest(t, shared.srv.URL, "GET "+target+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !resp.Close || string(body) != "400 Bad Request" {
			t.Fatalf("GET %s: want net/http's 400 in plain text, closing, got %d %q close=%v %q", target, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Close, body)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("GET %s: want the connection closed after the 400, got %d bytes, %v", target, n, err)
		}
	}
}

// A scoped token is checked on the route the router reads, so an action word
// cannot move a request out of its scope or into another right: a token with
// lock on jobs/* acquires jobs/a however it is spelled, and nothing outside
// jobs/* however the path is put together.
func TestServer_Scopes_ActionWordTricks_StayInScope(t *testing.T) {
	toks, err := fencehttp.ParseAuthTokens(strings.NewReader("jobtok lock jobs/*\nadmin admin\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, hs := newServer(t, fencehttp.Config{Tokens: toks})
	admin := mustClient(t, hs.URL, &fencehttp.ClientOptions{AuthToken: "admin"})
	held, err := admin.Acquire(ctxFor(t), "jobs/held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	job := bearer("jobtok")
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/v1/locks/jobs%2Fa/acquire", 200},
		{"POST", "/v1/locks/jobs/b/acquire", 200},                // the lock "jobs/b"
		{"POST", "/v1/locks/jobs%2Fc%2Frevoke/acquire", 200},     // the lock "jobs/c/revoke"
		{"POST", "/v1/locks/other/acquire", 403},                 // the lock "other"
		{"POST", "/v1/locks/other/jobs/acquire", 403},            // the lock "other/jobs"
		{"POST", "/v1/locks/other%2Facquire/acquire", 403},       // the lock "other/acquire"
		{"POST", "/v1/locks/jobs/held/revoke", 403},              // revoke of "jobs/held": admin
		{"POST", "/v1/locks/jobs/held/heal", 403},                // heal of "jobs/held": admin
		{"GET", "/v1/locks/other/acquire", 405},                  // not a read of "other/acquire"
		{"PUT", "/v1/locks/other/acquire", 405},                  // nor an acquire of "other"
		{"POST", "/v1/locks/other/acqu%69re", 405},               // the lock "other/acquire": POST is no action on it
		{"POST", "/v1/locks/jobs/x/acqu%69re/acquire", 200},      // the lock "jobs/x/acquire"
		{"GET", "/v1/locks/jobs/held/revok%65", 400},             // ambiguous: refused, whatever the token
		{"POST", "/v1/locks/jobs%2Fheld/revoke?x=/acquire", 403}, // the query is no segment
	} {
		body := "{}"
		if strings.HasSuffix(tc.path, "/acquire") {
			body = `{"ttl_ms":60000}`
		}
		a := call(t, tc.method, hs.URL+tc.path, body, job)
		if a.status != tc.want {
			t.Errorf("%s %s with lock on jobs/*: want %d, got %d %s", tc.method, tc.path, tc.want, a.status, a.raw)
		}
	}
	for _, name := range []string{"other", "other/jobs", "other/acquire", "acquire"} {
		info, err := admin.Inspect(ctxFor(t), name)
		if err != nil || info.Held || info.LastToken != 0 {
			t.Errorf("the lock %q, out of the token's scope: want never granted, got %+v, %v", name, info, err)
		}
	}
	if info, err := admin.Inspect(ctxFor(t), "jobs/held"); err != nil || !info.Held || info.Token != held.Token() {
		t.Errorf("jobs/held after its revoke was refused: want still held with token %d, got %+v, %v", held.Token(), info, err)
	}
	for _, name := range []string{"jobs/a", "jobs/b", "jobs/c/revoke", "jobs/x/acquire"} {
		if info, err := admin.Inspect(ctxFor(t), name); err != nil || !info.Held {
			t.Errorf("the lock %q, in the token's scope: want held, got %+v, %v", name, info, err)
		}
	}
}
