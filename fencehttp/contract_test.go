package fencehttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// rawCall sends one request with the path exactly as given (no cleaning, no
// re-escaping) and never follows a redirect: a redirect is an answer to check.
func rawCall(t testing.TB, method, base, path, body string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), method, base, strings.NewReader(body))
	if err != nil {
		t.Fatalf("NewRequest %s %s: %v", method, base, err)
	}
	req.URL.Opaque = path // sent as the request target verbatim
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return send(t, &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, req)
}

// newBoltServer starts a server of its own on a fresh bolt store (the default of
// `fence serve`), with cfg's limits.
func newBoltServer(t testing.TB, cfg fencehttp.Config) (*fencehttp.Server, *httptest.Server, *bolt.Store) {
	t.Helper()
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Locker, cfg.KV = store, store
	s, err := fencehttp.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		store.Close()
	})
	return s, hs, store
}

// Item: every fenced write names its lock. Without Fence-Lock the server used to
// take the key's current lock, so a token of another lock's counter was compared as
// if it were that lock's (999 > 1: accepted) and the namespace check never ran.
func TestServer_FencedWrite_WithoutFenceLock_400EvenOnFencedKey(t *testing.T) {
	_, hs, _ := newBoltServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	lease := mustAcquire(t, c, "report", time.Minute)
	if err := c.Put(ctxFor(t), "ledger", []byte("100"), lease.Fence()); err != nil {
		t.Fatalf("Put with the lease's fence: %v", err)
	}
	noLock := map[string]string{"Fence-Token": "999"} // another counter's token, no Fence-Lock
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/v1/kv/ledger", "hijacked"},          // a key that a lock fences
		{"POST", "/v1/fences/ledger", ""},             // the same, fence only
		{"PUT", "/v1/kv/never-written", "v"},          // a key nobody fences yet
		{"POST", "/v1/fences/never-fenced-yet", ""},   // the same, fence only
		{"PUT", "/v1/kv/ledger?lock=report", "h"},     // no other way to name it
		{"POST", "/v1/fences/ledger?lock=report", ""}, // either
	} {
		a := call(t, w.method, hs.URL+w.path, w.body, noLock)
		wantError(t, w.method+" "+w.path+" without Fence-Lock", a, 400, "invalid")
		if a.json["field"] != "Fence-Lock" || !strings.Contains(a.json["error"].(string), "Fence-Lock") {
			t.Fatalf("%s %s without Fence-Lock: want the field Fence-Lock named, got %s", w.method, w.path, a.raw)
		}
	}
	item, err := c.Get(ctxFor(t), "ledger")
	if err != nil || string(item.Value) != "100" || item.Fence.Token != lease.Token() {
		t.Fatalf("after refused writes: want %q at token %d, got %q %+v, %v", "100", lease.Token(), item.Value, item.Fence, err)
	}
	// With the lock named, a token of another lock is refused as another lock's.
	other := mustAcquire(t, c, "other", time.Minute)
	a := call(t, "PUT", hs.URL+"/v1/kv/ledger", "hijacked", map[string]string{"Fence-Token": other.Token().String(), "Fence-Lock": "other", "Fence-Lease": other.ID()})
	wantError(t, "token of another lock", a, 409, "wrong_lock")
	// And 999, which the lock named never had, as a token never issued (P9).
	a = call(t, "PUT", hs.URL+"/v1/kv/ledger", "hijacked", map[string]string{"Fence-Token": "999", "Fence-Lock": "other"})
	wantError(t, "token never issued", a, 409, "unissued_token")
	// A fence without a lock name is refused by the client before any request.
	if err := c.Put(ctxFor(t), "ledger", []byte("x"), fence.Fence{Token: lease.Token(), LeaseID: lease.ID()}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("client Put without a lock name: want ErrInvalid, got %v", err)
	}
}

