package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/postgres"
)

// lockedKV is what `fence serve --store postgres://` serves: a Locker and a KV
// told its lock table.
type lockedKV struct {
	*postgres.Locker
	*postgres.KV
}

func newLockedKV(t *testing.T) lockedKV {
	return lockedKV{
		Locker: lockerOn(t, sharedPool, nil),
		KV:     postgres.NewKV(sharedPool, &postgres.KVOptions{LockTable: postgres.DefaultLockTable}),
	}
}

// The guard suite with fences drawn from the Locker's grants, and the P9 suite,
// on a KV told its lock table.
func TestKV_LockTable_GuardConformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return newLockedKV(t) }, fencetest.WithGuardAsIssuer())
}

// A late attempt of a write never replaces a later write of the same holder (P3),
// on a KV alone and on one told its lock table.
func TestKV_WriteAttempts(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return postgres.NewKV(sharedPool, nil) })
}

func TestKV_LockTable_WriteAttempts(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return newLockedKV(t) }, fencetest.WithGuardAsIssuer())
}

func TestKV_LockTable_IssuedKV(t *testing.T) {
	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return newLockedKV(t) })
}

// The lock row keeps the lease of its last exclusive grant after the release: a
// fence with that token and another lease id is still refused.
func TestKV_LockTable_Issued_ReleasedLastGrantOtherLease(t *testing.T) {
	s := newLockedKV(t)
	ctx := ctxT(t)
	l, err := s.Acquire(ctx, uniq(t, "lock"), 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	f := fence.Fence{Name: l.Name(), Token: l.Token(), LeaseID: driver.NewLeaseID()}
	key := uniq(t, "key")
	var ue *fence.UnissuedTokenError
	if err := s.Put(ctx, key, []byte("forged"), f); !errors.As(err, &ue) || !errors.Is(err, fence.ErrUnissuedToken) ||
		ue.Lock != f.Name || ue.Token != f.Token || !ue.OtherLease {
		t.Fatalf("Put with the released grant's token under another lease id = %v, want *fence.UnissuedTokenError{Lock: %q, Token: %d, OtherLease: true}", err, f.Name, f.Token)
	}
	if it, err := s.Get(ctx, key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get(%q) after the refused Put = %+v, %v, want fence.ErrNotFound", key, it, err)
	}
}

// Liveness is judged by the database's clock, for a lock and for a semaphore's
// permits alike: a live lease's token without a lease id is refused, and once
// the leases expire (expired, not released) it is admitted.
func TestKV_LockTable_LeaselessToken_RefusedUntilExpiry(t *testing.T) {
	s := newLockedKV(t)
	ctx := ctxT(t)
	const ttl = 2 * time.Second
	start := time.Now() // before both grants: neither expires before start+ttl
	lock, err := s.Acquire(ctx, uniq(t, "lock"), ttl)
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	permit, err := s.Acquire(ctx, uniq(t, "sem"), ttl, fence.WithLimit(2))
	if err != nil {
		t.Fatalf("Acquire of a permit = %v", err)
	}
	granted := time.Now() // after both grants: each expires by granted+ttl
	for _, l := range []*fence.Lease{lock, permit} {
		bare := fence.Fence{Name: l.Name(), Token: l.Token()}
		var le *fence.LeaseRequiredError
		err := s.Put(ctx, uniq(t, "key"), []byte("bare"), bare)
		if time.Since(start) >= ttl {
			t.Skipf("the leases expired before the check (%v): the machine is too slow for this test", time.Since(start))
		}
		if !errors.As(err, &le) || !errors.Is(err, fence.ErrLeaseRequired) || le.Lock != l.Name() || le.Token != l.Token() {
			t.Fatalf("Put with live %s#%d and no lease id = %v, want *fence.LeaseRequiredError", l.Name(), l.Token(), err)
		}
	}
	time.Sleep(ttl - time.Since(granted) + 100*time.Millisecond)
	for _, l := range []*fence.Lease{lock, permit} {
		if err := s.Put(ctx, uniq(t, "key"), []byte("bare"), fence.Fence{Name: l.Name(), Token: l.Token()}); err != nil {
			t.Fatalf("Put with expired %s#%d and no lease id = %v, want nil", l.Name(), l.Token(), err)
		}
	}
}

func TestKV_BadLockTable_ErrInvalid(t *testing.T) {
	kv := postgres.NewKV(sharedPool, &postgres.KVOptions{LockTable: "no such; table"})
	f := fence.Fence{Name: uniq(t, "lock"), Token: 5, LeaseID: driver.NewLeaseID()}
	if err := kv.Put(ctxT(t), uniq(t, "key"), []byte("v"), f); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Put on a KV with a malformed lock table = %v, want fence.ErrInvalid", err)
	}
}
