package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/zookeeper"
)

func TestExample_Flow(t *testing.T) {
	l := open(t, nil)
	ctx := testCtx(t)
	name := "example/" + driver.NewLeaseID()[:8]
	first, err := l.Acquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire = %v; want a lease", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release = %v; want nil", err)
	}
	second, err := l.Acquire(ctx, name, 10*time.Second, fence.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("second Acquire = %v; want a lease", err)
	}
	defer second.Release(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("second token = %d; want > first %d", second.Token(), first.Token())
	}
}

// The token is the node's czxid: the czxid a raw client reads for the holder's node
// equals the lease's token, and the directory name encodes '/' and '.'.
func TestLocker_Token_IsNodeCzxid(t *testing.T) {
	l := open(t, &zookeeper.Options{Root: "/fence-test/czxid"})
	ctx := testCtx(t)
	name := "a/b.c " + driver.NewLeaseID()[:8]
	lease := mustAcquire(t, ctx, l, name, time.Minute)
	defer lease.Release(ctx)
	c := rawConn(t)
	dirs, _, err := c.Children("/fence-test/czxid")
	if err != nil {
		t.Fatalf("Children(root) = %v", err)
	}
	want := "a%2Fb%2Ec%20" + strings.TrimPrefix(name, "a/b.c ")
	found := false
	for _, d := range dirs {
		if d == want {
			found = true
		}
	}
	if !found {
		t.Fatalf("lock directories = %q; want one named %q", dirs, want)
	}
	kids, _, err := c.Children("/fence-test/czxid/" + want)
	if err != nil || len(kids) != 1 {
		t.Fatalf("Children(lock dir) = %q, %v; want one node", kids, err)
	}
	_, st, err := c.Get("/fence-test/czxid/" + want + "/" + kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if fence.Token(st.Czxid) != lease.Token() {
		t.Fatalf("holder node czxid = %d; want the lease token %d", st.Czxid, lease.Token())
	}
	if st.EphemeralOwner == 0 {
		t.Fatalf("holder node EphemeralOwner = 0; want an ephemeral node")
	}
}

// Closing the connection ends the session: its node goes at once, so another client
// is granted the lock without waiting for the TTL, and the first lease's Done closes
// when it learns its session is gone.
func TestLocker_SessionClosed_NextHolderAtOnce(t *testing.T) {
	a := open(t, nil)
	b := open(t, nil)
	ctx := testCtx(t)
	name := "session-" + driver.NewLeaseID()[:8]
	la := mustAcquire(t, ctx, a, name, time.Minute)
	a.Close()
	start := time.Now()
	lb, err := b.Acquire(ctx, name, time.Minute, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the holder's session closed = %v; want a lease", err)
	}
	defer lb.Release(ctx)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("grant took %v after the holder's session closed; want well under the 1m TTL", d)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token = %d; want > %d", lb.Token(), la.Token())
	}
	err = la.Renew(ctx, time.Minute)
	if !errors.Is(err, fence.ErrNotHeld) && !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("Renew of a lease whose session closed = %v; want ErrNotHeld or ErrClosed", err)
	}
}

// A lease granted on one Locker can be renewed and released through another Locker
// (a different session): ownership is the lease id, as for every backend.
func TestLocker_RenewRelease_FromAnotherSession(t *testing.T) {
	a, b := open(t, nil), open(t, nil)
	ctx := testCtx(t)
	name := "cross-" + driver.NewLeaseID()[:8]
	lease := mustAcquire(t, ctx, a, name, time.Minute)
	if err := b.Renew(ctx, name, lease.ID(), time.Minute); err != nil {
		t.Fatalf("Renew through another Locker = %v; want nil", err)
	}
	if err := b.Release(ctx, name, lease.ID()); err != nil {
		t.Fatalf("Release through another Locker = %v; want nil", err)
	}
	if err := a.Release(ctx, name, lease.ID()); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("second Release = %v; want ErrNotHeld", err)
	}
}

func TestLocker_Closed_ErrClosed(t *testing.T) {
	l := open(t, nil)
	l.Close()
	_, err := l.Acquire(testCtx(t), "closed", time.Minute)
	if !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("Acquire after Close = %v; want ErrClosed", err)
	}
	if !strings.HasPrefix(err.Error(), "zookeeper: ") {
		t.Fatalf("error %q; want it to start with the package name", err)
	}
}

func TestOpen_BadInput(t *testing.T) {
	if _, err := zookeeper.Open(nil, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Open(no servers) = %v; want ErrInvalid", err)
	}
	if _, err := zookeeper.NewLocker(nil, nil, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("NewLocker(nil conn) = %v; want ErrInvalid", err)
	}
	servertest.SkipIfShort(t)
	for _, root := range []string{"relative", "/", "/a//b"} {
		if _, err := zookeeper.Open([]string{srv.Addr}, &zookeeper.Options{Root: root}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Open with root %q = %v; want ErrInvalid", root, err)
		}
	}
}

