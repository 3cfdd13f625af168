package etcd_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
)

// pausedKV is an etcd client's KV whose first transaction, once committed, waits
// at a gate: a fence server paused between reading a key's record and writing it.
type pausedKV struct {
	clientv3.KV
	first   atomic.Bool
	read    chan struct{} // closed when the first transaction has committed
	release chan struct{} // closed to let it return
}

func (k *pausedKV) Txn(ctx context.Context) clientv3.Txn {
	t := k.KV.Txn(ctx)
	if !k.first.CompareAndSwap(false, true) {
		return t
	}
	return pausedTxn{Txn: t, k: k}
}

type pausedTxn struct {
	clientv3.Txn
	k *pausedKV
}

func (t pausedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t pausedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	close(t.k.read)
	<-t.k.release
	return resp, err
}

// A write's first attempt reads the key's record and pauses; its retry, through
// another client (another fence server), is applied, and the holder writes v2.
// The first attempt then finds the record changed, reads it anew and, with the
// same token and lease, used to be admitted again and put v1 back. Carrying the
// write's attempt id, it finds the id claimed and writes nothing: v2 stays (P3).
func TestKV_LateAttemptAfterFailedCompare_LaterWriteStays(t *testing.T) {
	slow := client(t)
	paused := &pausedKV{KV: slow.KV, read: make(chan struct{}), release: make(chan struct{})}
	slow.KV = paused
	late := etcd.NewKV(slow, nil)
	kv := etcd.NewKV(client(t), nil)

	key := "late-attempt-" + driver.NewLeaseID()[:12]
	f := fence.Fence{Name: "late-attempt-lock", Token: 7, LeaseID: driver.NewLeaseID()}
	write1 := fence.WithWriteAttempt(testCtx(t), driver.NewLeaseID())
	done := make(chan error, 1)
	go func() { done <- late.Put(write1, key, []byte("v1"), f) }()
	select {
	case <-paused.read:
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt did not read the record within 10s")
	}

	if err := kv.Put(write1, key, []byte("v1"), f); err != nil {
		close(paused.release)
		t.Fatalf("Put(v1) (the retry) = %v; want nil", err)
	}
	write2 := fence.WithWriteAttempt(testCtx(t), driver.NewLeaseID())
	if err := kv.Put(write2, key, []byte("v2"), f); err != nil {
		close(paused.release)
		t.Fatalf("Put(v2) (the holder's next write) = %v; want nil", err)
	}
	close(paused.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Put(v1) (the late first attempt) = %v; want nil (its write was applied)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late first attempt did not return within 10s")
	}
	it, err := kv.Get(testCtx(t), key)
	if err != nil || string(it.Value) != "v2" {
		t.Fatalf("Get after the late first attempt = %q, %v; want v2 (the later acknowledged write)", it.Value, err)
	}
}