// Item: a path with dot or empty segments, literal or escaped, is a 400, never a
// redirect to another lock (a ServeMux answers 307 to the cleaned path, and a client
// following it would take the lock "b").
func TestServer_DotOrEmptySegments_400NeverRedirect(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	fenced := map[string]string{"Fence-Token": "1", "Fence-Lock": "l"}
	for _, c := range []struct {
		method, path string
		header       map[string]string
	}{
		{"POST", "/v1/locks/a/../b/acquire", nil},
		{"POST", "/v1/locks/../b/acquire", nil},
		{"POST", "/v1/locks//acquire", nil},
		{"POST", "/v1/locks/a//b/acquire", nil},
		{"POST", "/v1/locks/a/./b/acquire", nil},
		{"POST", "/v1/locks/b/./acquire", nil},
		{"POST", "/v1/locks/a/%2e%2e/b/acquire", nil},
		{"POST", "/v1/locks/a/%2E%2E/b/acquire", nil},
		{"POST", "/v1/locks/a/.%2e/b/acquire", nil},
		{"POST", "/v1/locks/a/%2e/b/acquire", nil},
		{"POST", "/v1/locks/b/%2e/renew", nil},
		{"GET", "/v1/locks/a/..", nil},
		{"GET", "/v1/locks/a/%2E%2E", nil},
		{"PUT", "/v1/kv/a/./b", fenced},
		{"PUT", "/v1/kv/a/%2E/b", fenced},
		{"PUT", "/v1/kv/a//b", fenced},
		{"POST", "/v1/fences/a/../b", fenced},
		{"GET", "/v1/kv/a/%2e%2e/b", nil},
		{"GET", "/v1/../healthz", nil},
	} {
		a := rawCall(t, c.method, hs.URL, c.path, `{}`, c.header)
		if a.status != 400 || a.json["code"] != "invalid" || a.header.Get("Location") != "" {
			t.Errorf("%s %s: want 400 JSON code invalid and no Location, got %d Location %q %s", c.method, c.path, a.status, a.header.Get("Location"), a.raw)
		}
	}
	// A target starting with "//" cannot be sent by net/http's client (it would be
	// the absolute form), so write it by hand, as curl sends it.
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST //v1/locks/b/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"invalid"`) {
		t.Errorf("POST //v1/locks/b/acquire: want 400 code invalid, got %d %s", resp.StatusCode, body)
	}
	cl := mustClient(t, hs.URL, nil)
	if info, err := cl.Inspect(ctxFor(t), "b"); err != nil || info.Held || info.LastToken != 0 {
		t.Fatalf("lock b after the refused paths: want never acquired, got %+v, %v", info, err)
	}
	// The names "." and ".." still work when sent as one escaped segment.
	for _, name := range []string{".", ".."} {
		lease := mustAcquire(t, cl, name, time.Minute)
		if err := lease.Release(ctxFor(t)); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
	}
}

// Item: a 409 after a wait reports the time left when the wait ended, not when it
// began: a 2s wait on a 30s lease leaves at most 28s. With an Inspector the server
// asks the store; without, it corrects the store's figure by the time waited.
func TestServer_AcquireHeldAfterWait_ExpiresInAsOfTheWaitsEnd(t *testing.T) {
	for _, tc := range []struct {
		what   string
		locker fence.Locker
	}{
		{"inspector", inmem.NewLocker(inmem.Options{})},
		{"no inspector", lockerOnly{inmem.NewLocker(inmem.Options{})}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			_, hs := newServer(t, fencehttp.Config{Locker: tc.locker})
			if _, err := tc.locker.Acquire(ctxFor(t), "busy", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			// The holder's lease was granted before this request was sent, so when the
			// 2s wait ends it has at most 28s left.
			a := call(t, "POST", hs.URL+"/v1/locks/busy/acquire", `{"wait_ms":2000}`, nil)
			wantError(t, "acquire after a 2s wait", a, 409, "held")
			left, _ := a.json["expires_in_ms"].(float64)
			if left > 28000 || left < 1000 {
				t.Fatalf("expires_in_ms after a 2s wait on a 30s lease: want at most 28000 (and well above 0), got %v: %s", left, a.raw)
			}
			msg := a.json["error"].(string)
			m := regexp.MustCompile(`^lock "busy" is held \(expires in (\d+(\.\d)?s)\)$`).FindStringSubmatch(msg)
			if m == nil {
				t.Fatalf("message after a 2s wait: want `lock \"busy\" is held (expires in N.Ns)`, got %q", msg)
			}
			// The message tells the same time as expires_in_ms (rounded down to 100ms).
			if d, err := time.ParseDuration(m[1]); err != nil || d > time.Duration(left)*time.Millisecond || time.Duration(left)*time.Millisecond-d >= 100*time.Millisecond {
				t.Fatalf("message after a 2s wait: %q disagrees with expires_in_ms %v", msg, left)
			}
		})
	}
}

