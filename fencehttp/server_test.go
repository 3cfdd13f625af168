package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

type answer struct {
	status int
	header http.Header
	raw    string
	json   map[string]any
}

// call sends one raw request and decodes a JSON answer if there is one.
func call(t testing.TB, method, url, body string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), method, url, strings.NewReader(body))
	if err != nil {
		// A path the URL parser refuses (a bad escape) is sent as it is.
		base, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
		req, err = http.NewRequestWithContext(ctxFor(t), method, "http://"+base, strings.NewReader(body))
		if err != nil {
			t.Fatalf("NewRequest %s %s: %v", method, url, err)
		}
		req.URL.Opaque = "/" + path
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return send(t, http.DefaultClient, req)
}

// send sends req with hc and decodes a JSON answer if there is one.
func send(t testing.TB, hc *http.Client, req *http.Request) answer {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(data)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &a.json); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v: %q", req.Method, req.URL, err, data)
		}
	}
	return a
}

// wantError checks an error answer: status, JSON body with a message and the code.
func wantError(t testing.TB, what string, a answer, status int, code string) {
	t.Helper()
	if a.status != status || a.json == nil || a.json["code"] != code {
		t.Fatalf("%s: want %d with JSON code %q, got %d %s", what, status, code, a.status, a.raw)
	}
	if msg, _ := a.json["error"].(string); msg == "" {
		t.Fatalf("%s: JSON error without a message: %s", what, a.raw)
	}
}

