package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

func uniq(prefix string) string { return prefix + "-" + driver.NewLeaseID()[:12] }

// setup returns the test's context, a client of the shared server and a fresh name
// that starts with what.
func setup(t *testing.T, what string) (context.Context, *clientv3.Client, string) {
	return testCtx(t), client(t), uniq(what)
}

// mustAcquire returns a lease on name from l, acquired with opts, or fails t.
func mustAcquire(t *testing.T, ctx context.Context, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	a, err := l.Acquire(ctx, name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v; want a lease", name, err)
	}
	return a
}

// lockKey returns the lock key of name, which must exist, as etcd has it.
func lockKey(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get lock key = %v, %v; want one key", resp, err)
	}
	return resp.Kvs[0]
}

// takeOver acquires name through acquire, which must grant it with a token above
// prev's: the next holder after what happened to prev. The lease is released at
// the end of the test.
func takeOver(t *testing.T, prev *fence.Lease, what string, acquire func() (*fence.Lease, error)) {
	t.Helper()
	b, err := acquire()
	if err != nil {
		t.Fatalf("acquire after %s = %v; want a lease", what, err)
	}
	t.Cleanup(func() { b.Release(context.Background()) })
	if b.Token() <= prev.Token() {
		t.Fatalf("token after %s = %d; want > %d", what, b.Token(), prev.Token())
	}
}

func TestOpen_NoEndpoints_ErrInvalid(t *testing.T) {
	for _, eps := range [][]string{nil, {""}, {"127.0.0.1:1", " "}} {
		s, err := etcd.Open(context.Background(), eps, nil)
		if s != nil {
			s.Close()
		}
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Open(%q) = %v; want an error matching fence.ErrInvalid", eps, err)
		}
	}
}

func TestOpen_Unreachable_ErrUnavailable(t *testing.T) {
	port, err := servers.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s, err := etcd.Open(context.Background(), []string{fmt.Sprintf("127.0.0.1:%d", port)}, &etcd.Options{DialTimeout: 500 * time.Millisecond})
	if s != nil {
		s.Close()
	}
	if !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Open(unreachable) = %v; want an error matching fence.ErrUnavailable", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Open(unreachable) took %v; want about the 500ms dial timeout", el)
	}
}

func TestLocker_Unreachable_AcquireEndsWithCtxReleaseErrUnavailable(t *testing.T) {
	port, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l := etcd.NewLocker(newClient(t, []string{fmt.Sprintf("127.0.0.1:%d", port)}), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	// The grant waits for a connection until ctx ends: the Engine's not-acquired error.
	lease, err := l.Acquire(ctx, "x", time.Second)
	if lease != nil || !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on an unreachable etcd = %v, %v; want nil, an error matching fence.ErrNotAcquired and context.DeadlineExceeded", lease, err)
	}
	if err := l.Release(ctx, "x", driver.NewLeaseID()); !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Release on an unreachable etcd = %v; want fence.ErrUnavailable", err)
	}
}

// The etcd lease behind a grant disappears (revoked by an operator, or expired while
// the holder was partitioned): Renew says ErrNotHeld, Done closes, and the next grant
// has a higher token.
func TestLocker_LostEtcdLease_RenewErrNotHeldDoneCloses(t *testing.T) {
	ctx, cli, name := setup(t, "lost")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Minute)
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(lockKey(t, ctx, cli, name).Lease)); err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew after the etcd lease was revoked = %v; want fence.ErrNotHeld", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("Done still open after Renew said ErrNotHeld")
	}
	takeOver(t, a, "a lost etcd lease", func() (*fence.Lease, error) { return fence.TryAcquire(ctx, l, name, time.Minute) })
}

