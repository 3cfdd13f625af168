package fencetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// TestWriteAttempts runs the write-attempt suite (P3 through retries, see
// fence.WithWriteAttempt) against the KVs newGuard returns, one per subtest, with
// the options of TestGuard (WithIssuer, WithGuardAsIssuer). Each case writes as a
// client whose first attempt of a write lands late: the attempt id is claimed by
// the attempt that lands first (the retry), the holder writes again, and the late
// attempt, carrying the same id and fence, is answered as its write's success
// with nothing written, so the later value stays. It checks this for Put and
// Delete; that the ids are those of the key's current fence (after the fence
// moves, a late attempt of the older fence is refused as stale, and an id may
// name a write under the new fence); that an id reused for other content (another
// value, or a delete) is another write, applied, not dropped as a retry; that an
// id is remembered for
// fence.MaxWriteAttempts - 1 later writes of the same holder, and forgotten
// after fence.MaxWriteAttempts (the bound: a key keeps no more); and that a
// malformed id is refused with ErrInvalid, nothing written.
func TestWriteAttempts(t *testing.T, newGuard func(t *testing.T) Guarded, opts ...Option) {
	t.Helper()
	cfg := newConfig(opts)
	newT := func(t *testing.T) *guardT {
		g := newGuard(t)
		if g == nil {
			return nil
		}
		issuer := cfg.issuer
		if cfg.guardIssues {
			l, ok := g.(fence.Locker)
			if !ok {
				t.Fatalf("fencetest: WithGuardAsIssuer: the KV %T is not a fence.Locker", g)
			}
			issuer = l
		}
		return &guardT{Guarded: g, issuer: issuer}
	}
	runCases(t, "KV", newT, []suiteCase[*guardT]{
		{"Put_LateAttempt_LaterWriteStays", attemptPutLate},
		{"Delete_LateAttempt_LaterWriteStays", attemptDeleteLate},
		{"Delete_RetryAfterApplied_Succeeds", attemptDeleteRetried},
		{"FenceMoved_LateAttemptStale_IDsForgotten", attemptFenceMoved},
		{"SameIDOtherContent_AnotherWrite_Applied", attemptSameIDOtherContent},
		{"Remembered_ForMaxWriteAttemptsWrites", attemptRemembered},
		{"Bounded_ForgottenAfterMaxWriteAttemptsWrites", attemptForgotten},
		{"BadAttemptID_ErrInvalid_NothingChanged", attemptBadID},
	})
}

// attempt returns ctx naming its write with a new attempt id, and the id.
func attempt(t *testing.T) (context.Context, string) {
	id := driver.NewLeaseID()
	return fence.WithWriteAttempt(testContext(t), id), id
}

func attemptPutLate(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(1)
	first, _ := attempt(t)
	// The retry of write 1 lands first; then the holder's write 2.
	if err := g.Put(first, key, []byte("v1"), f); err != nil {
		t.Fatalf("Put(v1) (write 1's retry) = %v; want nil", err)
	}
	second, _ := attempt(t)
	if err := g.Put(second, key, []byte("v2"), f); err != nil {
		t.Fatalf("Put(v2) (write 2, same lease) = %v; want nil", err)
	}
	// Write 1's first attempt, same id and fence, lands last.
	if err := g.Put(first, key, []byte("v1"), f); err != nil {
		t.Fatalf("Put(v1) (write 1's late first attempt) = %v; want nil (its write was applied)", err)
	}
	wantValue(t, g, key, "v2", f.Token)
}

func attemptDeleteLate(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(1)
	mustPut(t, g, key, "v0", f)
	del, _ := attempt(t)
	if err := g.Delete(del, key, f); err != nil {
		t.Fatalf("Delete (the delete's retry) = %v; want nil", err)
	}
	put, _ := attempt(t)
	if err := g.Put(put, key, []byte("v2"), f); err != nil {
		t.Fatalf("Put(v2) after the delete, same lease = %v; want nil", err)
	}
	if err := g.Delete(del, key, f); err != nil {
		t.Fatalf("Delete (the delete's late first attempt) = %v; want nil (its delete was applied)", err)
	}
	wantValue(t, g, key, "v2", f.Token)
}

func attemptDeleteRetried(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(1)
	mustPut(t, g, key, "v0", f)
	del, _ := attempt(t)
	if err := g.Delete(del, key, f); err != nil {
		t.Fatalf("Delete = %v; want nil", err)
	}
	// The answer was lost; the retry finds no value, but it is the same delete.
	if err := g.Delete(del, key, f); err != nil {
		t.Fatalf("Delete retried with its attempt id = %v; want nil (it was applied), not ErrNotFound", err)
	}
	wantDeleted(t, g, key, f)
}

