package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/fencedtest"
)

// resourceRec is a resource handler that counts its calls and keeps the fences it
// ran with, in order.
type resourceRec struct {
	mu     sync.Mutex
	fences []fence.Fence
	calls  atomic.Int64
	delay  time.Duration
}

func (rec *resourceRec) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.calls.Add(1)
	f, ok := fencehttp.FenceFromContext(r.Context())
	if !ok {
		http.Error(w, "no fence in context", http.StatusInternalServerError)
		return
	}
	if rec.delay > 0 {
		time.Sleep(rec.delay)
	}
	rec.mu.Lock()
	rec.fences = append(rec.fences, f)
	rec.mu.Unlock()
	w.Header().Set("X-Written-Token", f.Token.String())
	fmt.Fprintf(w, "stored %s", f)
}

func (rec *resourceRec) tokens() []fence.Token {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var ts []fence.Token
	for _, f := range rec.fences {
		ts = append(ts, f.Token)
	}
	return ts
}

// resAnswer is a decoded answer of a fenced resource.
type resAnswer struct {
	status int
	header http.Header
	body   string
	err    map[string]any // the JSON error body, for a status >= 400
}

// sendFenced sends method to url with f's headers set by SetHeaders (nil f: no
// headers), plus extra headers, and reads the answer.
func sendFenced(t testing.TB, method, url string, f *fence.Fence, extra http.Header, body string) resAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if f != nil {
		fencehttp.SetHeaders(req, *f)
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	a := resAnswer{status: resp.StatusCode, header: resp.Header, body: string(data)}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(data, &a.err); err != nil {
			t.Fatalf("%s %s: %d answer is not JSON: %q", method, url, resp.StatusCode, data)
		}
	}
	return a
}

// wantRefused fails t unless a is a status/code refusal carrying the fields want.
func wantRefused(t testing.TB, a resAnswer, status int, code string, want map[string]any) {
	t.Helper()
	if a.status != status || a.err["code"] != code {
		t.Fatalf("answer %d %v (body %q, Content-Type %q), want %d JSON with code %q", a.status, a.err, a.body, a.header.Get("Content-Type"), status, code)
	}
	if msg, _ := a.err["error"].(string); msg == "" {
		t.Errorf("answer %v has no error message", a.err)
	}
	for k, v := range want {
		if got := a.err[k]; fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("answer field %q = %v, want %v (body %v)", k, got, v, a.err)
		}
	}
}

// writeOutcome is what fencedtest.WriteAll asks of a write that answered a: accepted
// (status ok), or refused by a 409 naming the highest token, or neither (an error).
func writeOutcome(a resAnswer, ok int) (accepted bool, highest fence.Token, err error) {
	switch a.status {
	case ok:
		return true, 0, nil
	case http.StatusConflict:
		h, _ := a.err["highest"].(float64)
		return false, fence.Token(h), nil
	}
	return false, 0, fmt.Errorf("answered %d %v", a.status, a.err)
}