func TestServer_Acquire_CurlShapes(t *testing.T) {
	base := shared.srv.URL
	name := uniq(t, "job")
	a := call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/acquire", `{"ttl_ms":60000}`, nil)
	if a.status != 200 || a.json["name"] != name || a.json["ttl_ms"] != float64(60000) || a.json["token"] == nil {
		t.Fatalf("acquire: want 200 {name:%q, token, lease, ttl_ms:60000}, got %d %s", name, a.status, a.raw)
	}
	lease, _ := a.json["lease"].(string)
	if len(lease) < 32 {
		t.Fatalf("lease id %q: want at least 128 bits (32 hex digits)", lease)
	}
	again := call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/acquire", ``, nil)
	wantError(t, "second acquire", again, 409, "held")

	st := call(t, "GET", base+"/v1/locks/"+fencehttp.EscapeName(name), "", nil)
	if st.status != 200 || st.json["held"] != true || st.json["token"] != a.json["token"] || strings.Contains(st.raw, lease) {
		t.Fatalf("status: want 200 held with token %v and no lease id, got %d %s", a.json["token"], st.status, st.raw)
	}
	rn := call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/renew", `{"lease":"`+lease+`","ttl_ms":5000}`, nil)
	if rn.status != 200 || rn.json["ttl_ms"] != float64(5000) {
		t.Fatalf("renew: want 200 ttl_ms 5000, got %d %s", rn.status, rn.raw)
	}
	rl := call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/release", `{"lease":"`+lease+`"}`, nil)
	if rl.status != 200 {
		t.Fatalf("release: want 200, got %d %s", rl.status, rl.raw)
	}
	wantError(t, "second release", call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/release", `{"lease":"`+lease+`"}`, nil), 410, "not_held")
	wantError(t, "renew after release", call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/renew", `{"lease":"`+lease+`"}`, nil), 410, "not_held")
}

func TestServer_UnescapedSlashesInPath_NameKeepsThem(t *testing.T) {
	name := uniq(t, "jobs/nightly") // contains slashes, sent unescaped as curl users do
	a := call(t, "POST", shared.srv.URL+"/v1/locks/"+name+"/acquire", `{}`, nil)
	if a.status != 200 || a.json["name"] != name || a.json["ttl_ms"] != float64(30000) {
		t.Fatalf("acquire with literal slashes: want 200 name %q ttl_ms 30000 (default), got %d %s", name, a.status, a.raw)
	}
	info, err := shared.client.Inspect(ctxFor(t), name)
	if err != nil || !info.Held {
		t.Fatalf("Inspect(%q): want held, got %+v, %v", name, info, err)
	}
}

func TestClient_Names_RoundTrip(t *testing.T) {
	c := shared.client
	for _, suffix := range []string{"jobs/nightly", "a%2Fb", "100%", "with space", "ünïcødé/€", "a//b", "trailing/", "?q=1#frag", "+plus;semi", "..", ".", "../x", `back\slash`} {
		name := uniq(t, "n") + "/" + suffix
		for _, exact := range []string{name, suffix} {
			lease, err := c.Acquire(ctxFor(t), exact, time.Minute)
			if err != nil {
				t.Fatalf("Acquire(%q): %v", exact, err)
			}
			if lease.Name() != exact {
				t.Fatalf("Acquire(%q): lease name %q", exact, lease.Name())
			}
			info, err := c.Inspect(ctxFor(t), exact)
			if err != nil || info.Name != exact || !info.Held || info.Token != lease.Token() {
				t.Fatalf("Inspect(%q): want held %q with token %d, got %+v, %v", exact, exact, lease.Token(), info, err)
			}
			key := "k/" + exact
			if err := c.Put(ctxFor(t), key, []byte(exact), lease.Fence()); err != nil {
				t.Fatalf("Put(%q): %v", key, err)
			}
			item, err := c.Get(ctxFor(t), key)
			if err != nil || string(item.Value) != exact || item.Fence.Name != exact || item.Fence.Token != lease.Token() {
				t.Fatalf("Get(%q): want value and lock %q token %d, got %q %+v, %v", key, exact, lease.Token(), item.Value, item.Fence, err)
			}
			if err := lease.Release(ctxFor(t)); err != nil {
				t.Fatalf("Release(%q): %v", exact, err)
			}
		}
	}
}

func TestServer_BadInput_400(t *testing.T) {
	base := shared.srv.URL
	name := fencehttp.EscapeName(uniq(t, "bad"))
	long := strings.Repeat("x", fence.MaxNameLen+1)
	cases := []struct {
		what, method, path, body string
		header                   map[string]string
	}{
		{"control character in name", "POST", "/v1/locks/a%00b/acquire", `{}`, nil},
		{"newline in name", "POST", "/v1/locks/a%0Ab/acquire", `{}`, nil},
		{"name too long", "POST", "/v1/locks/" + long + "/acquire", `{}`, nil},
		{"invalid UTF-8 name", "POST", "/v1/locks/%FF%FE/acquire", `{}`, nil},
		{"ttl zero", "POST", "/v1/locks/" + name + "/acquire", `{"ttl_ms":0}`, nil},
		{"ttl negative", "POST", "/v1/locks/" + name + "/acquire", `{"ttl_ms":-5}`, nil},
		{"ttl over 24h", "POST", "/v1/locks/" + name + "/acquire", `{"ttl_ms":86400001}`, nil},
		{"ttl fractional", "POST", "/v1/locks/" + name + "/acquire", `{"ttl_ms":1.5}`, nil},
		{"ttl string", "POST", "/v1/locks/" + name + "/acquire", `{"ttl_ms":"30s"}`, nil},
		{"ttl overflow", "POST", "/v1/locks/" + name + "/acquire", `{"ttl_ms":99999999999999999999999}`, nil},
		{"wait negative", "POST", "/v1/locks/" + name + "/acquire", `{"wait_ms":-1}`, nil},
		{"unknown field", "POST", "/v1/locks/" + name + "/acquire", `{"ttl":30000}`, nil},
		{"trailing data", "POST", "/v1/locks/" + name + "/acquire", `{"ttl_ms":1000} {}`, nil},
		{"not JSON", "POST", "/v1/locks/" + name + "/acquire", `ttl=5`, nil},
		{"JSON array", "POST", "/v1/locks/" + name + "/acquire", `[1]`, nil},
		{"renew without lease", "POST", "/v1/locks/" + name + "/renew", `{"ttl_ms":1000}`, nil},
		{"release lease with space", "POST", "/v1/locks/" + name + "/release", `{"lease":"a b"}`, nil},
		{"release lease too long", "POST", "/v1/locks/" + name + "/release", `{"lease":"` + strings.Repeat("a", 129) + `"}`, nil},
		{"list bad limit", "GET", "/v1/locks?limit=-1", ``, nil},
		{"list limit not a number", "GET", "/v1/locks?limit=ten", ``, nil},
		{"kv put without token", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Lock": "x"}},
		{"kv put token zero", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Token": "0", "Fence-Lock": "x"}},
		{"kv put token negative", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Token": "-3", "Fence-Lock": "x"}},
		{"kv put token not a number", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Token": "abc", "Fence-Lock": "x"}},
		{"kv put token above max", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Token": "9007199254740992", "Fence-Lock": "x"}},
		{"kv put bad lease", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Token": "1", "Fence-Lock": "x", "Fence-Lease": "é"}},
		{"kv put bad lock", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Token": "1", "Fence-Lock": "%ZZ"}},
		{"kv put first write without lock", "PUT", "/v1/kv/" + name, `v`, map[string]string{"Fence-Token": "1"}},
		{"kv get bad key", "GET", "/v1/kv/a%01", ``, nil},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			wantError(t, c.method+" "+c.path+" "+c.body, call(t, c.method, base+c.path, c.body, c.header), 400, "invalid")
		})
	}
}

func TestServer_UnknownRouteAndMethod_JSON404And405(t *testing.T) {
	base := shared.srv.URL
	wantError(t, "GET /nope", call(t, "GET", base+"/nope", "", nil), 404, "not_found")
	// A last segment that is no action word names a lock ("x/explode"), whose
	// route takes GET and HEAD.
	a := call(t, "POST", base+"/v1/locks/x/explode", "{}", nil)
	wantError(t, "POST unknown action", a, 405, "method_not_allowed")
	if a.header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST unknown action: want Allow: GET, HEAD, got %q", a.header.Get("Allow"))
	}
	a = call(t, "DELETE", base+"/v1/locks/x", "", nil)
	wantError(t, "DELETE lock", a, 405, "method_not_allowed")
	if a.header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("DELETE lock: want Allow: GET, HEAD, got %q", a.header.Get("Allow"))
	}
	wantError(t, "GET never-written key", call(t, "GET", base+"/v1/kv/"+fencehttp.EscapeName(uniq(t, "k")), "", nil), 404, "not_found")
}

func TestServer_BodyTooLarge_413(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{MaxBodyBytes: 100, MaxValueBytes: 1000})
	big := `{"ttl_ms":1000,` + strings.Repeat(" ", 200) + `}`
	wantError(t, "acquire body over 100 bytes", call(t, "POST", hs.URL+"/v1/locks/a/acquire", big, nil), 413, "too_large")
	hdr := map[string]string{"Fence-Token": "1", "Fence-Lock": "a"}
	wantError(t, "kv value over 1000 bytes", call(t, "PUT", hs.URL+"/v1/kv/k", strings.Repeat("v", 1001), hdr), 413, "too_large")

	// Without a Content-Length (chunked), the limit still holds while reading.
	req, _ := http.NewRequestWithContext(ctxFor(t), "PUT", hs.URL+"/v1/kv/k", io.MultiReader(strings.NewReader(strings.Repeat("v", 2000))))
	req.ContentLength = -1
	req.Header.Set("Fence-Token", "1")
	req.Header.Set("Fence-Lock", "a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("chunked value over the limit: want 413, got %d", resp.StatusCode)
	}
	c := mustClient(t, hs.URL, nil)
	if _, err := c.Get(ctxFor(t), "k"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("after refused writes, Get: want ErrNotFound (nothing stored), got %v", err)
	}
	err = c.Put(ctxFor(t), "k", make([]byte, 1001), fence.Fence{Name: "a", Token: 1})
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("client Put over the limit: want ErrInvalid, got %v", err)
	}
}

func TestServer_Auth_401WithoutRightToken(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{AuthTokens: [][]byte{[]byte("s3cret"), []byte("other-token")}})
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0"}, {"Authorization": "Bearer s3cre"}, {"Authorization": "Bearer s3cret2"}} {
		a := call(t, "POST", hs.URL+"/v1/locks/a/acquire", "{}", h)
		wantError(t, "acquire with "+h["Authorization"], a, 401, "unauthorized")
		if a.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("401 without WWW-Authenticate")
		}
	}
	wantError(t, "metrics without token", call(t, "GET", hs.URL+"/metrics", "", nil), 401, "unauthorized")
	if a := call(t, "GET", hs.URL+"/healthz", "", nil); a.status != 200 {
		t.Fatalf("healthz needs no token: want 200, got %d %s", a.status, a.raw)
	}
	if a := call(t, "POST", hs.URL+"/v1/locks/a/acquire", "{}", map[string]string{"Authorization": "Bearer other-token"}); a.status != 200 {
		t.Fatalf("acquire with the second token: want 200, got %d %s", a.status, a.raw)
	}

	bad := mustClient(t, hs.URL, &fencehttp.ClientOptions{AuthToken: "nope"})
	if _, err := bad.Acquire(ctxFor(t), "b", time.Minute); !errors.Is(err, fencehttp.ErrUnauthorized) {
		t.Fatalf("client with a wrong token: want ErrUnauthorized, got %v", err)
	}
	good := mustClient(t, hs.URL, &fencehttp.ClientOptions{AuthToken: "s3cret"})
	mustAcquire(t, good, "b", time.Minute)
}

