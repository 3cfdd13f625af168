package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
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
// other id has; without a lease id the token passes P9.
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
	if err := s.Put(ctx, "k", []byte("mine"), fence.Fence{Name: "job", Token: l.Token()}); err != nil {
		t.Fatalf("Put with the live token and no lease id = %v; want nil", err)
	}
	if err := s.Put(ctx, "k2", []byte("mine"), l.Fence()); err != nil {
		t.Fatalf("Put with the holder's fence = %v; want nil", err)
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
