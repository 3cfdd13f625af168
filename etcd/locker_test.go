package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/internal/testserv"
	"github.com/fencelock/fence/internal/testserv/etcdserv"
)

func uniq(prefix string) string { return prefix + "-" + driver.NewLeaseID()[:12] }

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
	port, err := testserv.FreePort() // nothing listens there
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

func TestLocker_Unreachable_ErrUnavailable(t *testing.T) {
	port, err := testserv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l := etcd.NewLocker(newClient(t, []string{fmt.Sprintf("127.0.0.1:%d", port)}), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	lease, err := l.Acquire(ctx, "x", time.Second)
	if lease != nil || !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Acquire on an unreachable etcd = %v, %v; want nil, an error matching fence.ErrUnavailable", lease, err)
	}
	if err := l.Release(ctx, "x", driver.NewLeaseID()); !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Release on an unreachable etcd = %v; want fence.ErrUnavailable", err)
	}
}

// The etcd lease behind a grant disappears (revoked by an operator, or expired while
// the holder was partitioned): Renew says ErrNotHeld, Done closes, and the next grant
// has a higher token.
func TestLocker_LostEtcdLease_RenewErrNotHeldDoneCloses(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	l := etcd.NewLocker(cli, nil)
	name := uniq("lost")
	a, err := l.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get lock key = %v, %v; want one key", resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
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
	b, err := fence.TryAcquire(ctx, l, name, time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after the lease was lost = %v; want a lease", err)
	}
	defer b.Release(ctx)
	if b.Token() <= a.Token() {
		t.Fatalf("token after a lost lease = %d; want > %d", b.Token(), a.Token())
	}
}

// A TTL below etcd's minimum lease TTL is granted, not rejected nor rounded up on the
// holder's side: the lease's deadline is the TTL asked (so Done closes then, never
// after etcd's expiry), while etcd keeps the lock key for its minimum, which the etcd
// lease's granted TTL says and Inspect reports as held (it said "not held" in the
// etcd lease's last second, while nobody could take the lock); the next holder gets
// the lock after that.
func TestLocker_TTLBelowEtcdMinimum_HolderDeadlineAsAskedEtcdHoldsLonger(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	holder, waiter := etcd.NewLocker(cli, nil), etcd.NewLocker(client(t), nil)
	name := uniq("short")
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
	resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get lock key = %v, %v; want one key", resp, err)
	}
	ttlResp, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if min := int64(etcdserv.MinLeaseTTL / time.Second); ttlResp.GrantedTTL < min {
		t.Fatalf("etcd lease granted for %ds; want etcd's minimum, %ds", ttlResp.GrantedTTL, min)
	}
	<-a.Done() // the holder's deadline
	_, tryErr := fence.TryAcquire(ctx, waiter, name, time.Minute)
	info, infoErr := waiter.Inspect(ctx, name)
	if time.Since(called) >= etcdserv.MinLeaseTTL {
		t.Skip("inconclusive: the machine took longer than etcd's minimum lease TTL to get here")
	}
	if !errors.Is(tryErr, fence.ErrNotAcquired) {
		t.Fatalf("TryAcquire after the holder's deadline, within etcd's minimum = %v; want fence.ErrNotAcquired", tryErr)
	}
	if infoErr != nil || !info.Held || info.Token != a.Token() {
		t.Fatalf("Inspect after the holder's deadline = %+v, %v; want held by token %d (etcd still has the key)", info, infoErr, a.Token())
	}
	b, err := waiter.Acquire(ctx, name, time.Minute, fence.WithWait(etcdserv.MinLeaseTTL+10*time.Second))
	if err != nil {
		t.Fatalf("Acquire once etcd expires the lease = %v; want a lease", err)
	}
	defer b.Release(ctx)
	if b.Token() <= a.Token() {
		t.Fatalf("next token %d; want > %d", b.Token(), a.Token())
	}
}

// A lock key overwritten by hand (no lease, another value): the holder can no longer
// renew or release, and nobody else is granted the lock until the key is deleted.
func TestLocker_HandEditedLockKey_NeverGrantedTwice(t *testing.T) {
	cli := client(t)
	ctx := testCtx(t)
	l := etcd.NewLocker(cli, nil)
	name := uniq("edited")
	a, err := l.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
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
	b, err := fence.TryAcquire(ctx, l, name, time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after the key was deleted = %v; want a lease", err)
	}
	defer b.Release(ctx)
	if b.Token() <= a.Token() {
		t.Fatalf("token after the edit = %d; want > %d", b.Token(), a.Token())
	}
}

func TestLocker_RenewLongerTTL_KeepsTokenExtendsEtcdLease(t *testing.T) {
	ctx := testCtx(t)
	l := etcd.NewLocker(client(t), nil)
	name := uniq("longer")
	a, err := l.Acquire(ctx, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
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
	ctx := testCtx(t)
	cli := client(t)
	holder := etcd.NewLocker(cli, nil)
	waiter := etcd.NewLocker(cli, nil)
	name := uniq("close")
	a, err := holder.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
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
	ctx := testCtx(t)
	cli := client(t)
	kv := etcd.NewKV(cli, nil)
	key := uniq("corrupt")
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
