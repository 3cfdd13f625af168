package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
)

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
	a, err := l.Acquire(ctx, name, time.Minute, fence.WithOwner("host:1 job"))
	if err != nil {
		t.Fatal(err)
	}
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
	list, err := l.List(ctx, name, 0)
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
	a, err := l.Acquire(ctx, name, time.Minute, fence.WithOwner("earlier"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, etcd.DefaultPrefix+"lock/"+name); err != nil { // release, owner key kept
		t.Fatal(err)
	}
	b := mustAcquire(t, ctx, l, name, time.Minute)
	defer b.Release(ctx)
	if b.Token() <= a.Token() || ownerKey(t, ctx, cli, name) == nil {
		t.Fatalf("setup: token %d after %d, owner key %v; want a later grant with the earlier owner key left", b.Token(), a.Token(), ownerKey(t, ctx, cli, name))
	}
	wantOwner(t, ctx, l, name, "", "with an earlier grant's owner key")
	list, err := l.List(ctx, name, 0)
	if err != nil || len(list) != 1 || list[0].Owner != "" {
		t.Fatalf("List with an earlier grant's owner key = %+v, %v; want no owner", list, err)
	}
	// A later grant with an owner overwrites it.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := l.Acquire(ctx, name, time.Minute, fence.WithOwner("later"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(ctx)
	wantOwner(t, ctx, l, name, "later", "of a later grant with an owner")
}

// A Renew that moves the lock key to an etcd lease of another TTL moves the owner
// key along, so the owner stays reported for as long as the lock is held.
func TestLocker_RenewMovesEtcdLease_OwnerKept(t *testing.T) {
	ctx, cli, name := setup(t, "moveowner")
	l := etcd.NewLocker(cli, nil)
	a, err := l.Acquire(ctx, name, time.Second, fence.WithOwner("mover"))
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := l.List(ctx, name, 0); !errors.Is(err, etcd.ErrCorrupt) {
		t.Errorf("List with a corrupt owner key = %v; want etcd.ErrCorrupt", err)
	}
}

// Revoke deletes the lock and owner keys and revokes the holder's etcd lease (a
// revoked lease is never pooled: the revoked holder may still send it a keep-alive);
// a second Revoke finds the lock free.
func TestLocker_Revoke_DeletesKeysRevokesEtcdLease(t *testing.T) {
	ctx, cli, name := setup(t, "revoke")
	l := etcd.NewLocker(cli, nil)
	a, err := l.Acquire(ctx, name, time.Minute, fence.WithOwner("victim"))
	if err != nil {
		t.Fatal(err)
	}
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