func TestServer_ReleaseOrRenewOfAnothersLease_410AndLockStaysHeld(t *testing.T) {
	c := shared.client
	name := uniq(t, "mine")
	lease := mustAcquire(t, c, name, time.Minute)
	other := driver.NewLeaseID()
	if err := c.Release(ctxFor(t), name, other); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Release with another lease id: want ErrNotHeld, got %v", err)
	}
	if err := c.Renew(ctxFor(t), name, other, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew with another lease id: want ErrNotHeld, got %v", err)
	}
	info, err := c.Inspect(ctxFor(t), name)
	if err != nil || !info.Held || info.Token != lease.Token() {
		t.Fatalf("after refused release: want still held with token %d, got %+v, %v", lease.Token(), info, err)
	}
}

func TestServer_LongPoll_WokenByRelease(t *testing.T) {
	c := shared.client
	name := uniq(t, "handoff")
	holder := mustAcquire(t, c, name, time.Hour) // expiry cannot be what wakes the waiter
	waiting := metricValue(t, shared.server, "fence_waits_total") + 1
	w := startWaiter(t, c, name, time.Hour)
	waitForWaiters(t, shared.server, waiting)
	w.wantHandover(t, holder)
}

// waiter is an Acquire of a held lock, waiting in a goroutine of its own.
type waiter struct {
	got  chan error
	next *fence.Lease // set before got is sent
}

