package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/zookeeper"
)

// nodeData returns the data of the only lock node of name under root, whose name
// must need no encoding.
func nodeData(t *testing.T, c *zk.Conn, root, name string) string {
	t.Helper()
	dir := root + "/" + name
	kids, _, err := c.Children(dir)
	if err != nil || len(kids) != 1 {
		t.Fatalf("Children(%s) = %q, %v; want one node", dir, kids, err)
	}
	data, _, err := c.Get(dir + "/" + kids[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The owner follows the TTL in the holder's data, and Renew keeps it; without an
// owner the data is what versions before owners wrote, so they read it in full.
func TestLocker_NodeData_OwnerKeptByRenew(t *testing.T) {
	root := freshRoot("owner-data")
	l := open(t, &zookeeper.Options{Root: root})
	c := rawConn(t)
	ctx := testCtx(t)
	lease, err := l.Acquire(ctx, "owned", time.Minute, fence.WithOwner("host:1 job x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeData(t, c, root, "owned"); got != "h 60000 host:1 job x" {
		t.Fatalf("holder's data = %q; want \"h 60000 host:1 job x\"", got)
	}
	if err := lease.Renew(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := nodeData(t, c, root, "owned"); got != "h 30000 host:1 job x" {
		t.Fatalf("holder's data after Renew = %q; want \"h 30000 host:1 job x\"", got)
	}
	if info, err := l.Inspect(ctx, "owned"); err != nil || info.Owner != "host:1 job x" {
		t.Fatalf("Inspect after Renew = %+v, %v; want the owner kept", info, err)
	}
	mustAcquire(t, ctx, l, "plain", time.Minute)
	if got := nodeData(t, c, root, "plain"); got != "h 60000" {
		t.Fatalf("data of a holder without owner = %q; want \"h 60000\", as before owners", got)
	}
}

// A waiter's node carries its owner too, so the lock reports it from the moment the
// waiter is promoted, and after its claim.
func TestLocker_Waiter_OwnerReportedOnceItHolds(t *testing.T) {
	root := freshRoot("owner-wait")
	l := open(t, &zookeeper.Options{Root: root})
	c := rawConn(t)
	ctx := testCtx(t)
	first, err := l.Acquire(ctx, "q", time.Minute, fence.WithOwner("first"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fence.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, "q", time.Minute, fence.WithOwner("second"), fence.WithWait(30*time.Second))
		if err != nil {
			t.Errorf("waiter's Acquire = %v; want the lock", err)
		}
		got <- lease
	}()
	waitForData(t, c, root+"/q", 1, "w second")
	if info, err := l.Inspect(ctx, "q"); err != nil || info.Owner != "first" {
		t.Fatalf("Inspect with a waiter = %+v, %v; want the holder's owner \"first\"", info, err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		return
	}
	defer second.Release(ctx)
	if info, err := l.Inspect(ctx, "q"); err != nil || info.Owner != "second" || info.Token != second.Token() {
		t.Fatalf("Inspect after the waiter's grant = %+v, %v; want owner \"second\", token %d", info, err, second.Token())
	}
	if got := nodeData(t, c, root, "q"); got != "h 60000 second" {
		t.Fatalf("claimed waiter's data = %q; want \"h 60000 second\"", got)
	}
}

// waitForData waits, watching, until the node at index i of dir (in sequence order)
// has data want.
func waitForData(t *testing.T, c *zk.Conn, dir string, i int, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for round := 0; round < 100; round++ {
		kids, _, ch, err := c.ChildrenW(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) > i {
			path := dir + "/" + sortedNodes(kids)[i]
			data, _, dch, err := c.GetW(path)
			if err == nil && string(data) == want {
				return
			}
			if err == nil {
				ch = dch
			}
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("node %d of %s never had data %q", i, dir, want)
		}
	}
	t.Fatalf("node %d of %s: data %q not seen in 100 changes", i, dir, want)
}

// sortedNodes returns lock node names in sequence order (the fixed-width suffix
// after the last '-').
func sortedNodes(kids []string) []string {
	out := append([]string(nil), kids...)
	seq := func(s string) string { return s[strings.LastIndexByte(s, '-')+1:] }
	sort.Slice(out, func(i, j int) bool { return seq(out[i]) < seq(out[j]) })
	return out
}

// A holder's node as versions before owners wrote it ("h <ms>") reads as held with
// owner "", and can be revoked: the new waiter behind it is woken and granted.
func TestLocker_OldNodeData_NoOwnerRevocable(t *testing.T) {
	root := freshRoot("old-data")
	l := open(t, &zookeeper.Options{Root: root})
	c := rawConn(t)
	ctx := testCtx(t)
	for _, p := range []string{"/fence-test", root, root + "/old"} {
		if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	path, err := c.Create(root+"/old/n-0123456789abcdef-", []byte("h 60000"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := c.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Inspect(ctx, "old")
	if err != nil || !info.Held || info.Owner != "" || info.Token != fence.Token(st.Czxid) || info.ExpiresIn <= 0 {
		t.Fatalf("Inspect of an old holder's node = %+v, %v; want held, token %d, owner \"\"", info, err, st.Czxid)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(ctx, "old", time.Minute, fence.WithOwner("new"), fence.WithWait(30*time.Second))
		if err == nil && lease.Token() <= fence.Token(st.Czxid) {
			err = fmt.Errorf("token %d; want above the old holder's %d", lease.Token(), st.Czxid)
		}
		got <- err
	}()
	waitForData(t, c, root+"/old", 1, "w new")
	if err := l.Revoke(ctx, "old"); err != nil {
		t.Fatalf("Revoke of the old holder = %v; want nil", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter after Revoke: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not granted 10s after Revoke")
	}
}

// Revoke's delete is versioned: a holder's node judged before a renewal is judged
// again, and one judged before a release is never confused with the next grant.
func TestLocker_Revoke_NeverEndsALaterGrant(t *testing.T) {
	l := open(t, nil)
	ctx := testCtx(t)
	name := "revoke-" + driver.NewLeaseID()[:8]
	first := mustAcquire(t, ctx, l, name, time.Minute)
	stale, err := l.ReadHeld(name)
	if err != nil || stale.Path() == "" {
		t.Fatalf("ReadHeld = %+v, %v; want the holder's node", stale, err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := mustAcquire(t, ctx, l, name, time.Minute)
	if again, err := l.EndHeld(stale); again || !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("EndHeld of the released lease's node = %v, %v; want ErrNotHeld", again, err)
	}
	if err := next.Renew(ctx, time.Minute); err != nil {
		t.Fatalf("the later grant's Renew = %v; want nil: the stale revoke must not end it", err)
	}
	judged, err := l.ReadHeld(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Renew(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if again, err := l.EndHeld(judged); !again || err != nil {
		t.Fatalf("EndHeld of a node renewed since = %v, %v; want again, nil", again, err)
	}
	if err := next.Renew(ctx, time.Minute); err != nil {
		t.Fatalf("Renew after a delete that lost to a renewal = %v; want nil", err)
	}
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke = %v; want nil", err)
	}
	if err := next.Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("revoked lease's Renew = %v; want ErrNotHeld", err)
	}
}

// An operator's Locker (another session) revokes a lease it did not grant; a lease
// whose TTL passed by the leader's clock is not held, so Revoke says ErrNotHeld.
func TestLocker_Revoke_FromAnotherSession_ExpiredNotHeld(t *testing.T) {
	holder, admin := open(t, nil), open(t, nil)
	ctx := testCtx(t)
	name := "revoke-admin-" + driver.NewLeaseID()[:8]
	lease := mustAcquire(t, ctx, holder, name, time.Minute)
	if err := admin.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke from another session = %v; want nil", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("revoked lease's Release = %v; want ErrNotHeld", err)
	}
	short := mustAcquire(t, ctx, holder, name, 50*time.Millisecond)
	defer short.Release(ctx)
	for i := 0; ; i++ {
		info, err := admin.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if i == 100 {
			t.Fatalf("Inspect = %+v 5s after a 50ms lease; want it expired", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	err := admin.Revoke(ctx, name)
	if want := fmt.Sprintf("zookeeper: revoke %q: %v", name, fence.ErrNotHeld); !errors.Is(err, fence.ErrNotHeld) || err.Error() != want {
		t.Fatalf("Revoke of an expired lease = %v; want %q", err, want)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := admin.Revoke(cctx, name); !errors.Is(err, fence.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Revoke with an ended context = %v; want ErrUnavailable and context.Canceled", err)
	}
}