func serveRes(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func fenceOf(name string, tok fence.Token, lease string) *fence.Fence {
	return &fence.Fence{Name: name, Token: tok, LeaseID: lease}
}

func TestFenced_AcceptedPassesThrough(t *testing.T) {
	fencedtest.EachGuard(t, func(t *testing.T, g fence.Guard) {
		fencedtest.Issue(t, g, "jobs/nightly", 9)
		rec := &resourceRec{}
		srv := serveRes(t, fencehttp.Fenced(g, rec, nil))
		f := fenceOf("jobs/nightly", 7, "lease-7")
		a := sendFenced(t, "PUT", srv.URL+"/inventory/main", f, nil, "")
		if a.status != 200 || a.body != "stored jobs/nightly#7" || a.header.Get("X-Written-Token") != "7" {
			t.Fatalf("accepted write answered %d %q (X-Written-Token %q), want the handler's 200 \"stored jobs/nightly#7\"", a.status, a.body, a.header.Get("X-Written-Token"))
		}
		if len(rec.fences) != 1 || rec.fences[0] != *f {
			t.Fatalf("handler saw fences %+v, want [%+v] (the lock name unescaped)", rec.fences, *f)
		}
		// Several writes under one lease, and a later token, pass too.
		for _, next := range []*fence.Fence{f, fenceOf("jobs/nightly", 9, "lease-9")} {
			if a := sendFenced(t, "POST", srv.URL+"/inventory/main", next, nil, ""); a.status != 200 {
				t.Fatalf("write with %v answered %d %v, want 200", next, a.status, a.err)
			}
		}
		if n := rec.calls.Load(); n != 3 {
			t.Fatalf("handler called %d times, want 3", n)
		}
	})
}

// TestFenced_RefusedAfterAcceptedWrite: once inv#5 (lease L5) has written /inv, a
// lower token, the same token under another lease or none, and another lock's token
// are refused, in turn on the same resource, and none reaches the handler.
func TestFenced_RefusedAfterAcceptedWrite(t *testing.T) {
	refusals := []struct {
		name string
		f    *fence.Fence
		code string
		want map[string]any
		msg  string // the whole message, where the test pins it
	}{
		{"StaleRefusedWithHighest", fenceOf("inv", 3, "L3"), "stale_token", map[string]any{"highest": 5, "token": 3, "key": "/inv"}, `put "/inv": stale token 3, highest seen 5`},
		{"EqualTokenOtherLease", fenceOf("inv", 5, "other"), "stale_token", map[string]any{"highest": 5, "token": 5, "same_token": true}, ""},
		{"EqualTokenNoLease", fenceOf("inv", 5, ""), "stale_token", map[string]any{"highest": 5, "token": 5}, ""},
		{"WrongLock", fenceOf("other", 9, "L9"), "wrong_lock", map[string]any{"lock": "inv", "got": "other", "key": "/inv"}, ""},
	}
	fencedtest.EachGuard(t, func(t *testing.T, g fence.Guard) {
		fencedtest.Issue(t, g, "inv", 5)
		fencedtest.Issue(t, g, "other", 9)
		rec := &resourceRec{}
		srv := serveRes(t, fencehttp.Fenced(g, rec, nil))
		if a := sendFenced(t, "PUT", srv.URL+"/inv", fenceOf("inv", 5, "L5"), nil, ""); a.status != 200 {
			t.Fatalf("first write answered %d %v, want 200", a.status, a.err)
		}
		for _, tc := range refusals {
			t.Run(tc.name, func(t *testing.T) {
				a := sendFenced(t, "PUT", srv.URL+"/inv", tc.f, nil, "")
				wantRefused(t, a, 409, tc.code, tc.want)
				if tc.msg != "" && a.err["error"] != tc.msg {
					t.Errorf("message %q, want %q", a.err["error"], tc.msg)
				}
				if n := rec.calls.Load(); n != 1 {
					t.Fatalf("handler called %d times, want 1: a refused write must not reach it", n)
				}
			})
		}
	})
}

func TestFenced_BadHeaders400(t *testing.T) {
	rec := &resourceRec{}
	srv := serveRes(t, fencehttp.Fenced(inmem.NewGuard(), rec, nil))
	for _, tc := range []struct {
		name   string
		header http.Header
		field  string
	}{
		{"none", http.Header{}, "Fence-Token"},
		{"no lock", http.Header{"Fence-Token": {"3"}}, "Fence-Lock"},
		{"no token", http.Header{"Fence-Lock": {"inv"}}, "Fence-Token"},
		{"token twice", http.Header{"Fence-Token": {"3", "4"}, "Fence-Lock": {"inv"}}, "Fence-Token"},
		{"lock twice", http.Header{"Fence-Token": {"3"}, "Fence-Lock": {"inv", "inv"}}, "Fence-Lock"},
		{"token zero", http.Header{"Fence-Token": {"0"}, "Fence-Lock": {"inv"}}, "Fence-Token"},
		{"token not a number", http.Header{"Fence-Token": {"x"}, "Fence-Lock": {"inv"}}, "Fence-Token"},
		{"token too big", http.Header{"Fence-Token": {"9007199254740992"}, "Fence-Lock": {"inv"}}, "Fence-Token"},
		{"bad escape", http.Header{"Fence-Token": {"3"}, "Fence-Lock": {"in%zz"}}, "Fence-Lock"},
		{"lease twice", http.Header{"Fence-Token": {"3"}, "Fence-Lock": {"inv"}, "Fence-Lease": {"a", "b"}}, "Fence-Lease"},
		{"lease with space", http.Header{"Fence-Token": {"3"}, "Fence-Lock": {"inv"}, "Fence-Lease": {"a b"}}, "Fence-Lease"},
	} {
		a := sendFenced(t, "PUT", srv.URL+"/inv", nil, tc.header, "")
		if a.status != 400 || a.err["code"] != "invalid" || a.err["field"] != tc.field {
			t.Errorf("%s: answered %d %v, want 400 invalid naming field %q", tc.name, a.status, a.err, tc.field)
		}
	}
	if n := rec.calls.Load(); n != 0 {
		t.Fatalf("handler called %d times for requests with bad headers, want 0", n)
	}
	// A lock name travels URL-path-escaped, and the handler sees it unescaped.
	a := sendFenced(t, "PUT", srv.URL+"/inv", nil, http.Header{"Fence-Token": {" 3 "}, "Fence-Lock": {"jobs%2Fnightly"}}, "")
	if a.status != 200 || len(rec.fences) != 1 || rec.fences[0].Name != "jobs/nightly" || rec.fences[0].Token != 3 {
		t.Fatalf("escaped Fence-Lock: answered %d %v, handler saw %+v; want 200 with lock jobs/nightly, token 3", a.status, a.err, rec.fences)
	}
}

func TestFenced_InvalidResource400(t *testing.T) {
	rec := &resourceRec{}
	opts := &fencehttp.ResourceOptions{Resource: func(r *http.Request) string { return r.URL.Query().Get("res") }}
	srv := serveRes(t, fencehttp.Fenced(inmem.NewGuard(), rec, opts))
	a := sendFenced(t, "PUT", srv.URL+"/x?res=", fenceOf("inv", 1, "L1"), nil, "")
	wantRefused(t, a, 400, "invalid", map[string]any{"field": "key"})
	if n := rec.calls.Load(); n != 0 {
		t.Fatalf("handler called %d times, want 0", n)
	}
}

func TestFenced_ResourcesIndependent(t *testing.T) {
	rec := &resourceRec{}
	opts := &fencehttp.ResourceOptions{Resource: func(r *http.Request) string { return "sku:" + r.URL.Query().Get("sku") }}
	srv := serveRes(t, fencehttp.Fenced(inmem.NewGuard(), rec, opts))
	if a := sendFenced(t, "PUT", srv.URL+"/?sku=a", fenceOf("inv", 9, "L9"), nil, ""); a.status != 200 {
		t.Fatalf("write of a answered %d %v", a.status, a.err)
	}
	if a := sendFenced(t, "PUT", srv.URL+"/?sku=b", fenceOf("inv", 4, "L4"), nil, ""); a.status != 200 {
		t.Fatalf("write of b with a lower token than a's answered %d %v, want 200: resources keep their own fences", a.status, a.err)
	}
	a := sendFenced(t, "PUT", srv.URL+"/?sku=a", fenceOf("inv", 4, "L4"), nil, "")
	wantRefused(t, a, 409, "stale_token", map[string]any{"highest": 9, "key": "sku:a"})
}

func TestFenced_GuardUnavailable503(t *testing.T) {
	store := fencedtest.OpenBolt(t)
	rec := &resourceRec{}
	srv := serveRes(t, fencehttp.Fenced(store, rec, nil))
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	a := sendFenced(t, "PUT", srv.URL+"/inv", fenceOf("inv", 1, "L1"), nil, "")
	wantRefused(t, a, 503, "unavailable", nil)
	if n := rec.calls.Load(); n != 0 {
		t.Fatalf("handler called %d times with the guard closed, want 0", n)
	}
}

// TestFenced_ConcurrentWritersMonotonic sends writes with distinct tokens from many
// goroutines at once. The handler takes a while, so without the middleware's
// per-resource turn a lower token admitted first could finish after a higher one:
// the order in which the handler stores must be the tokens' order, and every
// refusal must name a higher token than the one refused.
func TestFenced_ConcurrentWritersMonotonic(t *testing.T) {
	fencedtest.EachGuard(t, func(t *testing.T, g fence.Guard) {
		const writers = 40
		fencedtest.Issue(t, g, "inv", writers)
		rec := &resourceRec{delay: 2 * time.Millisecond}
		srv := serveRes(t, fencehttp.Fenced(g, rec, nil))
		var toks []fence.Token
		for _, p := range rand.Perm(writers) {
			toks = append(toks, fence.Token(p+1))
		}
		accepted := fencedtest.WriteAll(t, toks, func(tok fence.Token) (bool, fence.Token, error) {
			return writeOutcome(sendFenced(t, "PUT", srv.URL+"/inv", fenceOf("inv", tok, "L"+tok.String()), nil, ""), 200)
		})
		fencedtest.WantTokenOrder(t, rec.tokens(), accepted, writers)
	})
}

func TestFenced_WaitForTurnEndsWithContext(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	srv := serveRes(t, fencehttp.Fenced(inmem.NewGuard(), h, nil))
	done := make(chan resAnswer, 1)
	go func() { done <- sendFenced(t, "PUT", srv.URL+"/inv", fenceOf("inv", 1, "L1"), nil, "") }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("first request never reached the handler")
	}
	// A second request of the resource waits for its turn; its client gives up.
	ctx, cancel := context.WithTimeout(ctxFor(t), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/inv", nil)
	fencehttp.SetHeaders(req, *fenceOf("inv", 2, "L2"))
	_, err := http.DefaultClient.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second request while the first holds the resource: %v, want the client's deadline", err)
	}
	close(release)
	if a := <-done; a.status != 200 {
		t.Fatalf("first request answered %d %v", a.status, a.err)
	}
	// The abandoned waiter left nothing behind: the resource is free again.
	go func() { <-entered }()
	if a := sendFenced(t, "PUT", srv.URL+"/inv", fenceOf("inv", 3, "L3"), nil, ""); a.status != 200 {
		t.Fatalf("third request answered %d %v, want 200", a.status, a.err)
	}
}

func TestSetHeaders(t *testing.T) {
	req := httptest.NewRequest("PUT", "/x", nil)
	req.Header.Set("Fence-Lease", "stale")
	fencehttp.SetHeaders(req, fence.Fence{Name: "a/b c", Token: 12})
	if got := req.Header.Get("Fence-Token"); got != "12" {
		t.Errorf("Fence-Token = %q, want 12", got)
	}
	if got := req.Header.Get("Fence-Lock"); got != "a%2Fb%20c" {
		t.Errorf("Fence-Lock = %q, want a%%2Fb%%20c", got)
	}
	if vs := req.Header.Values("Fence-Lease"); len(vs) != 0 {
		t.Errorf("Fence-Lease = %q after SetHeaders of a fence without lease, want none", vs)
	}
	f, err := fencehttp.FenceFromRequest(req)
	if err != nil || f != (fence.Fence{Name: "a/b c", Token: 12}) {
		t.Fatalf("FenceFromRequest after SetHeaders = %+v, %v; want the fence back", f, err)
	}
	if _, ok := fencehttp.FenceFromContext(context.Background()); ok {
		t.Fatal("FenceFromContext of a bare context reported a fence")
	}
}