// startWaiter starts an Acquire of name through l that waits up to wait.
func startWaiter(t *testing.T, l fence.Locker, name string, wait time.Duration) *waiter {
	w := &waiter{got: make(chan error, 1)}
	go func() {
		var err error
		w.next, err = l.Acquire(ctxFor(t), name, time.Minute, fence.WithWait(wait))
		w.got <- err
	}()
	return w
}

// wantHandover releases holder and fails t unless the waiter is granted the lock
// then, with a higher token.
func (w *waiter) wantHandover(t *testing.T, holder *fence.Lease) {
	t.Helper()
	if err := holder.Release(ctxFor(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if next := w.wantGrant(t, "the release"); next.Token() <= holder.Token() {
		t.Fatalf("waiter's token %d: want greater than the holder's %d", next.Token(), holder.Token())
	}
}

// wantGrant returns the waiter's lease, failing t unless it is granted within 5s
// of what (which should have woken it) happened.
func (w *waiter) wantGrant(t *testing.T, what string) *fence.Lease {
	t.Helper()
	select {
	case err := <-w.got:
		if err != nil {
			t.Fatalf("waiter: want a grant after %s, got %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter: still waiting 5s after %s", what)
	}
	return w.next
}

// waitForWaiters blocks until the server's fence_waits_total reached n (it counts
// requests that found the lock held and started to wait).
func waitForWaiters(t testing.TB, s *fencehttp.Server, n float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, s, "fence_waits_total") < n {
		if time.Now().After(deadline) {
			t.Fatalf("no waiter arrived at the server within 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

func metricValue(t testing.TB, s *fencehttp.Server, name string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}
	return 0
}

func TestClient_Acquire_WaitLongerThanOnePoll_PollsAgain(t *testing.T) {
	// The server cuts polls at 50ms; the client keeps polling until its own wait.
	_, hs := newServer(t, fencehttp.Config{MaxWait: 50 * time.Millisecond})
	c := mustClient(t, hs.URL, &fencehttp.ClientOptions{MaxPoll: 20 * time.Millisecond})
	holder := mustAcquire(t, c, "l", 300*time.Millisecond) // expires during the wait
	next, err := c.Acquire(ctxFor(t), "l", time.Minute, fence.WithWait(time.Minute))
	if err != nil {
		t.Fatalf("Acquire with a wait spanning many polls: want granted after the holder's expiry, got %v", err)
	}
	if next.Token() <= holder.Token() {
		t.Fatalf("token %d: want greater than %d", next.Token(), holder.Token())
	}
}

func TestClient_Acquire_ContextCancelled_MatchesNotAcquiredAndCanceled(t *testing.T) {
	c := shared.client
	name := uniq(t, "cancel")
	mustAcquire(t, c, name, time.Hour)
	ctx, cancel := context.WithCancel(ctxFor(t))
	waiting := metricValue(t, shared.server, "fence_waits_total") + 1
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name, time.Minute, fence.WithWait(fence.WaitForever))
		got <- err
	}()
	waitForWaiters(t, shared.server, waiting)
	cancel()
	err := <-got
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: want ErrNotAcquired and context.Canceled, got %v", err)
	}
}

func TestServer_Drain_EndsLongPollsWith503AndHealthz503(t *testing.T) {
	s, hs := newServer(t, fencehttp.Config{MaxWait: time.Hour})
	c := mustClient(t, hs.URL, nil)
	mustAcquire(t, c, "busy", time.Hour)
	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Post(hs.URL+"/v1/locks/busy/acquire", "application/json", strings.NewReader(`{"wait_ms":3600000}`))
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- result{status: resp.StatusCode, body: string(b)}
	}()
	waitForWaiters(t, s, 1)
	s.Drain()
	if r := <-got; r.err != nil || r.status != 503 || !strings.Contains(r.body, `"code":"unavailable"`) {
		t.Fatalf("hour-long poll during drain: want 503 unavailable at once, got %d %s %v", r.status, r.body, r.err)
	}
	wantError(t, "healthz while draining", call(t, "GET", hs.URL+"/healthz", "", nil), 503, "unavailable")
}

func TestServer_Metrics_CountGrantsWaitsStaleLostAndHeld(t *testing.T) {
	s, hs := newServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	a := mustAcquire(t, c, "m", time.Minute)
	if err := c.Release(ctxFor(t), "m", a.ID()); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, "m", time.Minute)
	if err := c.Put(ctxFor(t), "k", []byte("v"), b.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctxFor(t), "k", []byte("late"), a.Fence()); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale put: want ErrStaleToken, got %v", err)
	}
	if err := c.Renew(ctxFor(t), "m", a.ID(), time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("renew of a released lease: want ErrNotHeld, got %v", err)
	}
	for name, want := range map[string]float64{
		"fence_grants_total": 2, "fence_stale_rejections_total": 1, "fence_lost_leases_total": 1,
		"fence_kv_writes_total": 1, "fence_held_locks": 1, "fence_acquire_seconds": 2,
	} {
		if got := metricValue(t, s, name); got != want {
			t.Errorf("%s: want %v, got %v", name, want, got)
		}
	}
	page := call(t, "GET", hs.URL+"/metrics", "", nil)
	for _, series := range []string{"fence_grants_total 2", "fence_acquire_seconds_bucket", "fence_waits_total", "fence_wait_seconds_bucket", "fence_held_locks 1", "go_goroutines"} {
		if !strings.Contains(page.raw, series) {
			t.Errorf("/metrics: want a line with %q, not in:\n%.2000s", series, page.raw)
		}
	}
}