// slowAck is a Locker whose grants are acknowledged late, as a store that commits a
// grant (fsync, Redis WAIT, Raft) after its TTL started: it sleeps after the inner
// Acquire returns. The lease keeps the inner store's deadline.
type slowAck struct {
	fence.Locker
	delay time.Duration

	mu     sync.Mutex
	grants []*fence.Lease
}

func (s *slowAck) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	lease, err := s.Locker.Acquire(ctx, name, ttl, opts...)
	if err == nil {
		s.mu.Lock()
		s.grants = append(s.grants, lease)
		s.mu.Unlock()
		time.Sleep(s.delay)
	}
	return lease, err
}

func (s *slowAck) last() *fence.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants[len(s.grants)-1]
}

// Item: a lease's local deadline is never later than the store's expiry, also when
// the grant was slow to be acknowledged and came at the end of a long poll: the
// server reports when the store's granting request started (waited_ms, rounded
// down), not when the store answered.
func TestClient_LeaseDeadline_NotLaterThanStoreExpiry_SlowGrantAck(t *testing.T) {
	const ttl = 10 * time.Second
	const delay = 300 * time.Millisecond
	t.Run("long poll", func(t *testing.T) {
		t.Parallel()
		store := &slowAck{Locker: inmem.NewLocker(inmem.Options{}), delay: delay}
		s, hs := newServer(t, fencehttp.Config{Locker: store})
		c := mustClient(t, hs.URL, nil)
		holder := mustAcquire(t, c, "job", time.Hour)
		type res struct {
			l   *fence.Lease
			err error
		}
		got := make(chan res, 1)
		go func() {
			l, err := c.Acquire(ctxFor(t), "job", ttl, fence.WithWait(time.Minute))
			got <- res{l, err}
		}()
		waitForWaiters(t, s, 1)
		if err := holder.Release(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		inner := store.last()
		if inner.Token() != r.l.Token() {
			t.Fatalf("the store's last grant has token %d, the client's lease %d", inner.Token(), r.l.Token())
		}
		if late := r.l.Deadline().Sub(inner.Deadline()); late > 0 {
			t.Fatalf("long-poll grant acknowledged %v late: the client's deadline is %v after the store's expiry (want never later)", delay, late)
		}
		// And it is not needlessly early either: the grant came after most of the poll.
		if early := inner.Deadline().Sub(r.l.Deadline()); early > delay {
			t.Fatalf("client's deadline %v before the store's: want within %v", early, delay)
		}
	})
	t.Run("no wait", func(t *testing.T) {
		t.Parallel()
		store := &slowAck{Locker: inmem.NewLocker(inmem.Options{}), delay: delay}
		_, hs := newServer(t, fencehttp.Config{Locker: store})
		a := call(t, "POST", hs.URL+"/v1/locks/free/acquire", `{"ttl_ms":10000}`, nil)
		if a.status != 200 {
			t.Fatalf("acquire: want 200, got %d %s", a.status, a.raw)
		}
		if waited, _ := a.json["waited_ms"].(float64); waited >= float64(delay.Milliseconds()) {
			t.Fatalf("waited_ms of a grant without a wait, acknowledged %v late: want below %d (the grant started at once), got %v", delay, delay.Milliseconds(), waited)
		}
		c := mustClient(t, hs.URL, nil)
		l := mustAcquire(t, c, "free2", ttl)
		if late := l.Deadline().Sub(store.last().Deadline()); late > 0 {
			t.Fatalf("client's deadline %v after the store's expiry", late)
		}
	})
}

// forbidden are substrings no user message may contain: package prefixes and
// internal wrapping.
var forbidden = []string{"bolt:", "inmem:", "fence:", "fencehttp:", "waited ", "json:", "Go struct", "\n"}

func checkUserMessage(t testing.TB, what, msg, name string) {
	t.Helper()
	for _, f := range forbidden {
		if strings.Contains(msg, f) {
			t.Errorf("%s: message %q contains %q", what, msg, f)
		}
	}
	if name != "" {
		if n := strings.Count(msg, fmt.Sprintf("%q", name)); n != 1 {
			t.Errorf("%s: message %q names %q %d times, want once", what, msg, name, n)
		}
	}
}

// exhaustedLocker's Acquire fails as a store's does once a name's counter is at
// fence.MaxToken, which no client can bring about any more (a heal goes at most
// fence.MaxHealAhead above a name's last token): a fault injected, answered 409.
type exhaustedLocker struct{ fence.Locker }

func (exhaustedLocker) Acquire(_ context.Context, name string, _ time.Duration, _ ...fence.AcquireOption) (*fence.Lease, error) {
	return nil, fmt.Errorf("inmem: acquire %q: counter at %d: %w", name, uint64(fence.MaxToken), fence.ErrTokenExhausted)
}

// panicLocker's Acquire panics: a bug in a store, answered 500.
type panicLocker struct{ fence.Locker }

func (panicLocker) Acquire(context.Context, string, time.Duration, ...fence.AcquireOption) (*fence.Lease, error) {
	panic("store bug: nil map")
}

// Item: every error body carries the message a user reads, in one line, each fact
// once, without the server's internal wrapping; codes stay as they were.
func TestServer_ErrorBodies_UserMessagesWithoutInternalWrapping(t *testing.T) {
	s, hs, _ := newBoltServer(t, fencehttp.Config{MaxBodyBytes: 200, MaxValueBytes: 10})
	base := hs.URL
	c := mustClient(t, base, nil)
	mustAcquire(t, c, "job1", time.Minute)
	a := mustAcquire(t, c, "report", time.Minute)
	if err := c.Put(ctxFor(t), "ledger-a", []byte("100"), a.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, "report", time.Minute)
	if err := c.Put(ctxFor(t), "ledger", []byte("100"), b.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := c.Fence(ctxFor(t), "fenced-only", b.Fence()); err != nil {
		t.Fatal(err)
	}
	o := mustAcquire(t, c, "other", time.Minute)
	secret := driver.NewLeaseID()
	type exp struct {
		what, method, path, body string
		header                   map[string]string
		status                   int
		code, msg, name          string // msg: exact, or a regexp if it starts with ^
	}
	cases := []exp{
		{"ttl zero", "POST", "/v1/locks/job1/acquire", `{"ttl_ms":0}`, nil, 400, "invalid",
			`acquire "job1": invalid ttl_ms "0": must be between 1 and 86400000`, "job1"},
		{"unknown field", "POST", "/v1/locks/job1/acquire", `{"ttl":5}`, nil, 400, "invalid",
			`acquire "job1": invalid body: unknown field "ttl"`, "job1"},
		{"ttl string", "POST", "/v1/locks/job1/acquire", `{"ttl_ms":"30s"}`, nil, 400, "invalid",
			`acquire "job1": invalid body: field "ttl_ms" must be an integer, got string`, "job1"},
		{"bad lease never echoed", "POST", "/v1/locks/job1/release", `{"lease":"` + secret + ` x"}`, nil, 400, "invalid",
			`release "job1": invalid lease: must be printable ASCII without spaces`, "job1"},
		{"bad name", "POST", "/v1/locks/a%01b/acquire", `{}`, nil, 400, "invalid",
			`acquire: invalid name "a\x01b": contains control character U+0001`, ""},
		{"missing Fence-Lock", "PUT", "/v1/kv/ledger", "v", map[string]string{"Fence-Token": "5"}, 400, "invalid",
			`put "ledger": invalid Fence-Lock: is required: name the lock whose counter issued Fence-Token`, "ledger"},
		{"bad Fence-Token", "PUT", "/v1/kv/ledger", "v", map[string]string{"Fence-Token": "x", "Fence-Lock": "report"}, 400, "invalid",
			`^put "ledger": invalid Fence-Token "x": is not a decimal integer in \[1, \d+\]$`, "ledger"},
		{"dot segment", "POST", "/v1/locks/a/../b/acquire", `{}`, nil, 400, "invalid",
			`^invalid path "/v1/locks/a/\.\./b/acquire": has a "\.\." segment; `, ""},
		{"no route", "GET", "/nope", "", nil, 404, "not_found", `no such route: GET /nope`, ""},
		{"never written", "GET", "/v1/kv/never", "", nil, 404, "not_found", `get "never": not found`, "never"},
		{"method", "DELETE", "/v1/locks/job1", "", nil, 405, "method_not_allowed",
			`method DELETE not allowed on /v1/locks/job1 (allowed: GET, HEAD)`, ""},
		{"held", "POST", "/v1/locks/job1/acquire", `{}`, nil, 409, "held",
			`^lock "job1" is held \(expires in \d+(\.\d)?s\)$`, "job1"},
		{"stale", "PUT", "/v1/kv/ledger", "90", map[string]string{"Fence-Token": a.Token().String(), "Fence-Lock": "report"}, 409, "stale_token",
			fmt.Sprintf(`put "ledger": stale token %d, highest seen %d`, a.Token(), b.Token()), "ledger"},
		{"stale same token", "PUT", "/v1/kv/ledger-a", "90", map[string]string{"Fence-Token": a.Token().String(), "Fence-Lock": "report"}, 409, "stale_token",
			fmt.Sprintf(`put "ledger-a": stale token %d, highest seen %d (accepted under another lease)`, a.Token(), a.Token()), "ledger-a"},
		{"lease required", "PUT", "/v1/kv/ledger", "90", map[string]string{"Fence-Token": b.Token().String(), "Fence-Lock": "report"}, 409, "lease_required",
			fmt.Sprintf(`put "ledger": token %d of lock "report" belongs to a live lease: the write must carry its lease id (Fence-Lease)`, b.Token()), "ledger"},
		{"stale fence", "POST", "/v1/fences/ledger", "", map[string]string{"Fence-Token": a.Token().String(), "Fence-Lock": "report"}, 409, "stale_token",
			fmt.Sprintf(`fence "ledger": stale token %d, highest seen %d`, a.Token(), b.Token()), "ledger"},
		{"wrong lock", "PUT", "/v1/kv/ledger", "x", map[string]string{"Fence-Token": o.Token().String(), "Fence-Lock": "other", "Fence-Lease": o.ID()}, 409, "wrong_lock",
			`put "ledger": token of lock "other", but the key is fenced by lock "report"`, "ledger"},
		{"unissued", "PUT", "/v1/kv/ledger", "x", map[string]string{"Fence-Token": "999999", "Fence-Lock": "report"}, 409, "unissued_token",
			fmt.Sprintf(`put "ledger": token 999999 of lock "report" was never issued: the last token issued is %d`, b.Token()), "ledger"},
		{"never granted", "DELETE", "/v1/kv/ledger", "", map[string]string{"Fence-Token": "42", "Fence-Lock": "never"}, 409, "unissued_token",
			`delete "ledger": token 42 of lock "never" was never issued: the lock was never granted`, "ledger"},
		{"other lease", "POST", "/v1/fences/ledger", "", map[string]string{"Fence-Token": b.Token().String(), "Fence-Lock": "report", "Fence-Lease": secret}, 409, "unissued_token",
			fmt.Sprintf(`fence "ledger": token %d of lock "report" was issued to another lease`, b.Token()), "ledger"},
		{"delete never written", "DELETE", "/v1/kv/never", "", map[string]string{"Fence-Token": b.Token().String(), "Fence-Lock": "report", "Fence-Lease": b.ID()}, 404, "not_found",
			`delete "never": not found`, "never"},
		{"purge with a fence", "DELETE", "/v1/kv/ledger?purge=true", "", map[string]string{"Fence-Token": b.Token().String(), "Fence-Lock": "report"}, 400, "invalid",
			`purge "ledger": invalid Fence-Token: must not be given with purge=true: a purge removes the fence, it is not fenced`, "ledger"},
		{"no value", "GET", "/v1/kv/fenced-only", "", nil, 404, "not_found",
			fmt.Sprintf(`get "fenced-only": no value (the key is fenced by lock "report" at token %d)`, b.Token()), "fenced-only"},
		{"release not held", "POST", "/v1/locks/job1/release", `{"lease":"` + secret + `"}`, nil, 410, "not_held",
			`release "job1": lease not held (expired, released, or never granted)`, "job1"},
		{"renew not held", "POST", "/v1/locks/job1/renew", `{"lease":"` + secret + `"}`, nil, 410, "not_held",
			`renew "job1": lease not held (expired, released, or never granted)`, "job1"},
		{"value too large", "PUT", "/v1/kv/ledger", "01234567890", map[string]string{"Fence-Token": "999", "Fence-Lock": "report"}, 413, "too_large",
			`put "ledger": value of 11 bytes is over the limit of 10`, "ledger"},
		{"body too large", "POST", "/v1/locks/job1/acquire", `{"ttl_ms":1000` + strings.Repeat(" ", 300) + `}`, nil, 413, "too_large",
			`acquire "job1": body of 315 bytes is over the limit of 200`, "job1"},
	}
	check := func(base string, c exp) {
		t.Helper()
		ans := call(t, c.method, base+c.path, c.body, c.header)
		wantError(t, c.what, ans, c.status, c.code)
		msg := ans.json["error"].(string)
		if strings.HasPrefix(c.msg, "^") {
			if !regexp.MustCompile(c.msg).MatchString(msg) {
				t.Errorf("%s: want a message matching %s, got %q", c.what, c.msg, msg)
			}
		} else if msg != c.msg {
			t.Errorf("%s: want message\n\t%q\ngot\n\t%q", c.what, c.msg, msg)
		}
		checkUserMessage(t, c.what, msg, c.name)
		if strings.Contains(ans.raw, secret) {
			t.Errorf("%s: the answer echoes a lease id: %s", c.what, ans.raw)
		}
	}
	for _, c := range cases {
		check(base, c)
	}

	// 401, 501, 503 (a closed store, a draining server) and 500 need servers of their own.
	_, auth := newServer(t, fencehttp.Config{AuthTokens: [][]byte{[]byte("s3cret")}})
	check(auth.URL, exp{"unauthorized", "POST", "/v1/locks/job1/acquire", `{}`, nil, 401, "unauthorized",
		`unauthorized: missing or wrong bearer token`, ""})
	_, bare := newServer(t, fencehttp.Config{Locker: lockerOnly{inmem.NewLocker(inmem.Options{})}})
	check(bare.URL, exp{"no inspector", "GET", "/v1/locks/job1", "", nil, 501, "not_implemented",
		`inspect "job1": not supported by this server's store (it cannot report lock state)`, "job1"})
	check(bare.URL, exp{"no healer", "POST", "/v1/locks/job1/heal", `{"seen":3}`, nil, 501, "not_implemented",
		`heal "job1": not supported by this server's store (its counters cannot go backwards, so there is nothing to heal)`, "job1"})

	_, closed, store := newBoltServer(t, fencehttp.Config{})
	store.Close()
	check(closed.URL, exp{"store closed", "POST", "/v1/locks/job1/acquire", `{}`, nil, 503, "unavailable",
		`acquire "job1": store closed`, "job1"})

	s.Drain()
	check(base, exp{"draining", "GET", "/healthz", "", nil, 503, "unavailable", `the server is shutting down`, ""})

	_, broken := newServer(t, fencehttp.Config{Locker: panicLocker{inmem.NewLocker(inmem.Options{})}})
	check(broken.URL, exp{"panic", "POST", "/v1/locks/job1/acquire", `{}`, nil, 500, "internal", `internal error`, ""})
}

// Item: the Client's errors for a server answer read exactly as the server's
// message, and still match the sentinel of the code (errors.Is) and the typed error
// of the detail (errors.As); the Client's own errors (bad arguments, no server) read
// the same way. Acquire's held lock and bad arguments are the exception: the acquire
// engine words those as it does for every backend.
func TestClient_Errors_ServerMessageVerbatimAndTyped(t *testing.T) {
	_, hs, _ := newBoltServer(t, fencehttp.Config{MaxValueBytes: 10})
	c := mustClient(t, hs.URL, nil)
	ctx := ctxFor(t)
	mustAcquire(t, c, "job1", time.Minute)
	a := mustAcquire(t, c, "report", time.Minute)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, "report", time.Minute)
	if err := c.Put(ctx, "ledger", []byte("100"), b.Fence()); err != nil {
		t.Fatal(err)
	}
	lease := driver.NewLeaseID()

	// The same requests, raw: the client's Error() must be the body's "error".
	serverSays := func(method, path, body string, h map[string]string) string {
		t.Helper()
		ans := call(t, method, hs.URL+path, body, h)
		msg, _ := ans.json["error"].(string)
		if msg == "" {
			t.Fatalf("%s %s: no error message: %d %s", method, path, ans.status, ans.raw)
		}
		return msg
	}
	wantMsg := func(what string, err error, want string) {
		t.Helper()
		if err == nil || err.Error() != want {
			t.Fatalf("%s: want the error %q, got %v", what, want, err)
		}
		checkUserMessage(t, what, err.Error(), "")
	}

	// A held lock and a bad TTL are worded by the acquire engine, as on every backend.
	_, err := c.Acquire(ctx, "job1", time.Minute)
	var held *fence.HeldError
	var se *fencehttp.ServerError
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.As(err, &held) || held.Name != "job1" || held.ExpiresIn <= 0 || errors.As(err, &se) {
		t.Fatalf("Acquire of a held lock: want ErrNotAcquired and *HeldError{job1, >0}, not a *ServerError, got %v", err)
	}
	if !regexp.MustCompile(`^fencehttp: lock "job1" not acquired: held, expires in \d+(\.\d+)?s$`).MatchString(err.Error()) {
		t.Fatalf("Acquire of a held lock: want `fencehttp: lock \"job1\" not acquired: held, expires in ...`, got %q", err)
	}
	_, err = c.Acquire(ctx, "job1", 0)
	if want := `fencehttp: acquire "job1": fence: invalid ttl "0s": must be between 1ms and 24h0m0s`; err == nil || err.Error() != want || !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Acquire with TTL 0: want ErrInvalid and %q, got %v", want, err)
	}

	err = c.Put(ctx, "ledger", []byte("90"), a.Fence())
	wantMsg("stale Put", err, serverSays("PUT", "/v1/kv/ledger", "90", map[string]string{"Fence-Token": a.Token().String(), "Fence-Lock": "report", "Fence-Lease": a.ID()}))
	var stale *fence.StaleTokenError
	if !errors.Is(err, fence.ErrStaleToken) || !errors.As(err, &stale) || stale.Highest != b.Token() || stale.Token != a.Token() {
		t.Fatalf("stale Put: want ErrStaleToken and *StaleTokenError{Token:%d Highest:%d}, got %v", a.Token(), b.Token(), err)
	}
	wantMsg("stale Put", err, fmt.Sprintf(`put "ledger": stale token %d, highest seen %d`, a.Token(), b.Token()))

	o := mustAcquire(t, c, "other", time.Minute)
	err = c.Fence(ctx, "ledger", o.Fence())
	wantMsg("Fence of another lock", err, serverSays("POST", "/v1/fences/ledger", "", map[string]string{"Fence-Token": o.Token().String(), "Fence-Lock": "other", "Fence-Lease": o.ID()}))
	var ns *fence.NamespaceError
	if !errors.Is(err, fence.ErrNamespace) || !errors.As(err, &ns) || ns.Want != "report" || ns.Got != "other" {
		t.Fatalf("Fence of another lock: want ErrNamespace and *NamespaceError{Want:report Got:other}, got %v", err)
	}

	// Anyone who read b's token writes with it and no lease: refused, typed.
	err = c.Put(ctx, "ledger", []byte("bare"), fence.Fence{Name: "report", Token: b.Token()})
	wantMsg("Put of a live lease's token without its lease", err, serverSays("PUT", "/v1/kv/ledger", "bare", map[string]string{"Fence-Token": b.Token().String(), "Fence-Lock": "report"}))
	var lr *fence.LeaseRequiredError
	if !errors.Is(err, fence.ErrLeaseRequired) || !errors.As(err, &lr) || *lr != (fence.LeaseRequiredError{Lock: "report", Token: b.Token()}) || !errors.As(err, &se) || se.Code != "lease_required" {
		t.Fatalf("Put of a live lease's token without its lease: want ErrLeaseRequired, *LeaseRequiredError{report %d} and code lease_required, got %v (%+v)", b.Token(), err, lr)
	}

	err = c.Put(ctx, "ledger", []byte("typo"), fence.Fence{Name: "report", Token: 999999})
	wantMsg("Put of a token never issued", err, serverSays("PUT", "/v1/kv/ledger", "typo", map[string]string{"Fence-Token": "999999", "Fence-Lock": "report"}))
	var un *fence.UnissuedTokenError
	if !errors.Is(err, fence.ErrUnissuedToken) || !errors.As(err, &un) || *un != (fence.UnissuedTokenError{Lock: "report", Token: 999999, Last: b.Token()}) {
		t.Fatalf("Put of a token never issued: want ErrUnissuedToken and *UnissuedTokenError{report 999999 Last:%d}, got %v (%+v)", b.Token(), err, un)
	}
	err = c.Delete(ctx, "ledger", fence.Fence{Name: "report", Token: b.Token(), LeaseID: lease})
	if !errors.As(err, &un) || *un != (fence.UnissuedTokenError{Lock: "report", Token: b.Token(), Last: b.Token(), OtherLease: true}) {
		t.Fatalf("Delete under another lease: want *UnissuedTokenError{OtherLease: true}, got %v", err)
	}
	wantMsg("Delete under another lease", err, fmt.Sprintf(`delete "ledger": token %d of lock "report" was issued to another lease`, b.Token()))

	err = c.Release(ctx, "job1", lease)
	wantMsg("Release of no lease", err, serverSays("POST", "/v1/locks/job1/release", `{"lease":"`+lease+`"}`, nil))
	wantMsg("Release of no lease", err, `release "job1": lease not held (expired, released, or never granted)`)
	if !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Release of no lease: want ErrNotHeld, got %v", err)
	}
	err = c.Renew(ctx, "job1", lease, time.Minute)
	wantMsg("Renew of no lease", err, `renew "job1": lease not held (expired, released, or never granted)`)
	if !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew of no lease: want ErrNotHeld, got %v", err)
	}

	_, err = c.Get(ctx, "never")
	wantMsg("Get of a key never written", err, serverSays("GET", "/v1/kv/never", "", nil))
	if !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get of a key never written: want ErrNotFound, got %v", err)
	}

	err = c.Put(ctx, "ledger", []byte("01234567890"), b.Fence())
	wantMsg("Put over the limit", err, `put "ledger": value of 11 bytes is over the limit of 10`)
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Put over the limit: want ErrInvalid, got %v", err)
	}

	// Refused by the client before any request, worded as the server would.
	var inv *fence.InvalidError
	err = c.Release(ctx, "job1", "a b")
	wantMsg("Release with a bad lease id", err, serverSays("POST", "/v1/locks/job1/release", `{"lease":"a b"}`, nil))
	if !errors.Is(err, fence.ErrInvalid) || !errors.As(err, &inv) || inv.Field != "lease" {
		t.Fatalf("Release with a bad lease id: want ErrInvalid and *InvalidError{Field: lease}, got %v", err)
	}
	err = c.Put(ctx, "ledger", []byte("x"), fence.Fence{Token: 3})
	wantMsg("Put without a lock name", err, `put "ledger": invalid name: is empty`)
	if !errors.Is(err, fence.ErrInvalid) || !errors.As(err, &inv) {
		t.Fatalf("Put without a lock name: want ErrInvalid and *InvalidError, got %v", err)
	}

	// A cancelled context is named as such and still says the store may have acted.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = c.Renew(cctx, "job1", lease, time.Minute)
	wantMsg("Renew with a cancelled context", err, `renew "job1": context canceled`)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew with a cancelled context: want context.Canceled and ErrUnavailable (not ErrNotHeld), got %v", err)
	}

	// No server: named by the URL as configured, with a short reason.
	_, gone := newServer(t, fencehttp.Config{})
	url := gone.URL
	gone.Close()
	down := mustClient(t, url, nil)
	_, err = down.Acquire(ctx, "job1", time.Minute)
	wantMsg("Acquire with the server down", err, "cannot reach the fence server at "+url+": connection refused")
	if !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire with the server down: want ErrUnavailable and not ErrNotAcquired, got %v", err)
	}
	err = down.Release(ctx, "job1", lease)
	wantMsg("Release with the server down", err, "cannot reach the fence server at "+url+": connection refused")
	if !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Release with the server down: want ErrUnavailable and not ErrNotHeld, got %v", err)
	}
}

// The Client never follows a redirect: one from a proxy that cleans paths could
// point an acquire at another lock.
func TestClient_Redirect_NotFollowed(t *testing.T) {
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/locks/other/acquire", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/locks/other/acquire", http.StatusTemporaryRedirect)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	c := mustClient(t, hs.URL, nil)
	_, err := c.Acquire(ctxFor(t), "mine", time.Minute)
	var se *fencehttp.ServerError
	if err == nil || !errors.As(err, &se) || se.Status != http.StatusTemporaryRedirect || followed.Load() != 0 {
		t.Fatalf("Acquire answered by a redirect: want a *ServerError 307 and the redirect not followed, got %v (followed %d times)", err, followed.Load())
	}
}
