package bolt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/inmem"
)

// grant acquires name on s and releases it, returning the grant's fence: a
// fence the store issued.
func grant(t testing.TB, s *Store, name string) fence.Fence {
	t.Helper()
	ctx := context.Background()
	l, err := s.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	if err := s.Release(ctx, name, l.ID()); err != nil {
		t.Fatalf("Release(%q): %v", name, err)
	}
	return l.Fence()
}

// wantUnissued fails unless err is an *fence.UnissuedTokenError for tok with
// last and otherLease.
func wantUnissued(t *testing.T, what string, err error, tok, last fence.Token, otherLease bool) {
	t.Helper()
	var ue *fence.UnissuedTokenError
	if !errors.As(err, &ue) || !errors.Is(err, fence.ErrUnissuedToken) {
		t.Fatalf("%s = %v; want an *UnissuedTokenError", what, err)
	}
	if ue.Token != tok || ue.Last != last || ue.OtherLease != otherLease {
		t.Fatalf("%s = %+v; want Token %d, Last %d, OtherLease %v", what, *ue, tok, last, otherLease)
	}
}

// The reproducer: a typo'd token is refused, before and after a restart
// (clean, and kill -9), whether the name's last token is in memory, in the lease
// log or only in the file; the real holder is never fenced out.
func TestKV_UnissuedToken_RefusedAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	ctx := context.Background()
	var last fence.Fence
	for range 9 {
		last = grant(t, s, "nightly")
	}
	typo := fence.Fence{Name: "nightly", Token: 999999}
	check := func(when string) {
		t.Helper()
		err := s.Put(ctx, "brick", []byte("typo"), typo)
		wantUnissued(t, "Put with token 999999 "+when, err, 999999, last.Token, false)
		if !strings.Contains(err.Error(), "999999") || !strings.Contains(err.Error(), last.Token.String()) {
			t.Fatalf("Put with token 999999 %s: %q does not name both tokens", when, err)
		}
		wantUnissued(t, "Fence with token 999999 "+when, s.Fence(ctx, "brick", typo), 999999, last.Token, false)
		wantUnissued(t, "Delete with token 999999 "+when, s.Delete(ctx, "brick", typo), 999999, last.Token, false)
		never := fence.Fence{Name: "never", Token: 42}
		wantUnissued(t, "Put under a lock never granted "+when, s.Put(ctx, "brick", []byte("x"), never), 42, 0, false)
	}
	check("in memory")
	if _, err := s.Get(ctx, "brick"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get after refused writes = %v; want ErrNotFound: nothing written", err)
	}
	s.abandon() // kill -9: the last token is in the lease log
	s = mustOpen(t, path, nil)
	check("after a crash")
	if err := s.Close(); err != nil { // folds the log into the file
		t.Fatal(err)
	}
	s = mustOpen(t, path, nil)
	defer s.Close()
	check("after a clean restart")
	if err := s.Put(ctx, "brick", []byte("real"), last); err != nil {
		t.Fatalf("the last holder's Put = %v; want nil", err)
	}
	next := grant(t, s, "nightly")
	if err := s.Put(ctx, "brick", []byte("next"), next); err != nil {
		t.Fatalf("the next holder's Put = %v; want nil", err)
	}
}

// A live lease's token under another lease id is refused, whatever form the
// other id has; without a lease id it is refused too (lease required).
func TestKV_OtherLeaseOfLiveToken_Refused(t *testing.T) {
	s := openStore(t, nil)
	ctx := context.Background()
	l, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{driver.NewLeaseID(), "not-a-bolt-lease-id"} {
		f := fence.Fence{Name: "job", Token: l.Token(), LeaseID: id}
		wantUnissued(t, "Put with the live token under lease "+id, s.Put(ctx, "k", []byte("x"), f), l.Token(), l.Token(), true)
	}
	wantLeaseRequired(t, "Put with the live token and no lease id", s.Put(ctx, "k", []byte("bare"), fence.Fence{Name: "job", Token: l.Token()}), l.Token())
	if err := s.Put(ctx, "k2", []byte("mine"), l.Fence()); err != nil {
		t.Fatalf("Put with the holder's fence = %v; want nil", err)
	}
}

// wantLeaseRequired fails unless err is a *fence.LeaseRequiredError for tok of
// lock "job".
func wantLeaseRequired(t *testing.T, what string, err error, tok fence.Token) {
	t.Helper()
	var le *fence.LeaseRequiredError
	if !errors.As(err, &le) || !errors.Is(err, fence.ErrLeaseRequired) || le.Lock != "job" || le.Token != tok {
		t.Fatalf("%s = %v; want a *fence.LeaseRequiredError for job#%d", what, err, tok)
	}
}