func TestServer_KV_StaleWrite409WithHighestAndNothingChanged(t *testing.T) {
	base := shared.srv.URL
	lock, key := uniq(t, "lock"), fencehttp.EscapeName(uniq(t, "key"))
	c := shared.client
	a := mustAcquire(t, c, lock, time.Minute)
	if err := a.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, lock, time.Minute)
	hb := map[string]string{"Fence-Token": b.Token().String(), "Fence-Lock": fencehttp.EscapeName(lock), "Fence-Lease": b.ID()}
	if w := call(t, "PUT", base+"/v1/kv/"+key, "new", hb); w.status != 200 {
		t.Fatalf("write with the new token: want 200, got %d %s", w.status, w.raw)
	}
	ha := map[string]string{"Fence-Token": a.Token().String(), "Fence-Lock": fencehttp.EscapeName(lock)}
	w := call(t, "PUT", base+"/v1/kv/"+key, "old", ha)
	wantError(t, "stale write", w, 409, "stale_token")
	if w.json["highest"] != float64(b.Token()) {
		t.Fatalf("stale write: want highest %d, got %s", b.Token(), w.raw)
	}
	// A token of another lock is refused, not compared.
	other := mustAcquire(t, c, uniq(t, "another-lock"), time.Minute)
	w = call(t, "PUT", base+"/v1/kv/"+key, "x", map[string]string{"Fence-Token": other.Token().String(), "Fence-Lock": fencehttp.EscapeName(other.Name()), "Fence-Lease": other.ID()})
	wantError(t, "token of another lock", w, 409, "wrong_lock")
	if w.json["lock"] != lock {
		t.Fatalf("wrong_lock: want lock %q, got %s", lock, w.raw)
	}
	g := call(t, "GET", base+"/v1/kv/"+key, "", nil)
	if g.status != 200 || g.raw != "new" || g.header.Get("Fence-Token") != b.Token().String() || g.header.Get("Fence-Lease") != "" {
		t.Fatalf("get: want 200 %q with Fence-Token %d and no lease, got %d %q %v", "new", b.Token(), g.status, g.raw, g.header)
	}
	// Same token, same lease: allowed; without the lease: refused, while the
	// lease lives as lease_required (P9), once it ended as stale.
	if w := call(t, "PUT", base+"/v1/kv/"+key, "again", hb); w.status != 200 {
		t.Fatalf("write under the same lease again: want 200, got %d %s", w.status, w.raw)
	}
	delete(hb, "Fence-Lease")
	wantError(t, "equal token without lease", call(t, "PUT", base+"/v1/kv/"+key, "x", hb), 409, "lease_required")
	if err := b.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	wantError(t, "equal token without lease, the lease ended", call(t, "PUT", base+"/v1/kv/"+key, "x", hb), 409, "stale_token")
}

