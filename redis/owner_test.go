package redis

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// The acquire and inspect scripts of the version before owners, verbatim, to show
// what an older binary does with the lock values this one writes. (Its lease
// script, for renew and release, is the one in scripts/: unchanged.)
var (
	//go:embed testdata/v1/acquire.lua
	v1AcquireSrc string
	//go:embed testdata/v1/inspect.lua
	v1InspectSrc string

	v1Acquire = goredis.NewScript(v1AcquireSrc)
	v1Inspect = goredis.NewScript(v1InspectSrc)
)

// v1Try runs the acquire script of the version before owners once, for a minute.
func v1Try(ctx context.Context, c *goredis.Client, k keys, id string) ([]int64, error) {
	return v1Acquire.Run(ctx, c, []string{k.lock, k.token}, id, 60000, maxTokenArg).Int64Slice()
}

// v1Grant acquires name as the version before owners did; it fails t unless granted.
func v1Grant(t *testing.T, ctx context.Context, c *goredis.Client, k keys, id string) int64 {
	t.Helper()
	res, err := v1Try(ctx, c, k, id)
	if err != nil || len(res) != 2 || res[0] != 1 {
		t.Fatalf("acquire of the version before owners = %v, %v; want granted", res, err)
	}
	return res[1]
}

// The owner is in the lock value. What an older binary does with such a value: it
// sees the lock held (acquire waits), reads the holder's token (inspect), and renews
// and releases by lease id (the lease script did not change); the owner it does not
// see. Without an owner the value keeps the older form.
func TestLocker_Owner_StoredInTheLockValue_ReadByTheVersionBefore(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	k := l.keysFor(name)
	lease := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner("host:42 job 123"))
	if v, err := c.Get(ctx, k.lock).Result(); err != nil || v != lease.ID()+" host:42 job 123 "+lease.Token().String() {
		t.Errorf("lock value with an owner = %q, %v; want the lease id, the owner and the token", v, err)
	}
	got, err := v1Try(ctx, c, k, driver.NewLeaseID())
	if err != nil || len(got) != 2 || got[0] != 0 || got[1] <= 0 {
		t.Errorf("old acquire over a lease with an owner = %v, %v; want {0, pttl}: held", got, err)
	}
	got, err = v1Inspect.Run(ctx, c, []string{k.lock, k.token}).Int64Slice()
	if err != nil || len(got) != 4 || got[0] != 1 || got[1] != int64(lease.Token()) || got[3] != int64(lease.Token()) {
		t.Errorf("old inspect of a lease with an owner = %v, %v; want held by token %d", got, err, lease.Token())
	}
	// Renew and Release are the old binary's own calls: the same lease script.
	if err := lease.Renew(ctx, time.Minute); err != nil {
		t.Errorf("Renew = %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	id := driver.NewLeaseID()
	if tok := v1Grant(t, ctx, c, k, id); tok != int64(lease.Token())+1 {
		t.Errorf("old acquire after release: token %d, want %d", tok, lease.Token()+1)
	}
	if err := l.Release(ctx, name, id); err != nil {
		t.Fatal(err)
	}
	lease = mustAcquire(t, ctx, l, name, time.Minute)
	defer lease.Release(ctx)
	if v, err := c.Get(ctx, k.lock).Result(); err != nil || v != lease.ID()+" "+lease.Token().String() {
		t.Errorf("lock value without owner = %q, %v; want the lease id and the token", v, err)
	}
}

// Owners with spaces, digits, braces and glob characters anywhere, up to the
// longest, read back exactly, and the lease renews and releases.
func TestLocker_Owner_EdgeValuesRoundTrip(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx := ctxT(t)
	for _, owner := range []string{
		"7", "job 123", " lead", "trail ", " ", "   ", "a  b 9", "{x}%7B*?[", "ünïcødé 語",
		strings.Repeat("9", fence.MaxOwnerLen), strings.Repeat("o ", fence.MaxOwnerLen/2),
	} {
		name := uniqueName(t)
		lease := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner(owner))
		if err := lease.Renew(ctx, time.Minute); err != nil {
			t.Errorf("owner %q: Renew = %v", owner, err)
		}
		info, err := l.Inspect(ctx, name)
		if err != nil || info.Owner != owner || info.Token != lease.Token() || !info.Held {
			t.Errorf("owner %q: Inspect = %+v, %v; want held by token %d with that owner", owner, info, err, lease.Token())
		}
		if list, err := l.List(ctx, fence.ListOptions{Prefix: name, Limit: 1}); err != nil || len(list) != 1 || list[0].Owner != owner {
			t.Errorf("owner %q: List = %+v, %v; want that owner", owner, list, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Errorf("owner %q: Release = %v", owner, err)
		}
	}
}

// A lock value written by the version before owners ("<lease id> <token>") is a
// lease without owner: inspected, renewed, released and revoked as before.
func TestLocker_OldFormatLockValue_ReadAsNoOwner(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	k := l.keysFor(name)
	id := driver.NewLeaseID()
	tok := v1Grant(t, ctx, c, k, id)
	info, err := l.Inspect(ctx, name)
	if err != nil || !info.Held || info.Token != fence.Token(tok) || info.Owner != "" || info.ExpiresIn <= 0 {
		t.Fatalf("Inspect of an old lock value = %+v, %v; want held by token %d, no owner", info, err, tok)
	}
	if _, err := l.Acquire(ctx, name, time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
		t.Errorf("Acquire over an old lock value = %v, want fence.ErrNotAcquired", err)
	}
	if err := l.Renew(ctx, name, id, time.Minute); err != nil {
		t.Errorf("Renew of an old lock value = %v", err)
	}
	if err := l.Release(ctx, name, id); err != nil {
		t.Errorf("Release of an old lock value = %v", err)
	}
	id = driver.NewLeaseID()
	tok = v1Grant(t, ctx, c, k, id)
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke of an old lock value = %v", err)
	}
	if err := l.Renew(ctx, name, id, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Renew after Revoke of an old lock value = %v, want fence.ErrNotHeld", err)
	}
	if lease := mustAcquire(t, ctx, l, name, time.Minute); lease.Token() != fence.Token(tok)+1 {
		t.Errorf("token after the revoked old lease = %d, want %d", lease.Token(), tok+1)
	}
}

