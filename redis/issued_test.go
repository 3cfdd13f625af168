package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/redis"
)

// issuedStore is a store that grants locks and keeps the fenced KV: P9 applies.
type issuedStore interface {
	fence.Locker
	fence.KV
	fence.Guard
	fence.Purger
}

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

// grantFor acquires name on s and releases it at the test's end.
func grantFor(t *testing.T, s fence.Locker, name string) *fence.Lease {
	t.Helper()
	l, err := s.Acquire(issuedCtx(t), name, 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", name, err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// wantUnissued checks err is an *fence.UnissuedTokenError for f with last and
// otherLease.
func wantUnissued(t *testing.T, what string, err error, f fence.Fence, last fence.Token, otherLease bool) {
	t.Helper()
	var ue *fence.UnissuedTokenError
	if !errors.As(err, &ue) || !errors.Is(err, fence.ErrUnissuedToken) {
		t.Fatalf("%s = %v, want *fence.UnissuedTokenError", what, err)
	}
	if ue.Lock != f.Name || ue.Token != f.Token || ue.OtherLease != otherLease || (!otherLease && ue.Last != last) {
		t.Fatalf("%s = %+v, want lock %q token %d last %d other lease %v", what, *ue, f.Name, f.Token, last, otherLease)
	}
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

// testIssued runs the P9 cases against the store newStore returns: a token
// above the name's last, a name never granted and another lease's id are refused
// by Put, Delete and Fence with *fence.UnissuedTokenError and write nothing; the
// real holder, and an earlier grant's fence, are admitted.
func testIssued(t *testing.T, newStore func(t *testing.T) issuedStore) {
	t.Run("AboveLast_Refused_NothingWritten", func(t *testing.T) {
		s := newStore(t)
		ctx := issuedCtx(t)
		key := issuedName(t, "key")
		l := grantFor(t, s, issuedName(t, "lock"))
		if err := s.Put(ctx, key, []byte("v1"), l.Fence()); err != nil {
			t.Fatalf("holder's Put = %v", err)
		}
		for _, tok := range []fence.Token{l.Token() + 1, l.Token() + 999999} {
			f := fence.Fence{Name: l.Name(), Token: tok}
			wantUnissued(t, "Put above last", s.Put(ctx, key, []byte("forged"), f), f, l.Token(), false)
			wantUnissued(t, "Fence above last", s.Fence(ctx, key, f), f, l.Token(), false)
			wantUnissued(t, "Delete above last", s.Delete(ctx, key, f), f, l.Token(), false)
			other := issuedName(t, "other")
			wantUnissued(t, "Put above last, new key", s.Put(ctx, other, []byte("forged"), f), f, l.Token(), false)
			wantNoKey(t, s, other)
		}
		wantItem(t, s, key, []byte("v1"), l.Token())
		// The holder is still admitted: nothing raised the key's fence.
		if err := s.Put(ctx, key, []byte("v2"), l.Fence()); err != nil {
			t.Fatalf("holder's Put after the refusals = %v", err)
		}
		wantItem(t, s, key, []byte("v2"), l.Token())
	})
	t.Run("NeverGranted_Refused", func(t *testing.T) {
		s := newStore(t)
		ctx := issuedCtx(t)
		key := issuedName(t, "key")
		f := fence.Fence{Name: issuedName(t, "never"), Token: 42, LeaseID: driver.NewLeaseID()}
		wantUnissued(t, "Put", s.Put(ctx, key, []byte("forged"), f), f, 0, false)
		wantUnissued(t, "Fence", s.Fence(ctx, key, f), f, 0, false)
		wantUnissued(t, "Delete", s.Delete(ctx, key, f), f, 0, false)
		wantNoKey(t, s, key)
	})
	t.Run("OtherLease_Refused", func(t *testing.T) {
		s := newStore(t)
		ctx := issuedCtx(t)
		key := issuedName(t, "key")
		l := grantFor(t, s, issuedName(t, "lock"))
		f := fence.Fence{Name: l.Name(), Token: l.Token(), LeaseID: driver.NewLeaseID()}
		wantUnissued(t, "Put", s.Put(ctx, key, []byte("forged"), f), f, l.Token(), true)
		wantUnissued(t, "Fence", s.Fence(ctx, key, f), f, l.Token(), true)
		wantNoKey(t, s, key)
		if err := s.Put(ctx, key, []byte("v1"), l.Fence()); err != nil {
			t.Fatalf("holder's Put = %v", err)
		}
		wantUnissued(t, "Delete", s.Delete(ctx, key, f), f, l.Token(), true)
		wantItem(t, s, key, []byte("v1"), l.Token())
	})
	t.Run("Holder_Admitted_EarlierGrantToo", func(t *testing.T) {
		s := newStore(t)
		ctx := issuedCtx(t)
		name := issuedName(t, "lock")
		first := grantFor(t, s, name)
		if err := first.Release(ctx); err != nil {
			t.Fatalf("Release = %v", err)
		}
		l := grantFor(t, s, name)
		key := issuedName(t, "key")
		// The first grant's token was issued: a key it never fenced admits it.
		if err := s.Put(ctx, key, []byte("v0"), first.Fence()); err != nil {
			t.Fatalf("Put of an earlier grant = %v", err)
		}
		if err := s.Fence(ctx, key, l.Fence()); err != nil {
			t.Fatalf("holder's Fence = %v", err)
		}
		if err := s.Put(ctx, key, []byte("v1"), l.Fence()); err != nil {
			t.Fatalf("holder's Put = %v", err)
		}
		// Without a lease id the token alone is checked.
		if err := s.Put(ctx, issuedName(t, "nolease"), []byte("v2"), fence.Fence{Name: name, Token: l.Token()}); err != nil {
			t.Fatalf("holder's Put without lease id = %v", err)
		}
		if err := s.Delete(ctx, key, l.Fence()); err != nil {
			t.Fatalf("holder's Delete = %v", err)
		}
		wantItem(t, s, key, nil, l.Token())
	})
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

// grantedFences returns the fences of two grants of one name on s, in order.
func grantedFences(t *testing.T, s fence.Locker) (lo, hi fence.Fence) {
	name := issuedName(t, "lock")
	first := grantFor(t, s, name)
	if err := first.Release(issuedCtx(t)); err != nil {
		t.Fatalf("Release = %v", err)
	}
	return first.Fence(), grantFor(t, s, name).Fence()
}

// issuedStoreOf opens a Store on the package's server under a prefix of its own.
func issuedStoreOf(t *testing.T) *redis.Store {
	t.Helper()
	servertest.SkipIfShort(t)
	return openStore(t, "redis://"+redis.ServerAddrForExamples(), &redis.Options{Prefix: redis.PrefixForExamples()})
}

func TestStore_Issued(t *testing.T) {
	testIssued(t, func(t *testing.T) issuedStore { return issuedStoreOf(t) })
}

// A semaphore permit's token is in its holder record: another lease id with it is
// refused, the permit's own is admitted, and so is a token of another permit.
func TestStore_Issued_PermitOtherLease(t *testing.T) {
	s := issuedStoreOf(t)
	ctx := issuedCtx(t)
	name := issuedName(t, "sem")
	var ls []*fence.Lease
	for range 2 {
		l, err := s.Acquire(ctx, name, 30*time.Second, fence.WithLimit(3))
		if err != nil {
			t.Fatalf("Acquire = %v", err)
		}
		defer l.Release(context.Background())
		ls = append(ls, l)
	}
	key := issuedName(t, "key")
	f := fence.Fence{Name: name, Token: ls[0].Token(), LeaseID: ls[1].ID()}
	wantUnissued(t, "Put with the other permit's lease", s.Put(ctx, key, []byte("forged"), f), f, ls[1].Token(), true)
	wantNoKey(t, s, key)
	for _, l := range ls {
		if err := s.Put(ctx, key, []byte(l.ID()), l.Fence()); err != nil {
			t.Fatalf("permit holder's Put = %v", err)
		}
		wantItem(t, s, key, []byte(l.ID()), l.Token())
	}
}

func TestStore_DeletePurge(t *testing.T) {
	s := issuedStoreOf(t)
	lo, hi := grantedFences(t, s)
	testDelete(t, s, lo, hi)
}

// A KV made by NewKV checks no issuance: it deletes and purges with made-up fences.
func TestKV_DeletePurge(t *testing.T) {
	servertest.SkipIfShort(t)
	c := goredis.NewClient(&goredis.Options{Addr: redis.ServerAddrForExamples()})
	t.Cleanup(func() { _ = c.Close() })
	kv, err := redis.NewKV(c, &redis.Options{Prefix: redis.PrefixForExamples()})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := madeUpFences(t)
	testDelete(t, kv, lo, hi)
}

// A failover that loses counter increments is simulated by lowering the counter:
// the holder of a token above it is refused as unissued until a heal raises the
// counter to its token, as the package documentation says.
func TestStore_Issued_LossyFailover_HealFixes(t *testing.T) {
	servertest.SkipIfShort(t)
	prefix := redis.PrefixForExamples()
	s := openStore(t, "redis://"+redis.ServerAddrForExamples(), &redis.Options{Prefix: prefix})
	ctx := issuedCtx(t)
	key := issuedName(t, "key")
	_, f := grantedFences(t, s) // the second grant, still held
	c := goredis.NewClient(&goredis.Options{Addr: redis.ServerAddrForExamples()})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(ctx, prefix+"{"+f.Name+"}:token", uint64(f.Token-1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	wantUnissued(t, "holder's Put after the counter regressed", s.Put(ctx, key, []byte("v"), f), f, f.Token-1, false)
	wantNoKey(t, s, key)
	if err := s.Heal(ctx, f.Name, f.Token); err != nil {
		t.Fatalf("Heal = %v", err)
	}
	if err := s.Put(ctx, key, []byte("v"), f); err != nil {
		t.Fatalf("holder's Put after the heal = %v", err)
	}
}

// The guard suite with fences drawn from the Store's grants, and the P9 suite.
func TestStore_GuardConformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return issuedStoreOf(t) }, fencetest.WithGuardAsIssuer())
}

func TestStore_IssuedKV(t *testing.T) {
	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return issuedStoreOf(t) })
}