func TestServer_Fences_AdvanceWithoutWriting(t *testing.T) {
	c := shared.client
	lock, key := uniq(t, "lock"), uniq(t, "key")
	a := mustAcquire(t, c, lock, time.Minute)
	if err := a.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, lock, time.Minute)
	if err := c.Fence(ctxFor(t), key, b.Fence()); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	err := c.Put(ctxFor(t), key, []byte("zombie"), a.Fence())
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || st.Highest != b.Token() || st.Token != a.Token() {
		t.Fatalf("zombie write after Fence: want *StaleTokenError{Token:%d Highest:%d}, got %v", a.Token(), b.Token(), err)
	}
	item, err := c.Get(ctxFor(t), key)
	if err != nil || item.Value != nil && len(item.Value) != 0 || item.Fence.Token != b.Token() {
		t.Fatalf("Get after Fence only: want empty value fenced at %d, got %q %+v, %v", b.Token(), item.Value, item.Fence, err)
	}
}

func TestServer_NoKVNoInspector_501(t *testing.T) {
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: lockerOnly{inmem.NewLocker(inmem.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(method, path string, body ...string) answer {
		req, _ := http.NewRequest(method, path, strings.NewReader(strings.Join(body, "")))
		req.Header.Set("Fence-Token", "1")
		req.Header.Set("Fence-Lock", "a")
		w := newRecorder()
		s.Handler().ServeHTTP(w, req)
		return w.answer(t)
	}
	wantError(t, "kv without a KV", rec("PUT", "/v1/kv/k"), 501, "not_implemented")
	wantError(t, "status without an Inspector", rec("GET", "/v1/locks/a"), 501, "not_implemented")
	wantError(t, "fences without a Guard", rec("POST", "/v1/fences/k"), 501, "not_implemented")
	wantError(t, "heal without a Healer", rec("POST", "/v1/locks/a/heal", `{"seen":5}`), 501, "not_implemented")
	wantError(t, "heal with token 0", rec("POST", "/v1/locks/a/heal", `{"seen":0}`), 400, "invalid")
}

// lockerOnly hides everything but fence.Locker.
type lockerOnly struct{ fence.Locker }

func TestNewServer_NilLocker_Invalid(t *testing.T) {
	if _, err := fencehttp.NewServer(fencehttp.Config{}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("NewServer without a Locker: want ErrInvalid, got %v", err)
	}
	if _, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), AuthTokens: [][]byte{{}}}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("NewServer with an empty auth token: want ErrInvalid, got %v", err)
	}
}

func TestNewClient_BadURL_Invalid(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7420", "ftp://x", "http://", "http://h/?q=1", "http://u:p@h", "%zz"} {
		if _, err := fencehttp.NewClient(u, nil); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("NewClient(%q): want ErrInvalid, got %v", u, err)
		}
	}
}

