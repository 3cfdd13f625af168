package fencehttp_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// The reproducer over HTTP: a PUT whose token the lock never had, or
// whose lock was never granted, is 409 unissued_token naming both tokens, writes
// nothing, and the real holder still writes; the refusals are counted.
func TestServer_KV_UnissuedToken409_NothingWritten(t *testing.T) {
	s, hs, _ := newBoltServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	var last *fence.Lease
	for range 9 {
		last = mustAcquire(t, c, "nightly", time.Minute)
		if err := last.Release(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
	}
	w := call(t, "PUT", hs.URL+"/v1/kv/brick", "typo", map[string]string{"Fence-Token": "999999", "Fence-Lock": "nightly"})
	wantError(t, "PUT with a token never issued", w, 409, "unissued_token")
	if w.json["lock"] != "nightly" || w.json["token"] != float64(999999) || w.json["last"] != float64(last.Token()) || w.json["other_lease"] != nil {
		t.Fatalf("unissued_token body: want lock nightly, token 999999, last %d and no other_lease, got %s", last.Token(), w.raw)
	}
	w = call(t, "PUT", hs.URL+"/v1/kv/brick", "typo", map[string]string{"Fence-Token": "42", "Fence-Lock": "never"})
	wantError(t, "PUT under a lock never granted", w, 409, "unissued_token")
	if w.json["last"] != float64(0) {
		t.Fatalf("unissued_token of a lock never granted: want \"last\":0, got %s", w.raw)
	}
	if g := call(t, "GET", hs.URL+"/v1/kv/brick", "", nil); g.status != 404 || g.header.Get("Fence-Token") != "" {
		t.Fatalf("GET after refused writes: want 404 without a fence, got %d %v %s", g.status, g.header, g.raw)
	}
	if err := c.Put(ctxFor(t), "brick", []byte("real"), last.Fence()); err != nil {
		t.Fatalf("the real holder's Put: %v", err)
	}
	if got := metricValue(t, s, "fence_unissued_rejections_total"); got != 2 {
		t.Errorf("fence_unissued_rejections_total = %v, want 2", got)
	}
	if got := metricValue(t, s, "fence_stale_rejections_total"); got != 0 {
		t.Errorf("fence_stale_rejections_total = %v, want 0: an unissued token is counted apart", got)
	}
}

// DELETE removes the value and keeps the fence; GET then answers 404 with the
// fence headers, which the client reads as a nil value and the fence; a purge
// removes both.
func TestServer_KV_DeleteKeepsFence_PurgeRemovesIt(t *testing.T) {
	base, c := shared.srv.URL, shared.client
	lock, key := uniq(t, "lock"), uniq(t, "key")
	path := base + "/v1/kv/" + fencehttp.EscapeName(key)
	a := mustAcquire(t, c, lock, time.Minute)
	if err := c.Put(ctxFor(t), key, []byte("v"), a.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, lock, time.Minute)
	hb := map[string]string{"Fence-Token": b.Token().String(), "Fence-Lock": fencehttp.EscapeName(lock), "Fence-Lease": b.ID()}
	d := call(t, "DELETE", path, "", hb)
	if d.status != 200 || d.json["key"] != key || d.json["lock"] != lock || d.json["token"] != float64(b.Token()) {
		t.Fatalf("DELETE: want 200 {key, lock, token %d}, got %d %s", b.Token(), d.status, d.raw)
	}
	g := call(t, "GET", path, "", nil)
	if g.status != 404 || g.json["code"] != "not_found" || g.header.Get("Fence-Token") != b.Token().String() || g.header.Get("Fence-Lock") != fencehttp.EscapeName(lock) {
		t.Fatalf("GET of a deleted key: want 404 not_found with Fence-Token %d and Fence-Lock, got %d %v %s", b.Token(), g.status, g.header, g.raw)
	}
	head, err := http.Head(path)
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	if head.StatusCode != 404 || head.Header.Get("Fence-Token") != b.Token().String() {
		t.Fatalf("HEAD of a deleted key: want 404 with Fence-Token %d, got %d %v", b.Token(), head.StatusCode, head.Header)
	}
	it, err := c.Get(ctxFor(t), key)
	if err != nil || it.Value != nil || it.Fence != (fence.Fence{Name: lock, Token: b.Token()}) {
		t.Fatalf("client Get of a deleted key = %q %+v, %v; want a nil value and %s#%d", it.Value, it.Fence, err, lock, b.Token())
	}
	// The fence stayed: the released holder is stale; a second delete finds nothing.
	wantError(t, "stale PUT after DELETE", call(t, "PUT", path, "zombie", map[string]string{"Fence-Token": a.Token().String(), "Fence-Lock": fencehttp.EscapeName(lock)}), 409, "stale_token")
	wantError(t, "second DELETE", call(t, "DELETE", path, "", hb), 404, "not_found")
	wantError(t, "DELETE without a fence", call(t, "DELETE", path, "", nil), 400, "invalid")
	wantError(t, "DELETE with purge=maybe", call(t, "DELETE", path+"?purge=maybe", "", hb), 400, "invalid")
	wantError(t, "purge with a fence", call(t, "DELETE", path+"?purge=true", "", hb), 400, "invalid")

	p := call(t, "DELETE", path+"?purge=true", "", nil)
	if p.status != 200 || p.json["key"] != key || p.json["purged"] != true {
		t.Fatalf("purge: want 200 {key, purged: true}, got %d %s", p.status, p.raw)
	}
	if g := call(t, "GET", path, "", nil); g.status != 404 || g.header.Get("Fence-Token") != "" {
		t.Fatalf("GET of a purged key: want 404 without fence headers, got %d %v", g.status, g.header)
	}
	if _, err := c.Get(ctxFor(t), key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("client Get of a purged key: want ErrNotFound, got %v", err)
	}
	wantError(t, "second purge", call(t, "DELETE", path+"?purge=true", "", nil), 404, "not_found")
	// After the purge, another lock may fence the key.
	o := mustAcquire(t, c, uniq(t, "other"), time.Minute)
	if err := c.Put(ctxFor(t), key, []byte("o"), o.Fence()); err != nil {
		t.Fatalf("Put under another lock after the purge: %v", err)
	}
}

// The Go client's Delete and Purge, and the lease it sends: a fence with a lease
// id always carries Fence-Lease, which the store checks.
func TestClient_DeleteAndPurge(t *testing.T) {
	c := shared.client
	ctx := ctxFor(t)
	lock, key := uniq(t, "lock"), uniq(t, "key")
	l := mustAcquire(t, c, lock, time.Minute)
	if err := c.Put(ctx, key, []byte("v"), l.Fence()); err != nil {
		t.Fatal(err)
	}
	forged := l.Fence()
	forged.LeaseID = "0123456789abcdef0123456789abcdef"
	var un *fence.UnissuedTokenError
	if err := c.Delete(ctx, key, forged); !errors.As(err, &un) || !un.OtherLease {
		t.Fatalf("Delete under another lease id: want *UnissuedTokenError{OtherLease}, got %v: the client must send Fence-Lease", err)
	}
	if err := c.Delete(ctx, key, l.Fence()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := c.Delete(ctx, key, l.Fence()); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("second Delete: want ErrNotFound, got %v", err)
	}
	if err := c.Delete(ctx, "", l.Fence()); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Delete of an empty key: want ErrInvalid, got %v", err)
	}
	if err := c.Purge(ctx, key); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if err := c.Purge(ctx, key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("second Purge: want ErrNotFound, got %v", err)
	}
	msg := strconv.Quote(key)
	if err := c.Purge(ctx, key); err == nil || err.Error() != "purge "+msg+": not found" {
		t.Fatalf("Purge error: want %q, got %v", "purge "+msg+": not found", err)
	}
}