func attemptFenceMoved(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f1, f2 := fc.at(1), fc.at(2)
	first, _ := attempt(t)
	if err := g.Put(first, key, []byte("v1"), f1); err != nil {
		t.Fatalf("Put(v1, token %d) = %v; want nil", f1.Token, err)
	}
	// The next holder's write: the key's fence moves, its ids are forgotten, and
	// the same id (a caller reusing it) names a new write under the new fence.
	if err := g.Put(first, key, []byte("v2"), f2); err != nil {
		t.Fatalf("Put(v2, token %d) with the id token %d's write used = %v; want nil (a new fence remembers no ids)", f2.Token, f1.Token, err)
	}
	wantValue(t, g, key, "v2", f2.Token)
	err := g.Put(first, key, []byte("v1"), f1)
	wantStale(t, fmt.Sprintf("Put(v1, token %d) arriving after token %d's write", f1.Token, f2.Token), err, f1.Token, f2.Token)
	wantValue(t, g, key, "v2", f2.Token)
}

func attemptSameIDOtherContent(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(1)
	reused, _ := attempt(t)
	if err := g.Put(reused, key, []byte("v1"), f); err != nil {
		t.Fatalf("Put(v1) = %v; want nil", err)
	}
	// A caller reusing the id for other content: another write, never a retry.
	if err := g.Put(reused, key, []byte("v2"), f); err != nil {
		t.Fatalf("Put(v2) with the id of Put(v1) = %v; want nil", err)
	}
	wantValue(t, g, key, "v2", f.Token)
	if err := g.Delete(reused, key, f); err != nil {
		t.Fatalf("Delete with the id of Put(v1) and Put(v2) = %v; want nil (another write)", err)
	}
	wantDeleted(t, g, key, f)
	other, _ := attempt(t)
	if err := g.Put(other, key, []byte("v3"), f); err != nil {
		t.Fatalf("Put(v3) = %v; want nil", err)
	}
	// Put(v2)'s late attempt: the same id and content, a retry of a write applied.
	if err := g.Put(reused, key, []byte("v2"), f); err != nil {
		t.Fatalf("Put(v2) late = %v; want nil (its write was applied)", err)
	}
	wantValue(t, g, key, "v3", f.Token)
}

func attemptRemembered(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(1)
	first, _ := attempt(t)
	if err := g.Put(first, key, []byte("v0"), f); err != nil {
		t.Fatalf("Put(v0) = %v; want nil", err)
	}
	last := ""
	for i := 1; i < fence.MaxWriteAttempts; i++ {
		ctx, _ := attempt(t)
		last = fmt.Sprintf("v%d", i)
		if err := g.Put(ctx, key, []byte(last), f); err != nil {
			t.Fatalf("Put(%s) = %v; want nil", last, err)
		}
	}
	if err := g.Put(first, key, []byte("v0"), f); err != nil {
		t.Fatalf("Put(v0) late, after %d later writes = %v; want nil (its write was applied)", fence.MaxWriteAttempts-1, err)
	}
	wantValue(t, g, key, last, f.Token)
}

// attemptForgotten pins the documented bound: a key keeps the newest
// fence.MaxWriteAttempts ids, so an attempt arriving after that many later writes
// is applied as a new write would be.
func attemptForgotten(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(1)
	first, _ := attempt(t)
	if err := g.Put(first, key, []byte("v0"), f); err != nil {
		t.Fatalf("Put(v0) = %v; want nil", err)
	}
	for i := 1; i <= fence.MaxWriteAttempts; i++ {
		ctx, _ := attempt(t)
		if err := g.Put(ctx, key, []byte(fmt.Sprintf("v%d", i)), f); err != nil {
			t.Fatalf("Put(v%d) = %v; want nil", i, err)
		}
	}
	if err := g.Put(first, key, []byte("v0"), f); err != nil {
		t.Fatalf("Put(v0) late, after %d later writes = %v; want nil", fence.MaxWriteAttempts, err)
	}
	it, err := g.Get(testContext(t), key)
	if err != nil || string(it.Value) != "v0" {
		t.Fatalf("Get after Put(v0)'s attempt came %d writes late = %q, %v; want v0: a key keeps only the newest %d ids", fence.MaxWriteAttempts, it.Value, err, fence.MaxWriteAttempts)
	}
}

func attemptBadID(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(1)
	mustPut(t, g, key, "v0", f)
	for _, id := range []string{"has space", strings.Repeat("a", fence.MaxAttemptIDLen+1)} {
		ctx := fence.WithWriteAttempt(testContext(t), id)
		if err := g.Put(ctx, key, []byte("bad"), f); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("Put with attempt id %q = %v; want ErrInvalid", id, err)
		}
		if err := g.Delete(ctx, key, f); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("Delete with attempt id %q = %v; want ErrInvalid", id, err)
		}
	}
	wantValue(t, g, key, "v0", f.Token)
}