// The reproducer (P9): whoever reads a live token sends it without the
// lease id. It is refused while the lease lives, across a crash (the lease is
// honoured), until the store's clock passes its expiry, expiry timer or not;
// then no holder is left to fence out and it is admitted as before.
func TestKV_LeaselessLiveToken_RefusedUntilTheLeaseExpires(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, &Options{NoSync: true, Clock: clock})
	ctx := context.Background()
	l, err := s.Acquire(ctx, "job", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bare := fence.Fence{Name: "job", Token: l.Token()}
	check := func(when string) {
		t.Helper()
		wantLeaseRequired(t, "Put with the live token and no lease id "+when, s.Put(ctx, "k", []byte("bare"), bare), l.Token())
		wantLeaseRequired(t, "Fence with the live token and no lease id "+when, s.Fence(ctx, "k", bare), l.Token())
		if _, err := s.Get(ctx, "k"); !errors.Is(err, fence.ErrNotFound) {
			t.Fatalf("Get after refused writes %s = %v; want ErrNotFound: nothing written", when, err)
		}
	}
	check("in memory")
	s.abandon() // kill -9: the lease is in the lease log only
	s = mustOpen(t, path, &Options{NoSync: true, Clock: clock})
	defer func() { _ = s.Close() }()
	check("after a crash")
	clock.Advance(9 * time.Second)
	check("a second before the expiry")
	if err := s.Put(ctx, "k", []byte("mine"), l.Fence()); err != nil {
		t.Fatalf("the holder's Put after the refused ones = %v; want nil", err)
	}
	clock.Advance(2 * time.Second)
	if err := s.Put(ctx, "k2", []byte("token only"), bare); err != nil {
		t.Fatalf("Put with the expired lease's token and no lease id = %v; want nil", err)
	}
}

// Delete and Purge are on disk when they return.
func TestKV_DeleteAndPurge_DurableAcrossCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	ctx := context.Background()
	first, second := grant(t, s, "job"), grant(t, s, "job")
	for _, k := range []string{"deleted", "purged"} {
		if err := s.Put(ctx, k, []byte("v"), first); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "deleted", second); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if err := s.Purge(ctx, "purged"); err != nil {
		t.Fatalf("Purge = %v", err)
	}
	s.abandon()

	s = mustOpen(t, path, nil)
	defer s.Close()
	it, err := s.Get(ctx, "deleted")
	if err != nil || it.Value != nil || it.Fence != second {
		t.Fatalf("Get of the deleted key after a crash = %q %+v, %v; want no value fenced by %+v", it.Value, it.Fence, err, second)
	}
	var se *fence.StaleTokenError
	if err := s.Put(ctx, "deleted", []byte("zombie"), first); !errors.As(err, &se) || se.Highest != second.Token {
		t.Fatalf("stale Put after the Delete = %v; want a *StaleTokenError with Highest %d", err, second.Token)
	}
	if err := s.Delete(ctx, "deleted", second); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Delete of the deleted key = %v; want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "purged"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get of the purged key after a crash = %v; want ErrNotFound", err)
	}
	if err := s.Purge(ctx, "purged"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Purge of the purged key = %v; want ErrNotFound", err)
	}
	if err := s.Put(ctx, "purged", []byte("other"), grant(t, s, "other")); err != nil {
		t.Fatalf("Put under another lock after the Purge = %v; want nil", err)
	}
}

// With ExternalLocks, the fences come from another locker: the store admits
// tokens it never issued, by fence.Admit alone.
func TestKV_ExternalLocks_AdmitsForeignTokensByAdmitOnly(t *testing.T) {
	s := openStore(t, &Options{ExternalLocks: true})
	ctx := context.Background()
	if err := s.Put(ctx, "k", []byte("v"), fence.Fence{Name: "redis-lock", Token: 999999}); err != nil {
		t.Fatalf("Put with a foreign token = %v; want nil", err)
	}
	var se *fence.StaleTokenError
	if err := s.Put(ctx, "k", []byte("old"), fence.Fence{Name: "redis-lock", Token: 5}); !errors.As(err, &se) || se.Highest != 999999 {
		t.Fatalf("Put with a lower foreign token = %v; want a *StaleTokenError with Highest 999999", err)
	}
	if err := s.Delete(ctx, "k", fence.Fence{Name: "redis-lock", Token: 1000000}); err != nil {
		t.Fatalf("Delete with a foreign token = %v; want nil", err)
	}
}

// Close while Puts check fences against a name whose last token is read from the
// file (the check reads the file, as Close waits for the KV operations in flight):
// every Put ends, stored or ErrClosed, and so does Close.
func TestKV_CloseDuringIssuedChecks_NoDeadlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	f := grant(t, s, "job")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, nil) // "job" is in the file only
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					never := fence.Fence{Name: fmt.Sprintf("never-%d-%d", g, i), Token: 1}
					err := s.Put(ctx, fmt.Sprintf("k%d", g), []byte("v"), never)
					if errors.Is(err, fence.ErrClosed) {
						return
					}
					if err := s.Put(ctx, fmt.Sprintf("k%d", g), []byte("v"), f); errors.Is(err, fence.ErrClosed) {
						return
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Close and the Puts in flight did not end within 20s: a deadlock")
	}
}