func TestLocker_Revoke_WakesWaiter_HolderNotHeld(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	holder := mustAcquire(t, ctx, l, name, time.Hour, fence.WithOwner("revoked owner"))
	wakesOnRevoke(t, ctx, l, c, holder)
	if err := holder.Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("revoked holder's Renew = %v, want fence.ErrNotHeld", err)
	}
	if err := l.Revoke(ctx, name); !errors.Is(err, fence.ErrNotHeld) || err.Error() != `redis: revoke "`+name+`": `+fence.ErrNotHeld.Error() {
		t.Errorf("Revoke of a free lock = %v, want `redis: revoke %q: ` and fence.ErrNotHeld", err, name)
	}
}

func TestLocker_ClassicPubSub_WokenByRevoke(t *testing.T) {
	l, c := newLocker(t, &Options{ClassicPubSub: true, PollInterval: time.Hour})
	ctx := ctxT(t)
	wakesOnRevoke(t, ctx, l, c, mustAcquire(t, ctx, l, uniqueName(t), time.Hour))
}

// Revoke is one command, and its message on the wake channel says "revoked" (each
// grant before it says "granted", for watchers).
func TestLocker_Revoke_OneCommandPublishesRevoked(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	ps := c.SSubscribe(ctx, l.keysFor(name).wake)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	mustAcquire(t, ctx, l, name, time.Minute)
	if err := l.Revoke(ctx, name); err != nil { // warms the script cache
		t.Fatal(err)
	}
	mustAcquire(t, ctx, l, name, time.Minute)
	h := &countHook{}
	c.AddHook(h)
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatal(err)
	}
	if got := h.n.Load(); got != 1 {
		t.Errorf("revoke sent %d commands, want 1 (one EVALSHA)", got)
	}
	for i, want := range []string{"granted", "revoked", "granted", "revoked"} {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil || m.Payload != want {
			t.Fatalf("wake message %d = %+v, %v; want %q", i, m, err, want)
		}
	}
}

func TestLocker_Revoke_ExpiredLease_ErrNotHeld(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	mustAcquire(t, ctx, l, name, 10*time.Millisecond)
	// Redis ends the key by its own clock; wait until it says so, then revoke.
	waitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if info, err := l.Inspect(ctx, name); err != nil || info.Held {
			return errors.New("lease still held")
		}
		return nil
	})
	if err := l.Revoke(ctx, name); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Revoke of an expired lease = %v, want fence.ErrNotHeld", err)
	}
}

// Without a replica, a durable Revoke ends the lease on the primary and says the
// acknowledgement is missing; with one, it returns once the replica has it.
func TestLocker_Revoke_WaitReplicas(t *testing.T) {
	l, _ := newLocker(t, nil)
	dl, _ := newLocker(t, &Options{WaitReplicas: 1, WaitTimeout: 30 * time.Millisecond})
	ctx := ctxT(t)
	name := uniqueName(t)
	holder := mustAcquire(t, ctx, l, name, time.Hour)
	err := dl.Revoke(ctx, name)
	if !errors.Is(err, fence.ErrUnavailable) || !strings.Contains(err.Error(), "WAIT: 0 of 1 replicas acknowledged") {
		t.Fatalf("Revoke with WaitReplicas 1 and no replica = %v; want fence.ErrUnavailable saying 0 of 1 acknowledged", err)
	}
	if err := holder.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("holder's Release after the unacknowledged Revoke = %v, want fence.ErrNotHeld (ended on the primary)", err)
	}

	servertest.SkipIfShort(t)
	rctx, primary, replica := replicated(t)
	pl, err := NewLocker(newClient(t, primary.Addr), &Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	holder = mustAcquire(t, rctx, pl, "durable-revoke", time.Hour)
	if err := pl.Revoke(rctx, "durable-revoke"); err != nil {
		t.Fatalf("Revoke with WaitReplicas 1 and a replica = %v", err)
	}
	if out, err := replica.CLI("EXISTS", pl.keysFor("durable-revoke").lock); err != nil || out != "0" {
		t.Errorf("lock key on the replica after Revoke returned: EXISTS = %q, %v; want 0", out, err)
	}
}
