package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// The expiry tests use etcd's minimum lease TTL: leases are counted in whole seconds,
// and the test server's election timeout makes the minimum one second.
func TestLocker_Conformance(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
		return etcd.NewLocker(client(t), nil)
	}, fencetest.WithShortTTL(etcdmember.MinLeaseTTL))
}

// The same suite with fast expiry and FIFO waiting on, as cluster mode runs them.
func TestLocker_Conformance_FastExpiryFIFO(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
		return etcd.NewLocker(client(t), &etcd.Options{FastExpiry: true, FIFO: true})
	}, fencetest.WithShortTTL(etcdmember.MinLeaseTTL))
}

func TestKV_Conformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded {
		return etcd.NewKV(client(t), nil)
	})
}

// A Store's KV refuses fences its Locker never issued (P9): the guard suite draws
// its fences from the Store's grants, and the P9 suite runs on it.
func TestStore_GuardConformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return openStore(t) }, fencetest.WithGuardAsIssuer())
}

// A late attempt of a write never replaces a later write of the same holder (P3),
// on a KV alone and on a Store's KV (cluster mode's).
func TestKV_WriteAttempts(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return etcd.NewKV(client(t), nil) })
}

func TestStore_WriteAttempts(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return openStore(t) }, fencetest.WithGuardAsIssuer())
}

func TestStore_IssuedKV(t *testing.T) {
	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return openStore(t) })
}

// openStore opens a Store on the shared server, closed at the test's end.
func openStore(t *testing.T) *etcd.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	s, err := etcd.Open(ctx, srv.Endpoints, nil)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