func TestOpen_NoServer_ErrUnavailable(t *testing.T) {
	port, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = zookeeper.Open([]string{fmt.Sprintf("127.0.0.1:%d", port)}, &zookeeper.Options{SessionTimeout: time.Second})
	if !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Open(nothing listening) = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Open(nothing listening) took %v; want about the 1s session timeout", d)
	}
}

// When the server goes away for longer than the session timeout (LOST, as the client
// sees it), the lease's Done closes with ErrNotHeld long before its TTL: another
// client may hold the lock by now.
func TestLease_Done_ClosesWhenDisconnectOutlastsSession(t *testing.T) {
	servertest.SkipIfShort(t)
	own := servertest.ZooKeeper(t)
	l, err := zookeeper.Open([]string{own.Addr}, &zookeeper.Options{SessionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Acquire(testCtx(t), "lost", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now() // before Close, which returns only after the data is removed
	own.Close()
	select {
	case <-lease.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("lease Done still open %v after the server died (session timeout 1s, TTL 1h); want it closed once the disconnect outlasts the session timeout", time.Since(killed).Round(time.Millisecond))
	}
	if !errors.Is(lease.Err(), fence.ErrNotHeld) {
		t.Fatalf("lease.Err() = %v; want an error matching ErrNotHeld", lease.Err())
	}
	if d := time.Since(killed); d < 900*time.Millisecond {
		t.Fatalf("Done closed %v after the server died; want not before the 1s session timeout (SUSPENDED is not LOST)", d)
	}
}

// A waiter whose wait ends (context cancelled, or the wait ran out) deletes its node:
// only the holder's node is left, so no orphan stands in the queue.
func TestLocker_Wait_EndDeletesWaitingNode(t *testing.T) {
	root := freshRoot("waiters")
	l := open(t, &zookeeper.Options{Root: root})
	ctx := testCtx(t)
	holder := mustAcquire(t, ctx, l, "w", time.Minute)
	defer holder.Release(ctx)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(cctx, "w", time.Minute, fence.WithWait(fence.WaitForever))
		done <- err
	}()
	c := rawConn(t)
	// Wait until the waiter's node is there (two nodes), watching the directory.
	for {
		kids, _, ch, err := c.ChildrenW(root + "/w")
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) == 2 {
			break
		}
		<-ch
	}
	cancel()
	if err := <-done; !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v; want ErrNotAcquired and context.Canceled", err)
	}
	_, err := l.Acquire(ctx, "w", time.Minute, fence.WithWait(100*time.Millisecond))
	if !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire with a 100ms wait on a held lock = %v; want ErrNotAcquired", err)
	}
	kids, _, err := c.Children(root + "/w")
	if err != nil || len(kids) != 1 {
		t.Fatalf("lock nodes after the waits ended = %q, %v; want only the holder's", kids, err)
	}
}

// No herd: with three waiters queued behind a holder, each node is watched by one
// session only (its successor's), so a release wakes one waiter, not all of them.
func TestLocker_Waiters_WatchOnlyPredecessor(t *testing.T) {
	root := freshRoot("herd")
	holder := open(t, &zookeeper.Options{Root: root})
	ctx := testCtx(t)
	lease := mustAcquire(t, ctx, holder, "h", time.Minute)
	const waiters = 3
	results := make(chan *fence.Lease, waiters)
	for i := 0; i < waiters; i++ {
		w := open(t, &zookeeper.Options{Root: root})
		go func() {
			l, err := w.Acquire(ctx, "h", time.Minute, fence.WithWait(30*time.Second))
			if err != nil {
				t.Errorf("waiter Acquire = %v", err)
			}
			results <- l
		}()
	}
	dir := root + "/h"
	// Wait until every waiter has its node and its watch in place.
	var (
		out string
		err error
	)
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err = servers.ZooKeeperCommand(srv.Addr, "wchp")
		if err != nil {
			t.Fatalf("wchp = %v", err)
		}
		if strings.Count(out, dir+"/") >= waiters || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the server's watch table: nothing to wait on
	}
	watchers := map[string]int{} // node path -> sessions watching it
	var cur string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "/"):
			cur = line
		case strings.TrimSpace(line) != "" && strings.HasPrefix(cur, dir+"/"):
			watchers[cur]++
		}
	}
	if len(watchers) != waiters {
		t.Fatalf("watched lock nodes = %v; want %d (the holder and the first %d waiters, one watch each); wchp:\n%s", watchers, waiters, waiters-1, out)
	}
	t.Logf("watches on lock nodes: %v", watchers)
	for p, n := range watchers {
		if n != 1 {
			t.Errorf("node %s is watched by %d sessions; want 1 (its successor only)", p, n)
		}
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var last fence.Token = lease.Token()
	for i := 0; i < waiters; i++ {
		l := <-results
		if l == nil {
			t.FailNow()
		}
		if l.Token() <= last {
			t.Fatalf("waiter %d got token %d after %d; want FIFO grants with increasing tokens", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