// A TTL below etcd's minimum lease TTL is granted, not rejected nor rounded up on the
// holder's side: the lease's deadline is the TTL asked (so Done closes then, never
// after etcd's expiry), while etcd keeps the lock key for its minimum, which the etcd
// lease's granted TTL says and Inspect reports as held (it said "not held" in the
// etcd lease's last second, while nobody could take the lock); the next holder gets
// the lock after that.
func TestLocker_TTLBelowEtcdMinimum_HolderDeadlineAsAskedEtcdHoldsLonger(t *testing.T) {
	ctx, cli, name := setup(t, "short")
	holder, waiter := etcd.NewLocker(cli, nil), etcd.NewLocker(client(t), nil)
	const ttl = 100 * time.Millisecond
	called := time.Now()
	a, err := holder.Acquire(ctx, name, ttl)
	returned := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if d := a.Deadline(); d.Before(called.Add(ttl)) || d.After(returned.Add(ttl)) {
		t.Fatalf("Deadline %v after the call; want the %v asked, counted from the request", d.Sub(called), ttl)
	}
	ttlResp, err := cli.TimeToLive(ctx, clientv3.LeaseID(lockKey(t, ctx, cli, name).Lease))
	if err != nil {
		t.Fatal(err)
	}
	if min := int64(etcdmember.MinLeaseTTL / time.Second); ttlResp.GrantedTTL < min {
		t.Fatalf("etcd lease granted for %ds; want etcd's minimum, %ds", ttlResp.GrantedTTL, min)
	}
	<-a.Done() // the holder's deadline
	_, tryErr := fence.TryAcquire(ctx, waiter, name, time.Minute)
	info, infoErr := waiter.Inspect(ctx, name)
	if time.Since(called) >= etcdmember.MinLeaseTTL {
		t.Skip("inconclusive: the machine took longer than etcd's minimum lease TTL to get here")
	}
	if !errors.Is(tryErr, fence.ErrNotAcquired) {
		t.Fatalf("TryAcquire after the holder's deadline, within etcd's minimum = %v; want fence.ErrNotAcquired", tryErr)
	}
	if infoErr != nil || !info.Held || info.Token != a.Token() {
		t.Fatalf("Inspect after the holder's deadline = %+v, %v; want held by token %d (etcd still has the key)", info, infoErr, a.Token())
	}
	takeOver(t, a, "etcd expired the lease", func() (*fence.Lease, error) {
		return waiter.Acquire(ctx, name, time.Minute, fence.WithWait(etcdmember.MinLeaseTTL+10*time.Second))
	})
}

// A lock key overwritten by hand (no lease, another value): the holder can no longer
// renew or release, and nobody else is granted the lock until the key is deleted.
func TestLocker_HandEditedLockKey_NeverGrantedTwice(t *testing.T) {
	ctx, cli, name := setup(t, "edited")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Minute)
	key := etcd.DefaultPrefix + "lock/" + name
	if _, err := cli.Put(ctx, key, "by hand"); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, name, a.ID(), time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Renew after the key was edited = %v; want fence.ErrNotHeld", err)
	}
	if err := l.Release(ctx, name, a.ID()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release after the key was edited = %v; want fence.ErrNotHeld", err)
	}
	if b, err := fence.TryAcquire(ctx, l, name, time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
		if b != nil {
			b.Release(ctx)
		}
		t.Fatalf("TryAcquire of a hand-written lock key = %v; want fence.ErrNotAcquired", err)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil || !info.Held {
		t.Fatalf("Inspect of a hand-written lock key = %+v, %v; want Held", info, err)
	}
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	takeOver(t, a, "the edited key was deleted", func() (*fence.Lease, error) { return fence.TryAcquire(ctx, l, name, time.Minute) })
}

func TestLocker_RenewLongerTTL_KeepsTokenExtendsEtcdLease(t *testing.T) {
	ctx, cli, name := setup(t, "longer")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Second)
	defer a.Release(ctx)
	if err := a.Renew(ctx, time.Minute); err != nil {
		t.Fatalf("Renew(1m) of a 1s lease = %v; want nil", err)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Token != a.Token() || info.ExpiresIn < 50*time.Second {
		t.Fatalf("Inspect after Renew(1m) = %+v; want Held, Token %d, ExpiresIn about 1m", info, a.Token())
	}
}

func TestLocker_Close_EndsWaitWithErrClosed(t *testing.T) {
	ctx, cli, name := setup(t, "close")
	holder, waiter := etcd.NewLocker(cli, nil), etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, holder, name, time.Minute)
	defer a.Release(ctx)
	res := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, name, time.Minute, fence.WithWait(fence.WaitForever))
		res <- err
	}()
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, fence.ErrClosed) {
			t.Fatalf("waiting Acquire after Close = %v; want fence.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiting Acquire still blocked 5s after Close")
	}
	if _, err := waiter.Acquire(ctx, uniq("after"), time.Minute); !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("Acquire after Close = %v; want fence.ErrClosed", err)
	}
}

