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

// The tests of owners and revoke run on inmem-backed servers: the reference store
// has both, whatever the state of the others (the conformance runs cover bolt).

// Item: an acquire's "owner" is reported by the lock's state and the listing while
// the lease is held, never the lease id, and is gone once the lock is free.
func TestServer_Owner_ReportedByStateAndListNeverTheLeaseID(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	const owner = "worker-7:4242 ./job.sh --nightly"
	a := call(t, "POST", hs.URL+"/v1/locks/jobs%2Fnightly/acquire", `{"ttl_ms":60000,"owner":"`+owner+`"}`, nil)
	if a.status != 200 {
		t.Fatalf("acquire with an owner: want 200, got %d %s", a.status, a.raw)
	}
	lease := a.json["lease"].(string)
	st := call(t, "GET", hs.URL+"/v1/locks/jobs%2Fnightly", "", nil)
	if st.status != 200 || st.json["owner"] != owner || st.json["held"] != true {
		t.Fatalf("state of a lock held by %q: want 200 with that owner, got %d %s", owner, st.status, st.raw)
	}
	list := call(t, "GET", hs.URL+"/v1/locks?prefix=jobs", "", nil)
	locks, _ := list.json["locks"].([]any)
	if len(locks) != 1 || locks[0].(map[string]any)["owner"] != owner {
		t.Fatalf("listing: want the one lock with owner %q, got %s", owner, list.raw)
	}
	for _, raw := range []string{st.raw, list.raw} {
		if strings.Contains(raw, lease) {
			t.Fatalf("an answer about the lock carries the lease id: %s", raw)
		}
	}
	call(t, "POST", hs.URL+"/v1/locks/jobs%2Fnightly/release", `{"lease":"`+lease+`"}`, nil)
	if st := call(t, "GET", hs.URL+"/v1/locks/jobs%2Fnightly", "", nil); st.json["owner"] != nil || st.json["held"] != false {
		t.Fatalf("state after the release: want free, without an owner, got %s", st.raw)
	}

	// The Go client sends WithOwner's owner and reads it back.
	c := mustClient(t, hs.URL, nil)
	mustAcquire(t, c, "report", time.Minute, fence.WithOwner("über host:1 job"))
	info, err := c.Inspect(ctxFor(t), "report")
	if err != nil || info.Owner != "über host:1 job" {
		t.Fatalf("Inspect through the client: want owner %q, got %+v, %v", "über host:1 job", info, err)
	}
	infos, err := c.List(ctxFor(t), fence.ListOptions{Prefix: "report"})
	if err != nil || len(infos) != 1 || infos[0].Owner != "über host:1 job" {
		t.Fatalf("List through the client: want the owner, got %+v, %v", infos, err)
	}
}

// Item: a bad owner is 400 naming the field "owner", and nothing is granted.
func TestServer_BadOwner_400NamingTheField(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	for _, tc := range []struct{ what, owner, reason string }{
		{"a newline", `a\nb`, "unprintable character U+000A"},
		{"a tab", `a\tb`, "unprintable character U+0009"},
		{"257 bytes", strings.Repeat("o", fence.MaxOwnerLen+1), "longer than 256"},
		{"a number", ``, ""}, // see below: not a string at all
	} {
		body := `{"owner":"` + tc.owner + `"}`
		if tc.what == "a number" {
			body = `{"owner":42}`
		}
		a := call(t, "POST", hs.URL+"/v1/locks/job/acquire", body, nil)
		wantError(t, "acquire with "+tc.what+" in the owner", a, 400, "invalid")
		msg := a.json["error"].(string)
		if tc.what == "a number" {
			if !strings.Contains(msg, `"owner"`) {
				t.Errorf("acquire with a number as the owner: want the message to name the field, got %q", msg)
			}
			continue
		}
		if a.json["field"] != "owner" || !strings.Contains(msg, "invalid owner") || !strings.Contains(msg, tc.reason) {
			t.Errorf("acquire with %s in the owner: want field owner and %q, got %s", tc.what, tc.reason, a.raw)
		}
		checkUserMessage(t, "bad owner", msg, "job")
	}
	if st := call(t, "GET", hs.URL+"/v1/locks/job", "", nil); st.json["held"] != false {
		t.Fatalf("after the refused acquires: want the lock free, got %s", st.raw)
	}
	if a := call(t, "POST", hs.URL+"/v1/locks/job/acquire", `{"owner":"`+strings.Repeat("o", fence.MaxOwnerLen)+`"}`, nil); a.status != 200 {
		t.Fatalf("acquire with a 256-byte owner: want 200, got %d %s", a.status, a.raw)
	}
}

