package fencehttp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

func TestParseAuthTokens(t *testing.T) {
	toks, err := fencehttp.ParseAuthTokens(strings.NewReader(`# operators
root-secret

worker-secret   lock,write   jobs/*  payouts
reader-secret   read
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 3 {
		t.Fatalf("%d tokens; want 3", len(toks))
	}
	if string(toks[0].Secret) != "root-secret" || toks[0].Rights != fencehttp.RightsAll || toks[0].Names != nil {
		t.Errorf("a secret alone = %+v; want every right on every name", toks[0])
	}
	if toks[1].Rights != fencehttp.RightLock|fencehttp.RightWrite || strings.Join(toks[1].Names, " ") != "jobs/* payouts" {
		t.Errorf("worker = %+v; want lock,write on jobs/* and payouts", toks[1])
	}
	if toks[2].Rights != fencehttp.RightRead || toks[2].Names != nil {
		t.Errorf("reader = %+v; want read on every name", toks[2])
	}
	if got := (fencehttp.RightLock | fencehttp.RightRead).String(); got != "read,lock" {
		t.Errorf("Rights.String() = %q; want read,lock", got)
	}
}

func TestParseAuthTokens_BadLinesNamed(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"a\nb locks", `line 2`},
		{"a\nb locks", `unknown right "locks"`},
		{"a read\na lock", `the secret of line 1 again`},
		{"a read j*obs", `'*' may only end a pattern`},
		{"a read x\x01y", `pattern`},
		{"a read,", `unknown right ""`},
	} {
		_, err := fencehttp.ParseAuthTokens(strings.NewReader(tc.file))
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseAuthTokens(%q) = %v; want ErrInvalid saying %q", tc.file, err, tc.want)
		}
	}
}

func scopedServer(t *testing.T) string {
	t.Helper()
	toks, err := fencehttp.ParseAuthTokens(strings.NewReader(`
admin     admin
worker    lock,write  a  b/*
reader    read        a*
kvonly    write       k
`))
	if err != nil {
		t.Fatal(err)
	}
	_, hs := newServer(t, fencehttp.Config{Tokens: toks})
	return hs.URL
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func TestServer_Scopes_EachRightOnItsRoutes(t *testing.T) {
	url := scopedServer(t)
	fenced := map[string]string{"Authorization": "Bearer worker", "Fence-Lock": "a", "Fence-Token": "1"}
	for _, tc := range []struct {
		tok, method, path, body string
		hdr                     map[string]string
		want                    int
	}{
		// lock: acquire on its names, not on others, not revoke or heal.
		{"worker", "POST", "/v1/locks/a/acquire", `{"ttl_ms":60000}`, nil, 200},
		{"worker", "POST", "/v1/locks/b%2Fnightly/acquire", `{"ttl_ms":60000}`, nil, 200},
		{"worker", "POST", "/v1/locks/c/acquire", `{}`, nil, 403},
		{"worker", "POST", "/v1/locks/a/revoke", `{}`, nil, 403},
		{"worker", "POST", "/v1/locks/a/heal", `{"seen":5}`, nil, 403},
		{"worker", "GET", "/v1/locks/a", "", nil, 403}, // lock is not read
		{"worker", "PUT", "/v1/kv/a", "v", fenced, 200},
		// read: GET state and lists within its prefix, never a write.
		{"reader", "GET", "/v1/locks/a", "", nil, 200},
		{"reader", "GET", "/v1/locks/ab", "", nil, 200},
		{"reader", "GET", "/v1/locks?prefix=a", "", nil, 200},
		{"reader", "GET", "/v1/locks?prefix=ab/", "", nil, 200},
		{"reader", "GET", "/v1/locks", "", nil, 403}, // every name is more than a*
		{"reader", "GET", "/v1/locks/b", "", nil, 403},
		{"reader", "GET", "/v1/kv/a", "", nil, 200},
		// write deletes (fenced); a purge needs admin.
		{"reader", "DELETE", "/v1/kv/a", "", map[string]string{"Authorization": "Bearer reader", "Fence-Lock": "a", "Fence-Token": "2"}, 403},
		{"worker", "DELETE", "/v1/kv/a", "", map[string]string{"Authorization": "Bearer worker", "Fence-Lock": "a", "Fence-Token": "2"}, 200},
		{"worker", "DELETE", "/v1/kv/a?purge=true", "", nil, 403},
		{"worker", "DELETE", "/v1/kv/a?purge=yes", "", nil, 403}, // a malformed purge is held to admin too
		{"admin", "DELETE", "/v1/kv/a?purge=true", "", nil, 200},
		{"reader", "POST", "/v1/locks/a/acquire", `{}`, nil, 403},
		{"reader", "GET", "/metrics", "", nil, 403},
		{"reader", "GET", "/v1/openapi.json", "", nil, 200},
		// write: the key, not a lock.
		{"kvonly", "POST", "/v1/fences/k", "", map[string]string{"Authorization": "Bearer kvonly", "Fence-Lock": "a", "Fence-Token": "1"}, 200},
		{"kvonly", "POST", "/v1/fences/kk", "", map[string]string{"Authorization": "Bearer kvonly", "Fence-Lock": "a", "Fence-Token": "1"}, 403},
		{"kvonly", "POST", "/v1/locks/k/acquire", `{}`, nil, 403},
		// admin: everything.
		{"admin", "POST", "/v1/locks/a/revoke", `{}`, nil, 200},
		{"admin", "POST", "/v1/locks/a/heal", `{"seen":5}`, nil, 200},
		{"admin", "GET", "/metrics", "", nil, 200},
		{"admin", "GET", "/v1/locks", "", nil, 200},
		// no token at all is still 401, a wrong one too.
		{"", "GET", "/v1/locks/a", "", map[string]string{}, 401},
		{"nope", "GET", "/v1/locks/a", "", nil, 401},
	} {
		hdr := tc.hdr
		if hdr == nil {
			hdr = bearer(tc.tok)
		}
		a := call(t, tc.method, url+tc.path, tc.body, hdr)
		if a.status != tc.want {
			t.Errorf("%s %s %s with token %q: %d %s; want %d", tc.method, tc.path, tc.body, tc.tok, a.status, a.raw, tc.want)
			continue
		}
		if tc.want == 403 {
			wantError(t, tc.method+" "+tc.path, a, 403, "forbidden")
		}
	}
}

func TestServer_Scopes_LookalikeNames(t *testing.T) {
	url := scopedServer(t)
	// "a" is exact for the worker: "ab" and "a/x" are other locks. "b/*" covers
	// "b/x" but neither "b" nor "bx".
	for name, want := range map[string]int{"a": 200, "ab": 403, "a%2Fx": 403, "b%2Fx": 200, "b": 403, "bx": 403} {
		a := call(t, "POST", url+"/v1/locks/"+name+"/acquire", `{"ttl_ms":1000}`, bearer("worker"))
		if a.status != want {
			t.Errorf("worker acquire %q: %d %s; want %d", name, a.status, a.raw, want)
		}
	}
	// "a*" is a prefix for the reader: "a", "ab" and "a/x", not "ba".
	for name, want := range map[string]int{"a": 200, "ab": 200, "a%2Fx": 200, "ba": 403} {
		if a := call(t, "GET", url+"/v1/locks/"+name, "", bearer("reader")); a.status != want {
			t.Errorf("reader get %q: %d %s; want %d", name, a.status, a.raw, want)
		}
	}
}

func TestServer_Scopes_403NamesWhatWasRefused(t *testing.T) {
	url := scopedServer(t)
	a := call(t, "POST", url+"/v1/locks/c/acquire", `{}`, bearer("worker"))
	wantError(t, "acquire c", a, 403, "forbidden")
	for _, s := range []string{`may not hold lock \"c\"`, "lock,write", "on a b/*"} {
		if !strings.Contains(a.raw, s) {
			t.Errorf("403 body %s does not say %q", a.raw, s)
		}
	}
	c := mustClient(t, url, &fencehttp.ClientOptions{AuthToken: "reader"})
	_, err := c.Acquire(ctxFor(t), "a", time.Minute)
	if !errors.Is(err, fencehttp.ErrForbidden) || errors.Is(err, fencehttp.ErrUnauthorized) {
		t.Fatalf("client acquire with a read token: %v; want ErrForbidden", err)
	}
	if !strings.Contains(err.Error(), `may not hold lock "a"`) {
		t.Errorf("client error %q does not say what was refused", err)
	}
}

func TestNewServer_RefusesEmptyAndRightlessTokens(t *testing.T) {
	for _, tok := range []fencehttp.AuthToken{{Secret: nil, Rights: fencehttp.RightRead}, {Secret: []byte("x")}} {
		_, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), Tokens: []fencehttp.AuthToken{tok}})
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "auth token 1") {
			t.Errorf("NewServer with token %+v: %v; want ErrInvalid naming auth token 1", tok, err)
		}
	}
}