func TestKV_CorruptRecord_ErrCorruptNothingChanged(t *testing.T) {
	ctx, cli, key := setup(t, "corrupt")
	kv := etcd.NewKV(cli, nil)
	if _, err := cli.Put(ctx, etcd.DefaultPrefix+"kv/"+key, "not a record"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, key); !errors.Is(err, etcd.ErrCorrupt) {
		t.Fatalf("Get of a hand-written record = %v; want etcd.ErrCorrupt", err)
	}
	f := fence.Fence{Name: "l", Token: 1, LeaseID: driver.NewLeaseID()}
	if err := kv.Put(ctx, key, []byte("v"), f); !errors.Is(err, etcd.ErrCorrupt) {
		t.Fatalf("Put over a hand-written record = %v; want etcd.ErrCorrupt", err)
	}
	resp, err := cli.Get(ctx, etcd.DefaultPrefix+"kv/"+key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "not a record" {
		t.Fatalf("record after the refused Put = %v, %v; want it unchanged", resp, err)
	}
}

func TestKV_PutTooLarge_ErrInvalid(t *testing.T) {
	kv := etcd.NewKV(client(t), nil)
	f := fence.Fence{Name: "l", Token: 1, LeaseID: driver.NewLeaseID()}
	err := kv.Put(testCtx(t), uniq("big"), make([]byte, etcd.MaxValueSize+1), f)
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Put of %d bytes = %v; want fence.ErrInvalid", etcd.MaxValueSize+1, err)
	}
}

// An acquire that finds the lock held says for how long, as etcd counts the holder's
// lease: TryAcquire at once, a wait at its end (its last try looks it up).
func TestLocker_Held_ErrorSaysExpiresIn(t *testing.T) {
	ctx, cli, name := setup(t, "held")
	holder, waiter := etcd.NewLocker(cli, nil), etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, holder, name, time.Minute)
	defer a.Release(ctx)
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		b, err := waiter.Acquire(ctx, name, time.Minute, fence.WithWait(wait))
		if b != nil {
			b.Release(ctx)
		}
		var held *fence.HeldError
		if !errors.As(err, &held) || held.ExpiresIn < 50*time.Second || held.ExpiresIn > time.Minute {
			t.Fatalf("Acquire(wait %v) of a lock held for 1m = %v; want a *fence.HeldError expiring in about 1m", wait, err)
		}
		want := fmt.Sprintf("etcd: lock %q not acquired", name)
		if wait > 0 {
			want += " after waiting " + wait.String()
		}
		want += ": held, expires in " + held.ExpiresIn.String()
		if err.Error() != want {
			t.Errorf("Acquire(wait %v) = %q; want %q", wait, err, want)
		}
	}
}

// A released grant's etcd lease is kept and refreshed with a keep-alive for the next
// grant, not granted anew (a grant is one more Raft write).
func TestLocker_ReleasedEtcdLeaseReused(t *testing.T) {
	ctx, cli, name := setup(t, "reuse")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, 10*time.Second)
	first := lockKey(t, ctx, cli, name).Lease
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, ctx, l, name, 10*time.Second)
	defer b.Release(ctx)
	if got := lockKey(t, ctx, cli, name).Lease; got != first {
		t.Fatalf("etcd lease of the next grant = %x; want the released grant's %x, refreshed", got, first)
	}
}

// A waiter is woken by its watch, not by the 5s fallback poll: a few handoffs in a
// row, each well within the poll interval.
func TestLocker_Waiter_WokenByWatch(t *testing.T) {
	ctx, cli, name := setup(t, "watch")
	holder, waiter := etcd.NewLocker(cli, nil), etcd.NewLocker(client(t), nil)
	const bound = 2 * time.Second // the fallback poll is 5s
	for i := range 3 {
		a := mustAcquire(t, ctx, holder, name, time.Minute)
		got := make(chan error, 1)
		go func() {
			b, err := waiter.Acquire(ctx, name, time.Minute, fence.WithWait(30*time.Second))
			if err == nil {
				err = b.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(200 * time.Millisecond) // the waiter's first try and watch
		released := time.Now()
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("handoff %d: waiter = %v; want a lease", i, err)
			}
		case <-time.After(bound):
			t.Fatalf("handoff %d: waiter not granted %v after the release; want its watch to wake it", i, time.Since(released).Round(time.Millisecond))
		}
	}
}