func TestClient_ServerDown_Unavailable(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	url := hs.URL
	hs.Close()
	c := mustClient(t, url, nil)
	if _, err := c.Acquire(ctxFor(t), "x", time.Minute); !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire with the server down: want ErrUnavailable (not ErrNotAcquired), got %v", err)
	}
	if err := c.Renew(ctxFor(t), "x", driver.NewLeaseID(), time.Minute); !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew with the server down: want ErrUnavailable (not ErrNotHeld), got %v", err)
	}
}

func TestClient_AutoRenew_KeepsLeaseAcrossTTLs(t *testing.T) {
	c := shared.client
	name := uniq(t, "auto")
	lease := mustAcquire(t, c, name, time.Second, fence.WithAutoRenew())
	defer lease.Release(context.Background())
	// Without renewals the lease would be gone after 1s; another acquire must keep
	// failing through more than two TTLs.
	for i := 0; i < 6; i++ {
		time.Sleep(400 * time.Millisecond)
		if _, err := c.Acquire(ctxFor(t), name, time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
			t.Fatalf("after %dms: want the auto-renewed lock still held (ErrNotAcquired), got %v", (i+1)*400, err)
		}
	}
	select {
	case <-lease.Done():
		t.Fatalf("Done closed while renewing: %v", lease.Err())
	default:
	}
}

func TestClient_LeaseDone_ClosesWhenServerSaysGone(t *testing.T) {
	s, hs := newServer(t, fencehttp.Config{})
	_ = s
	c := mustClient(t, hs.URL, nil)
	lease := mustAcquire(t, c, "gone", 200*time.Millisecond, fence.WithAutoRenew())
	// Someone with the lease id releases it behind the lease's back (e.g. `fence release`).
	if err := c.Release(ctxFor(t), "gone", lease.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("Done did not close after the server lost the lease")
	}
	if !errors.Is(lease.Err(), fence.ErrNotHeld) {
		t.Fatalf("lease.Err: want ErrNotHeld, got %v", lease.Err())
	}
}

func TestClient_LongPollGrant_LeaseDatedFromTheGrant(t *testing.T) {
	c := shared.client
	name := uniq(t, "dated")
	holder := mustAcquire(t, c, name, time.Hour)
	const ttl = 2 * time.Second
	waiting := metricValue(t, shared.server, "fence_waits_total") + 1
	type res struct {
		l   *fence.Lease
		err error
	}
	got := make(chan res, 1)
	go func() {
		l, err := c.Acquire(ctxFor(t), name, ttl, fence.WithWait(time.Minute), fence.WithAutoRenew())
		got <- res{l, err}
	}()
	waitForWaiters(t, shared.server, waiting)
	time.Sleep(ttl * 3 / 4) // the poll outlasts most of a TTL before the grant
	if err := holder.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.l.Release(context.Background())
	// Dated from when the poll began, the lease would have under ttl/4 left.
	if left := time.Until(r.l.Deadline()); left < ttl/2 {
		t.Fatalf("lease granted at the end of a long poll: want about %v left, got %v", ttl, left)
	}
}

func TestClient_Acquire_WaitSurvivesServerRestart(t *testing.T) {
	locker := inmem.NewLocker(inmem.Options{}) // the store outlives both server processes
	start := func(addr string) (*fencehttp.Server, *http.Server) {
		s, err := fencehttp.NewServer(fencehttp.Config{Locker: locker})
		if err != nil {
			t.Fatal(err)
		}
		var ln net.Listener
		for i := 0; ; i++ { // the port of the first server may take a moment to be free
			if ln, err = net.Listen("tcp", addr); err == nil || i == 100 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: s.Handler()}
		go hs.Serve(ln)
		t.Cleanup(func() { hs.Close() })
		return s, hs
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for both servers
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s1, hs1 := start(addr)
	c := mustClient(t, "http://"+addr, nil)
	holder := mustAcquire(t, c, "restart", time.Hour)
	w := startWaiter(t, c, "restart", time.Minute)
	waitForWaiters(t, s1, 1)
	// A graceful restart: drain ends the long poll with 503, the port goes away,
	// a new server comes up on it.
	s1.Drain()
	if err := hs1.Shutdown(ctxFor(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	start(addr)
	w.wantHandover(t, holder) // through the new server, to the waiter of the old one
}