// Item: revoke ends the holder's lease at once (its renew and release are 410),
// wakes a long-polling waiter, and the next grant's token is higher, so that once
// the next holder fences the resource the revoked holder's write is refused: the
// flow fencehttp/README.md documents. A second revoke finds nothing: 404
// "not_held", one line naming the lock.
func TestServer_Revoke_EndsLeaseWakesWaiterAndFencesTheRevokedHolderOut(t *testing.T) {
	s, hs := newServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	old := mustAcquire(t, c, "report", time.Minute, fence.WithOwner("host:1 stuck-job"))
	if err := c.Put(ctxFor(t), "ledger", []byte("balance=100"), old.Fence()); err != nil {
		t.Fatalf("the first holder's write: %v", err)
	}
	w := startWaiter(t, c, "report", time.Minute)
	waitForWaiters(t, s, 1)

	a := call(t, "POST", hs.URL+"/v1/locks/report/revoke", `{}`, nil)
	if a.status != 200 || a.json["name"] != "report" || a.json["revoked"] != true {
		t.Fatalf("revoke of a held lock: want 200 {\"name\":\"report\",\"revoked\":true}, got %d %s", a.status, a.raw)
	}
	next := w.wantGrant(t, "the revoke")
	if next.Token() <= old.Token() {
		t.Fatalf("grant after the revoke: token %d, want above the revoked %d", next.Token(), old.Token())
	}
	if err := old.Renew(ctxFor(t), time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("the revoked holder's renew: want ErrNotHeld, got %v", err)
	}
	// Until the next holder writes or fences, the revoked holder's token is still
	// the highest the resource has seen: fence first.
	if err := c.Fence(ctxFor(t), "ledger", next.Fence()); err != nil {
		t.Fatalf("the next holder's fence: %v", err)
	}
	err := c.Put(ctxFor(t), "ledger", []byte("balance=90"), old.Fence())
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != next.Token() {
		t.Fatalf("the revoked holder's write after the fence: want a stale token refusal with highest %d, got %v", next.Token(), err)
	}
	if item, err := c.Get(ctxFor(t), "ledger"); err != nil || string(item.Value) != "balance=100" {
		t.Fatalf("ledger after the refused write: want balance=100, got %q, %v", item.Value, err)
	}
	if got := metricValue(t, s, "fence_revokes_total"); got != 1 {
		t.Errorf("fence_revokes_total: want 1, got %v", got)
	}

	if err := next.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	a = call(t, "POST", hs.URL+"/v1/locks/report/revoke", "", nil) // no body is {} too
	wantError(t, "revoke of a free lock", a, 404, "not_held")
	if msg := a.json["error"]; msg != `revoke "report": not held (free, or its lease expired): nothing to revoke` || a.json["name"] != "report" {
		t.Fatalf("revoke of a free lock: want the one line naming the lock and its name, got %s", a.raw)
	}
	err = c.Revoke(ctxFor(t), "report")
	var se *fencehttp.ServerError
	if !errors.Is(err, fence.ErrNotHeld) || !errors.As(err, &se) || se.Status != 404 || err.Error() != a.json["error"] {
		t.Fatalf("Client.Revoke of a free lock: want the server's 404 message, matching ErrNotHeld, got %v", err)
	}
}

// Item: revoke's refusals: a bad name or body is 400 (the Client refuses a bad name
// before any request), a store without fence.Revoker is 501, and with auth tokens
// any token the server accepts may revoke a lease taken with another (admin-only
// revoke waits for scoped tokens).
func TestServer_Revoke_Refusals(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	wantError(t, "revoke with an unknown field", call(t, "POST", hs.URL+"/v1/locks/x/revoke", `{"lease":"abc"}`, nil), 400, "invalid")
	wantError(t, "revoke of a name with a control character", call(t, "POST", hs.URL+"/v1/locks/a%01b/revoke", `{}`, nil), 400, "invalid")
	wantError(t, "PUT on revoke", call(t, "PUT", hs.URL+"/v1/locks/x/revoke", `{}`, nil), 405, "method_not_allowed")
	c := mustClient(t, "http://127.0.0.1:1", nil) // never reached
	if err := c.Revoke(ctxFor(t), ""); !errors.Is(err, fence.ErrInvalid) || err.Error() != "revoke: invalid name: is empty" {
		t.Fatalf("Client.Revoke(\"\"): want ErrInvalid before any request, got %v", err)
	}

	_, bare := newServer(t, fencehttp.Config{Locker: lockerOnly{inmem.NewLocker(inmem.Options{})}})
	a := call(t, "POST", bare.URL+"/v1/locks/x/revoke", `{}`, nil)
	wantError(t, "revoke without a Revoker", a, 501, "not_implemented")
	if err := mustClient(t, bare.URL, nil).Revoke(ctxFor(t), "x"); !errors.Is(err, fencehttp.ErrNotImplemented) {
		t.Fatalf("Client.Revoke on a store without Revoker: want ErrNotImplemented, got %v", err)
	}

	_, authed := newServer(t, fencehttp.Config{AuthTokens: [][]byte{[]byte("holder-token"), []byte("operator-token")}})
	holder := mustClient(t, authed.URL, &fencehttp.ClientOptions{AuthToken: "holder-token"})
	mustAcquire(t, holder, "job", time.Minute)
	if err := mustClient(t, authed.URL, nil).Revoke(ctxFor(t), "job"); !errors.Is(err, fencehttp.ErrUnauthorized) {
		t.Fatalf("revoke without a token: want ErrUnauthorized, got %v", err)
	}
	if err := mustClient(t, authed.URL, &fencehttp.ClientOptions{AuthToken: "operator-token"}).Revoke(ctxFor(t), "job"); err != nil {
		t.Fatalf("revoke with another accepted token: want it done, got %v", err)
	}
}
