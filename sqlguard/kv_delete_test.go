package sqlguard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/mysql"
	"github.com/fencelock/fence/sqlite"
)

// issuedName returns a lock name or key of the test and suffix, unique to the call
// (so a test run again, -count, on the same server starts afresh).
func issuedName(t *testing.T, suffix string) string {
	t.Helper()
	n := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if len(n) > 60 {
		n = n[len(n)-60:]
	}
	return fmt.Sprintf("p9-%s-%s-%d-%s", n, issuedRun, issuedSeq.Add(1), suffix)
}

var (
	issuedRun = driver.NewLeaseID()[:8] // this process's names apart from earlier ones'
	issuedSeq atomic.Int64
)

func issuedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantItem checks key holds value (nil: no value) under a fence of token tok.
func wantItem(t *testing.T, kv fence.KV, key string, value []byte, tok fence.Token) {
	t.Helper()
	it, err := kv.Get(issuedCtx(t), key)
	if err != nil {
		t.Fatalf("Get(%q) = %v", key, err)
	}
	if string(it.Value) != string(value) || (it.Value == nil) != (value == nil) || it.Fence.Token != tok {
		t.Fatalf("Get(%q) = %q (nil %v) at %d, want %q (nil %v) at %d", key, it.Value, it.Value == nil, it.Fence.Token, value, value == nil, tok)
	}
}

func wantNoKey(t *testing.T, kv fence.KV, key string) {
	t.Helper()
	if it, err := kv.Get(issuedCtx(t), key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get(%q) = %+v, %v, want fence.ErrNotFound", key, it, err)
	}
}

// testDelete runs the Delete and Purge cases against kv, with fences lo < hi
// that kv admits (same lock name, different leases).
func testDelete(t *testing.T, kv fence.KV, lo, hi fence.Fence) {
	ctx := issuedCtx(t)
	key := issuedName(t, "key")
	if err := kv.Delete(ctx, key, lo); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Delete of a key never written = %v, want fence.ErrNotFound", err)
	}
	wantNoKey(t, kv, key) // nothing changed: no fence recorded either
	if err := kv.Put(ctx, key, []byte("v1"), lo); err != nil {
		t.Fatalf("Put = %v", err)
	}
	if err := kv.Delete(ctx, key, hi); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	wantItem(t, kv, key, nil, hi.Token)
	// The fence stays: the older writer is refused, by Put and by Delete.
	var se *fence.StaleTokenError
	if err := kv.Put(ctx, key, []byte("stale"), lo); !errors.As(err, &se) || se.Highest != hi.Token {
		t.Fatalf("stale Put after Delete = %v, want *fence.StaleTokenError with highest %d", err, hi.Token)
	}
	if err := kv.Delete(ctx, key, lo); !errors.As(err, &se) {
		t.Fatalf("stale Delete = %v, want *fence.StaleTokenError", err)
	}
	if err := kv.Delete(ctx, key, hi); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("second Delete = %v, want fence.ErrNotFound", err)
	}
	wantItem(t, kv, key, nil, hi.Token)
	// A fenced-only key holds no value either.
	fenced := issuedName(t, "fenced")
	if g, ok := kv.(fence.Guard); ok {
		if err := g.Fence(ctx, fenced, lo); err != nil {
			t.Fatalf("Fence = %v", err)
		}
		if err := kv.Delete(ctx, fenced, hi); !errors.Is(err, fence.ErrNotFound) {
			t.Fatalf("Delete of a fenced-only key = %v, want fence.ErrNotFound", err)
		}
		wantItem(t, kv, fenced, nil, lo.Token) // not raised to hi: nothing changed
	}
	// Written again by the holder: a value again.
	if err := kv.Put(ctx, key, []byte("v2"), hi); err != nil {
		t.Fatalf("Put after Delete = %v", err)
	}
	wantItem(t, kv, key, []byte("v2"), hi.Token)

	p, ok := kv.(fence.Purger)
	if !ok {
		return
	}
	if err := p.Purge(ctx, key); err != nil {
		t.Fatalf("Purge = %v", err)
	}
	wantNoKey(t, kv, key)
	if err := p.Purge(ctx, key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("second Purge = %v, want fence.ErrNotFound", err)
	}
	// The fence went back: the older fence is admitted again.
	if err := kv.Put(ctx, key, []byte("v3"), lo); err != nil {
		t.Fatalf("Put of the lower fence after Purge = %v", err)
	}
	wantItem(t, kv, key, []byte("v3"), lo.Token)
	// A fenced-only key is purged too; bad keys are refused.
	if err := p.Purge(ctx, fenced); err != nil {
		t.Fatalf("Purge of a fenced-only key = %v", err)
	}
	wantNoKey(t, kv, fenced)
	if err := p.Purge(ctx, ""); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Purge(\"\") = %v, want fence.ErrInvalid", err)
	}
}

// madeUpFences returns two fences of one made-up lock name, tokens 5 and 7.
func madeUpFences(t *testing.T) (lo, hi fence.Fence) {
	name := issuedName(t, "lock")
	return fence.Fence{Name: name, Token: 5, LeaseID: driver.NewLeaseID()},
		fence.Fence{Name: name, Token: 7, LeaseID: driver.NewLeaseID()}
}

// TestKV_DeletePurge runs the Delete and Purge cases on each dialect's KV, with
// made-up fences: a KV grants no locks and checks no issuance.
func TestKV_DeletePurge(t *testing.T) {
	t.Run("mysql", func(t *testing.T) {
		lo, hi := madeUpFences(t)
		testDelete(t, mysql.NewKV(mariadbBackend.DB(t), nil), lo, hi)
	})
	t.Run("sqlite", func(t *testing.T) {
		lo, hi := madeUpFences(t)
		testDelete(t, sqlite.NewKV(sqliteDB(t), nil), lo, hi)
	})
}
