package fencehttp

import (
	"net/http"
	"testing"

	"github.com/fencelock/fence"
)

// parseRoute, the one reading of a request's path that the router, the scope
// check and the metrics share.
func TestParseRoute(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		kind         routeKind
		action, esc  string
		served       bool
	}{
		{"GET", "/", routeRoot, "", "", true},
		{"POST", "/", routeRoot, "", "", false},
		{"GET", "/healthz", routeHealth, "", "", true},
		{"GET", "/readyz", routeReady, "", "", true},
		{"POST", "/readyz", routeReady, "", "", false},
		{"GET", "/ui", routeUI, "", "", true},
		{"GET", "/ui/app.js", routeUI, "", "", true},
		{"GET", "/uix", routeNone, "", "", false},
		{"GET", "/metrics", routeMetrics, "", "", true},
		{"GET", "/v1/openapi.json", routeOpenAPI, "", "", true},
		{"GET", "/v1/locks", routeList, "", "", true},
		{"GET", "/v1/locks/", routeList, "", "", true},
		{"POST", "/v1/locks/", routeList, "", "", false},
		{"GET", "/v1/locks/x", routeLock, "", "x", true},
		{"HEAD", "/v1/locks/jobs/x", routeLock, "", "jobs/x", true},
		{"POST", "/v1/locks/x", routeLock, "", "x", false},
		{"GET", "/v1/locks/acquire", routeLock, "", "acquire", true},
		{"GET", "/v1/locks/x%2Facquire", routeLock, "", "x%2Facquire", true},
		{"POST", "/v1/locks/x/bogus", routeLock, "", "x/bogus", false},
		{"GET", "/v1/locks/x/acquire/", routeLock, "", "x/acquire/", true},
		{"GET", "/v1/locks/x/acqu%69re", routeLock, "", "x/acqu%69re", true},
		{"POST", "/v1/locks/x/acquire", routeLockAction, "acquire", "x", true},
		{"GET", "/v1/locks/x/acquire", routeLockAction, "acquire", "x", false},
		{"DELETE", "/v1/locks/jobs/x/revoke", routeLockAction, "revoke", "jobs/x", false},
		{"POST", "/v1/locks/x%2Frenew/release", routeLockAction, "release", "x%2Frenew", true},
		{"POST", "/v1/locks/a/heal/heal", routeLockAction, "heal", "a/heal", true},
		{"POST", "/v1/locks/x/Acquire", routeLock, "", "x/Acquire", false},
		{"PUT", "/v1/kv/k", routeKV, "", "k", true},
		{"DELETE", "/v1/kv/k", routeKV, "", "k", true},
		{"POST", "/v1/kv/k", routeKV, "", "k", false},
		{"GET", "/v1/kv/a/acquire", routeKV, "", "a/acquire", true},
		{"POST", "/v1/fences/k", routeFences, "", "k", true},
		{"GET", "/v1/nope", routeNone, "", "", false},
		{"GET", "/v1/kv", routeNone, "", "", false},
	} {
		got := parseRoute(tc.method, tc.path)
		want := route{kind: tc.kind, action: tc.action, esc: tc.esc, served: tc.served}
		if got != want {
			t.Errorf("parseRoute(%s, %s) = %+v; want %+v", tc.method, tc.path, got, want)
		}
	}
}

// Every valid name, escaped as EscapeName (and so every client) sends it,
// reads back as itself on its own route and on each action's route; a name
// ending in "/acquire" included.
func FuzzParseRoute_EscapedNamesRoundTrip(f *testing.F) {
	for _, s := range []string{"x", "x/acquire", "acquire", "jobs/nightly", "a%2Fb", "..", "x/revoke/", "heal/heal", "ü/€", "a b?c#d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if fence.ValidateName(name) != nil {
			return
		}
		esc := "/v1/locks/" + EscapeName(name)
		rt := parseRoute(http.MethodGet, esc)
		if got, err := rt.name(); rt.kind != routeLock || !rt.served || err != nil || got != name {
			t.Fatalf("GET %s: want the state of %q, got %+v, name %q, %v", esc, name, rt, got, err)
		}
		for _, action := range lockActions {
			rt := parseRoute(http.MethodPost, esc+"/"+action)
			if got, err := rt.name(); rt.kind != routeLockAction || rt.action != action || !rt.served || err != nil || got != name {
				t.Fatalf("POST %s/%s: want %s of %q, got %+v, name %q, %v", esc, action, action, name, rt, got, err)
			}
		}
	})
}