// ownerKey returns the owner key of name as etcd has it, or nil if there is none.
func ownerKey(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(ctx, etcd.DefaultPrefix+"owner/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// wantOwner fails t unless Inspect reports name held with owner.
func wantOwner(t *testing.T, ctx context.Context, l *etcd.Locker, name, owner, when string) {
	t.Helper()
	info, err := l.Inspect(ctx, name)
	if err != nil || !info.Held || info.Owner != owner {
		t.Fatalf("Inspect %s = %+v, %v; want held by owner %q", when, info, err, owner)
	}
}

// oldGrant writes a grant of name with lease id the way the version before owners
// did: the lock key (value: the lease id) under a new etcd lease, and the token
// record, in one transaction. It returns the etcd lease.
func oldGrant(t *testing.T, ctx context.Context, cli *clientv3.Client, name, id string) clientv3.LeaseID {
	t.Helper()
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	lk := etcd.DefaultPrefix + "lock/" + name
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)).
		Then(clientv3.OpPut(lk, id, clientv3.WithLease(g.ID)), clientv3.OpPut(etcd.DefaultPrefix+"token/"+name, "")).
		Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("old-format grant = %v, %v", resp, err)
	}
	return g.ID
}

// The lock key's value stays the plain lease id, and the owner key lives under the
// grant's etcd lease: an older version (which compares the value with the lease id
// and revokes the etcd lease at release) renews and releases a grant with an owner,
// and its release takes the owner key along.
func TestLocker_OwnerFormat_LockValueIsTheLeaseIDOwnerKeyUnderItsLease(t *testing.T) {
	ctx, cli, name := setup(t, "format")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner("host:1 job"))
	lock, owner := lockKey(t, ctx, cli, name), ownerKey(t, ctx, cli, name)
	if string(lock.Value) != a.ID() {
		t.Fatalf("lock key value = %q; want the plain lease id %q", lock.Value, a.ID())
	}
	if owner == nil || string(owner.Value) != "host:1 job" || owner.Lease != lock.Lease || owner.ModRevision != lock.CreateRevision {
		t.Fatalf("owner key = %+v; want %q under the lock key's etcd lease %d, written by the grant at %d",
			owner, "host:1 job", lock.Lease, lock.CreateRevision)
	}
	// An older version's release: delete if the value is the lease id, revoke the etcd lease.
	lk := etcd.DefaultPrefix + "lock/" + name
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(lk), "=", a.ID())).Then(clientv3.OpDelete(lk)).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("old-style release = %v, %v; want it to succeed", resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(lock.Lease)); err != nil {
		t.Fatal(err)
	}
	if k := ownerKey(t, ctx, cli, name); k != nil {
		t.Fatalf("owner key after the etcd lease was revoked = %+v; want it gone", k)
	}
}

// A grant written by the version before owners (no owner key) is reported without
// owner, and this version renews, releases and revokes it.
func TestLocker_OldFormatGrant_NoOwnerRenewReleaseRevokeWork(t *testing.T) {
	ctx, cli, name := setup(t, "oldgrant")
	l := etcd.NewLocker(cli, nil)
	id := driver.NewLeaseID()
	oldGrant(t, ctx, cli, name, id)
	wantOwner(t, ctx, l, name, "", "of an old-format grant")
	list, err := l.List(ctx, fence.ListOptions{Prefix: name})
	if err != nil || len(list) != 1 || !list[0].Held || list[0].Owner != "" {
		t.Fatalf("List of an old-format grant = %+v, %v; want it held without owner", list, err)
	}
	if err := l.Renew(ctx, name, id, 2*time.Minute); err != nil { // a TTL change: moves the key
		t.Fatalf("Renew of an old-format grant = %v", err)
	}
	if err := l.Release(ctx, name, id); err != nil {
		t.Fatalf("Release of an old-format grant = %v", err)
	}
	oldGrant(t, ctx, cli, name, driver.NewLeaseID())
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke of an old-format grant = %v", err)
	}
	if info, err := l.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("Inspect after Revoke = %+v, %v; want free", info, err)
	}
}

// An owner key left by an earlier grant (an older version released it without
// deleting the owner key, which waits for its etcd lease to end) is not the owner
// of a later grant.
func TestLocker_OwnerKeyOfAnEarlierGrant_NotReported(t *testing.T) {
	ctx, cli, name := setup(t, "stale")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner("earlier"))
	if _, err := cli.Delete(ctx, etcd.DefaultPrefix+"lock/"+name); err != nil { // release, owner key kept
		t.Fatal(err)
	}
	b := mustAcquire(t, ctx, l, name, time.Minute)
	defer b.Release(ctx)
	if b.Token() <= a.Token() || ownerKey(t, ctx, cli, name) == nil {
		t.Fatalf("setup: token %d after %d, owner key %v; want a later grant with the earlier owner key left", b.Token(), a.Token(), ownerKey(t, ctx, cli, name))
	}
	wantOwner(t, ctx, l, name, "", "with an earlier grant's owner key")
	list, err := l.List(ctx, fence.ListOptions{Prefix: name})
	if err != nil || len(list) != 1 || list[0].Owner != "" {
		t.Fatalf("List with an earlier grant's owner key = %+v, %v; want no owner", list, err)
	}
	// A later grant with an owner overwrites it.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner("later"))
	defer c.Release(ctx)
	wantOwner(t, ctx, l, name, "later", "of a later grant with an owner")
}

// A Renew that moves the lock key to an etcd lease of another TTL moves the owner
// key along, so the owner stays reported for as long as the lock is held.
func TestLocker_RenewMovesEtcdLease_OwnerKept(t *testing.T) {
	ctx, cli, name := setup(t, "moveowner")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Second, fence.WithOwner("mover"))
	defer a.Release(ctx)
	before := lockKey(t, ctx, cli, name).Lease
	if err := a.Renew(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	lock, owner := lockKey(t, ctx, cli, name), ownerKey(t, ctx, cli, name)
	if lock.Lease == before || owner == nil || owner.Lease != lock.Lease {
		t.Fatalf("after Renew(1m) of a 1s lease: lock key lease %d (was %d), owner key %+v; want both on the new etcd lease", lock.Lease, before, owner)
	}
	wantOwner(t, ctx, l, name, "mover", "after the etcd lease moved")
}

// An owner key whose value is not a valid owner (written by hand) makes Inspect and
// List fail with ErrCorrupt rather than show it.
func TestLocker_CorruptOwnerKey_ErrCorrupt(t *testing.T) {
	ctx, cli, name := setup(t, "badowner")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Minute)
	defer a.Release(ctx)
	if _, err := cli.Put(ctx, etcd.DefaultPrefix+"owner/"+name, "bell\a"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Inspect(ctx, name); !errors.Is(err, etcd.ErrCorrupt) {
		t.Errorf("Inspect with a corrupt owner key = %v; want etcd.ErrCorrupt", err)
	}
	if _, err := l.List(ctx, fence.ListOptions{Prefix: name}); !errors.Is(err, etcd.ErrCorrupt) {
		t.Errorf("List with a corrupt owner key = %v; want etcd.ErrCorrupt", err)
	}
}

// Revoke deletes the lock and owner keys and revokes the holder's etcd lease (a
// revoked lease is never pooled: the revoked holder may still send it a keep-alive);
// a second Revoke finds the lock free.
func TestLocker_Revoke_DeletesKeysRevokesEtcdLease(t *testing.T) {
	ctx, cli, name := setup(t, "revoke")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner("victim"))
	lease := clientv3.LeaseID(lockKey(t, ctx, cli, name).Lease)
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("lock key after Revoke = %v, %v; want none", resp, err)
	}
	if k := ownerKey(t, ctx, cli, name); k != nil {
		t.Fatalf("owner key after Revoke = %+v; want none", k)
	}
	if ttl, err := cli.TimeToLive(ctx, lease); err != nil || ttl.TTL != -1 {
		t.Fatalf("holder's etcd lease after Revoke: %v, %v; want it revoked (TTL -1)", ttl, err)
	}
	if err := l.Revoke(ctx, name); !errors.Is(err, fence.ErrNotHeld) || err.Error() != `etcd: revoke "`+name+`": fence: lease not held` {
		t.Errorf("second Revoke = %v; want %q", err, `etcd: revoke "`+name+`": fence: lease not held`)
	}
	takeOver(t, a, "Revoke", func() (*fence.Lease, error) { return fence.TryAcquire(ctx, l, name, time.Minute) })
}
