package fencetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// TestGuard runs the Guard conformance suite against the guards newGuard returns,
// one per subtest. It checks P2 and P3: several writes under one lease are
// accepted; a lower token, or an equal token under another lease, is rejected with
// a *fence.StaleTokenError carrying the highest token seen, and the rejected Put
// changed nothing; a fence of another lock name is rejected with ErrNamespace;
// Fence advances a resource without data and fences off older writers; Delete
// removes a value under the same rule and keeps the fence, and gives
// ErrNotFound for a key holding no value; Purge (when the guard is a
// fence.Purger) removes value and fence, so a lower token is admitted after it,
// and gives ErrNotFound for a key with neither; bad keys and fences are rejected with
// ErrInvalid; resources are independent; and under 16 goroutines writing
// interleaved tokens the highest token's value wins and no lower token is
// accepted after a higher one was.
//
// After a data-less Fence, the suite checks the value Get returns but not which
// fence it reports with it (the writer's or the newer one): stores differ. After
// a Delete, Get must report no value and the Delete's fence. When a Delete is
// both refused and finds no value, the suite does not pin which error it returns.
//
// By default the fences are made up by the suite (unique lock names, small
// tokens, fresh lease ids), so a guard needs no Locker to be tested. A guard that
// refuses fences its locker never issued (P9) runs the suite with WithIssuer.
func TestGuard(t *testing.T, newGuard func(t *testing.T) Guarded, opts ...Option) {
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
				t.Fatalf("fencetest: WithGuardAsIssuer: the guard %T is not a fence.Locker", g)
			}
			issuer = l
		}
		return &guardT{Guarded: g, issuer: issuer}
	}
	runCases(t, "Guard", newT, []suiteCase[*guardT]{
		{"Put_SeveralWritesUnderOneLease_Accepted", guardSeveralWritesOneLease},
		{"Put_HigherToken_Accepted_TokensMaySkip", guardHigherAccepted},
		{"Put_LowerToken_RejectedWithHighest", guardLowerRejected},
		{"Put_EqualTokenOtherLease_Rejected", guardEqualOtherLease},
		{"Put_OtherNamespace_Rejected", guardOtherNamespace},
		{"Put_Rejected_LeavesOldValue", guardRejectedLeavesValue},
		{"Fence_AdvancesWithoutData_FencesOffOlder", guardFenceAdvances},
		{"Fence_LowerOrOtherLease_Rejected", guardFenceRejected},
		{"Get_NeverWritten_ErrNotFound", guardGetNotFound},
		{"Put_ValuesRoundTrip", guardValuesRoundTrip},
		{"BadKeysAndFences_RejectedWithErrInvalid", guardBadInput},
		{"Resources_Independent", guardResourcesIndependent},
		{"Concurrent_16Goroutines_HighestWins", guardConcurrent},
		{"Delete_RemovesValue_KeepsFence_StaleWriterRefused", guardDeleteKeepsFence},
		{"Delete_UnderTheWritersLease_Accepted", guardDeleteSameLease},
		{"Delete_LowerOtherLeaseOrNamespace_Refused_ValueKept", guardDeleteRefused},
		{"Delete_NoValue_ErrNotFound_NothingChanged", guardDeleteNotFound},
		{"Delete_BadKeysAndFences_RejectedWithErrInvalid", guardDeleteBadInput},
		{"Purge_RemovesValueAndFence_LowerTokenAdmittedAfter", guardPurge},
	})
}

// guardT is a Guarded under test with the suite's options: the Locker that
// issues its fences (WithIssuer), nil when the suite makes fences up.
type guardT struct {
	Guarded
	issuer fence.Locker
}

// fencer makes the fences of one lock name. Without an issuer it makes them up:
// at(n) is token n under a fresh lease id on each call. With an issuer, at(n) is
// the fence of the name's n-th grant (the suite acquires and releases the lock
// until it has n grants), the same fence on every call, so tokens keep their
// order but not their values: compare with tok(n).
type fencer struct {
	name   string
	issuer fence.Locker
	t      *testing.T
	mu     sync.Mutex
	grants []fence.Fence
}

func newFencer(t *testing.T, g *guardT) *fencer {
	return &fencer{name: uniqueName(t, "lock"), issuer: g.issuer, t: t}
}

// at returns the fence of rank n (see fencer).
func (fc *fencer) at(n fence.Token) fence.Fence {
	if fc.issuer == nil {
		return fence.Fence{Name: fc.name, Token: n, LeaseID: driver.NewLeaseID()}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for fence.Token(len(fc.grants)) < n {
		fc.grants = append(fc.grants, issue(fc.t, fc.issuer, fc.name))
	}
	return fc.grants[n-1]
}

// tok returns the token of rank n.
func (fc *fencer) tok(n fence.Token) fence.Token { return fc.at(n).Token }

// other returns rank n's token under another lease id than at(n)'s.
func (fc *fencer) other(n fence.Token) fence.Fence {
	f := fc.at(n)
	f.LeaseID = driver.NewLeaseID()
	return f
}

// issue acquires name from l and releases it, returning the grant's fence.
func issue(t *testing.T, l fence.Locker, name string) fence.Fence {
	t.Helper()
	ctx := testContext(t)
	lease, err := l.Acquire(ctx, name, longTTL)
	if err != nil {
		t.Fatalf("issuer: Acquire(%q) = %v; want a grant (the suite's names are free)", name, err)
	}
	f := lease.Fence()
	if err := l.Release(ctx, name, lease.ID()); err != nil {
		t.Fatalf("issuer: Release(%q) = %v", name, err)
	}
	return f
}

func mustPut(t *testing.T, g Guarded, key string, value string, f fence.Fence) {
	t.Helper()
	if err := g.Put(testContext(t), key, []byte(value), f); err != nil {
		t.Fatalf("Put(%q, %q, token %d) = %v; want nil", key, value, f.Token, err)
	}
}

// wantStale fails unless err is a *fence.StaleTokenError for tok with Highest.
func wantStale(t *testing.T, what string, err error, tok, highest fence.Token) {
	t.Helper()
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("%s = %v; want a *fence.StaleTokenError matching ErrStaleToken", what, err)
	}
	if st.Token != tok || st.Highest != highest {
		t.Fatalf("%s: StaleTokenError{Token: %d, Highest: %d}; want Token %d, Highest %d", what, st.Token, st.Highest, tok, highest)
	}
}

// wantOtherLeaseRefused is wantStale for a fence presenting tok under another
// lease id than the one that wrote highest: with an issuer, a store that proves
// the lease wrong (P9) may refuse it with an *fence.UnissuedTokenError instead.
func wantOtherLeaseRefused(t *testing.T, g *guardT, what string, err error, tok, highest fence.Token) {
	t.Helper()
	var ue *fence.UnissuedTokenError
	if g.issuer != nil && errors.As(err, &ue) && errors.Is(err, fence.ErrUnissuedToken) {
		if ue.Token != tok || !ue.OtherLease {
			t.Fatalf("%s: UnissuedTokenError{Token: %d, OtherLease: %v}; want Token %d, OtherLease true", what, ue.Token, ue.OtherLease, tok)
		}
		return
	}
	wantStale(t, what, err, tok, highest)
}

// wantDeleted fails unless key holds no value and the fence f.
func wantDeleted(t *testing.T, g Guarded, key string, f fence.Fence) {
	t.Helper()
	it, err := g.Get(testContext(t), key)
	if err != nil {
		t.Fatalf("Get(%q) after Delete = %v; want no value, the fence and no error", key, err)
	}
	if it.Value != nil || it.Fence.Name != f.Name || it.Fence.Token != f.Token {
		t.Fatalf("Get(%q) after Delete = %q (nil: %v) with fence %v; want a nil value with fence %v", key, it.Value, it.Value == nil, it.Fence, f)
	}
}

// wantValue fails unless key holds value, written under a fence with token tok.
func wantValue(t *testing.T, g Guarded, key, value string, tok fence.Token) {
	t.Helper()
	it, err := g.Get(testContext(t), key)
	if err != nil {
		t.Fatalf("Get(%q) = %v; want %q", key, err, value)
	}
	if string(it.Value) != value || it.Fence.Token != tok {
		t.Fatalf("Get(%q) = %q with token %d; want %q with token %d", key, it.Value, it.Fence.Token, value, tok)
	}
}

// wantOnlyValue is wantValue for a key fenced by Fence after its last write: the
// suite does not pin whether Get then reports the writer's fence or the newer one.
func wantOnlyValue(t *testing.T, g Guarded, key, value string) {
	t.Helper()
	it, err := g.Get(testContext(t), key)
	if err != nil || string(it.Value) != value {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, it.Value, err, value)
	}
}

func guardSeveralWritesOneLease(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(5)
	for i := 1; i <= 3; i++ {
		mustPut(t, g, key, fmt.Sprintf("v%d", i), f)
	}
	if err := g.Fence(testContext(t), key, f); err != nil {
		t.Fatalf("Fence with the lease's own fence after its writes = %v; want nil", err)
	}
	mustPut(t, g, key, "v4", f)
	wantValue(t, g, key, "v4", f.Token)
	if it, _ := g.Get(testContext(t), key); it.Fence.Name != f.Name {
		t.Fatalf("Get(%q).Fence.Name = %q; want %q", key, it.Fence.Name, f.Name)
	}
}

func guardHigherAccepted(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "three", fc.at(3))
	mustPut(t, g, key, "hundred", fc.at(100)) // tokens may skip values
	if g.issuer != nil {
		wantValue(t, g, key, "hundred", fc.tok(100))
		return // an issuer does not grant MaxToken
	}
	mustPut(t, g, key, "max", fc.at(fence.MaxToken))
	wantValue(t, g, key, "max", fence.MaxToken)
}

func guardLowerRejected(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "ten", fc.at(10))
	ctx := testContext(t)
	wantStale(t, "Put with token 7 after 10", g.Put(ctx, key, []byte("seven"), fc.at(7)), fc.tok(7), fc.tok(10))
	wantStale(t, "Put with token 1 after 10", g.Put(ctx, key, []byte("one"), fc.at(1)), fc.tok(1), fc.tok(10))
	wantValue(t, g, key, "ten", fc.tok(10))
}

func guardEqualOtherLease(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	mine := fc.at(10)
	mustPut(t, g, key, "mine", mine)
	ctx := testContext(t)
	other := fc.other(10) // same token, another lease: a regressed counter (P2)
	wantOtherLeaseRefused(t, g, "Put with an equal token under another lease", g.Put(ctx, key, []byte("other"), other), mine.Token, mine.Token)
	noLease := fence.Fence{Name: fc.name, Token: mine.Token}
	wantStale(t, "Put with an equal token and no lease id", g.Put(ctx, key, []byte("nolease"), noLease), mine.Token, mine.Token)
	wantValue(t, g, key, "mine", mine.Token)
	mustPut(t, g, key, "mine again", mine)
}

func guardOtherNamespace(t *testing.T, g *guardT) {
	a, b := newFencer(t, g), newFencer(t, g)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "a", a.at(5))
	err := g.Put(testContext(t), key, []byte("b"), b.at(100))
	var ne *fence.NamespaceError
	if !errors.As(err, &ne) || !errors.Is(err, fence.ErrNamespace) {
		t.Fatalf("Put with a token of another lock = %v; want a *fence.NamespaceError matching ErrNamespace", err)
	}
	if ne.Want != a.name || ne.Got != b.name {
		t.Fatalf("NamespaceError{Want: %q, Got: %q}; want Want %q, Got %q", ne.Want, ne.Got, a.name, b.name)
	}
	wantErrIs(t, "Fence with a token of another lock", g.Fence(testContext(t), key, b.at(100)), fence.ErrNamespace)
	wantValue(t, g, key, "a", a.tok(5))
}

func guardRejectedLeavesValue(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(8)
	mustPut(t, g, key, "good", f)
	for _, bad := range []fence.Fence{fc.at(7), fc.other(8), newFencer(t, g).at(9)} {
		if err := g.Put(testContext(t), key, []byte("bad"), bad); err == nil {
			t.Fatalf("Put with %v after token %d = nil; want it rejected", bad, f.Token)
		}
		wantValue(t, g, key, "good", f.Token)
	}
	// The rejected writes did not move the fence either: token 8's lease still writes.
	mustPut(t, g, key, "good 2", f)
	wantValue(t, g, key, "good 2", f.Token)
}

func guardFenceAdvances(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "old", fc.at(3))
	f5 := fc.at(5)
	if err := g.Fence(ctx, key, f5); err != nil {
		t.Fatalf("Fence(token 5) after token 3 = %v; want nil", err)
	}
	wantOnlyValue(t, g, key, "old") // Fence writes no data
	// The paused holder of token 4 is fenced off before 5's first write.
	wantStale(t, "Put with token 4 after Fence(5)", g.Put(ctx, key, []byte("zombie"), fc.at(4)), fc.tok(4), f5.Token)
	wantOnlyValue(t, g, key, "old")
	mustPut(t, g, key, "new", f5)
	wantValue(t, g, key, "new", f5.Token)

	// Fencing a key never written: no data, but not ErrNotFound, and it fences.
	fresh := uniqueName(t, "fresh")
	if err := g.Fence(ctx, fresh, fc.at(9)); err != nil {
		t.Fatalf("Fence of a new key = %v; want nil", err)
	}
	it, err := g.Get(ctx, fresh)
	if err != nil {
		t.Fatalf("Get of a fenced, never written key = %v; want no error", err)
	}
	if len(it.Value) != 0 {
		t.Fatalf("Get of a fenced, never written key = %q; want no value", it.Value)
	}
	wantStale(t, "Put with token 2 on a key fenced at 9", g.Put(ctx, fresh, []byte("x"), fc.at(2)), fc.tok(2), fc.tok(9))
}

func guardFenceRejected(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(20)
	if err := g.Fence(ctx, key, f); err != nil {
		t.Fatalf("Fence(20) = %v", err)
	}
	wantStale(t, "Fence(19) after Fence(20)", g.Fence(ctx, key, fc.at(19)), fc.tok(19), f.Token)
	wantOtherLeaseRefused(t, g, "Fence(20) under another lease", g.Fence(ctx, key, fc.other(20)), f.Token, f.Token)
	if err := g.Fence(ctx, key, f); err != nil {
		t.Fatalf("Fence(20) again under the same lease = %v; want nil", err)
	}
	if err := g.Fence(ctx, key, fc.at(21)); err != nil {
		t.Fatalf("Fence(21) = %v; want nil", err)
	}
	wantStale(t, "Put with token 20 after Fence(21)", g.Put(ctx, key, []byte("x"), f), f.Token, fc.tok(21))
}

func guardGetNotFound(t *testing.T, g *guardT) {
	_, err := g.Get(testContext(t), uniqueName(t, "never"))
	wantErrIs(t, "Get of a never-written key", err, fence.ErrNotFound)
}

func guardValuesRoundTrip(t *testing.T, g *guardT) {
	fc := newFencer(t, g)
	ctx := testContext(t)
	values := map[string][]byte{
		"empty":  {},
		"binary": {0, 1, 2, 0xff, 0xfe, 0, '\n', '\r'},
		"utf8":   []byte("ünïcødé ✓"),
		"large":  bytes.Repeat([]byte("0123456789abcdef"), 4096), // 64 KiB
	}
	rank := fence.Token(1)
	for name, v := range values {
		key := uniqueName(t, name)
		if err := g.Put(ctx, key, v, fc.at(rank)); err != nil {
			t.Fatalf("Put(%s value, %d bytes) = %v; want nil", name, len(v), err)
		}
		it, err := g.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get after Put of the %s value = %v", name, err)
		}
		if !bytes.Equal(it.Value, v) {
			t.Fatalf("Get returned %d bytes %q...; want the %s value of %d bytes", len(it.Value), truncate(it.Value), name, len(v))
		}
		rank++
	}
	// The guard keeps its own copy: changing the caller's buffer changes nothing.
	key := uniqueName(t, "copy")
	buf := []byte("abc")
	if err := g.Put(ctx, key, buf, fc.at(rank)); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	wantValue(t, g, key, "abc", fc.tok(rank))
}

func truncate(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

func guardBadInput(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	good := fc.at(1)
	for _, bf := range badFences(fc.name, good) {
		wantInvalid(t, "Put with a fence with "+bf.desc, g.Put(ctx, key, []byte("x"), bf.f), bf.field)
		wantInvalid(t, "Fence with a fence with "+bf.desc, g.Fence(ctx, key, bf.f), bf.field)
	}
	for _, bn := range badNames {
		wantInvalid(t, fmt.Sprintf("Put with a key %s", bn.desc), g.Put(ctx, bn.name, []byte("x"), good), "key")
		wantInvalid(t, fmt.Sprintf("Fence with a key %s", bn.desc), g.Fence(ctx, bn.name, good), "key")
		_, err := g.Get(ctx, bn.name)
		wantInvalid(t, fmt.Sprintf("Get with a key %s", bn.desc), err, "key")
	}
	// Nothing was written by the rejected calls.
	_, err := g.Get(ctx, key)
	wantErrIs(t, "Get after only invalid Puts", err, fence.ErrNotFound)
	mustPut(t, g, key, "ok", good)
}

// badFences are malformed variants of good, a valid fence of lock name, each
// with the field its ErrInvalid names.
func badFences(name string, good fence.Fence) []struct {
	desc, field string
	f           fence.Fence
} {
	return []struct {
		desc, field string
		f           fence.Fence
	}{
		{"zero token", "token", fence.Fence{Name: name, Token: 0, LeaseID: good.LeaseID}},
		{"token above MaxToken", "token", fence.Fence{Name: name, Token: fence.MaxToken + 1, LeaseID: good.LeaseID}},
		{"empty lock name", "name", fence.Fence{Name: "", Token: good.Token, LeaseID: good.LeaseID}},
		{"lock name with a newline", "name", fence.Fence{Name: "a\nb", Token: good.Token, LeaseID: good.LeaseID}},
		{"lease id with a space", "lease", fence.Fence{Name: name, Token: good.Token, LeaseID: "bad lease"}},
	}
}

func guardResourcesIndependent(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g) // one lock protecting two resources
	k1, k2 := uniqueName(t, "one"), uniqueName(t, "two")
	mustPut(t, g, k1, "k1@10", fc.at(10))
	mustPut(t, g, k2, "k2@5", fc.at(5)) // k1's highest does not apply to k2
	if err := g.Fence(ctx, k1, fc.at(20)); err != nil {
		t.Fatal(err)
	}
	mustPut(t, g, k2, "k2@6", fc.at(6))
	wantOnlyValue(t, g, k1, "k1@10")
	wantValue(t, g, k2, "k2@6", fc.tok(6))
	// Another lock may fence another resource.
	k3 := uniqueName(t, "three")
	other := newFencer(t, g)
	mustPut(t, g, k3, "k3@1", other.at(1))
	wantValue(t, g, k3, "k3@1", other.tok(1))
}

func guardDeleteKeepsFence(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "v3", fc.at(3))
	del := fc.at(4)
	if err := g.Delete(ctx, key, del); err != nil {
		t.Fatalf("Delete(token 4) of a key written at 3 = %v; want nil", err)
	}
	wantDeleted(t, g, key, del)
	// The fence stayed: the writer of token 3 is still refused, and so is a
	// second Delete by it; the next holder writes again.
	wantStale(t, "Put with token 3 after Delete(4)", g.Put(ctx, key, []byte("zombie"), fc.at(3)), fc.tok(3), del.Token)
	wantDeleted(t, g, key, del)
	mustPut(t, g, key, "v5", fc.at(5))
	wantValue(t, g, key, "v5", fc.tok(5))
	// Delete, then a write, under the same lease.
	f6 := fc.at(6)
	if err := g.Delete(ctx, key, f6); err != nil {
		t.Fatalf("Delete(token 6) = %v; want nil", err)
	}
	mustPut(t, g, key, "v6", f6)
	wantValue(t, g, key, "v6", f6.Token)
}

func guardDeleteSameLease(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(5)
	mustPut(t, g, key, "v", f)
	if err := g.Delete(ctx, key, f); err != nil {
		t.Fatalf("Delete under the lease that wrote the value = %v; want nil", err)
	}
	wantDeleted(t, g, key, f)
	wantErrIs(t, "a second Delete under the same lease", g.Delete(ctx, key, f), fence.ErrNotFound)
	wantDeleted(t, g, key, f)
}

func guardDeleteRefused(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	f := fc.at(10)
	mustPut(t, g, key, "ten", f)
	wantStale(t, "Delete with token 7 after 10", g.Delete(ctx, key, fc.at(7)), fc.tok(7), f.Token)
	wantOtherLeaseRefused(t, g, "Delete with token 10 under another lease", g.Delete(ctx, key, fc.other(10)), f.Token, f.Token)
	wantStale(t, "Delete with token 10 and no lease id", g.Delete(ctx, key, fence.Fence{Name: f.Name, Token: f.Token}), f.Token, f.Token)
	wantErrIs(t, "Delete with a fence of another lock", g.Delete(ctx, key, newFencer(t, g).at(20)), fence.ErrNamespace)
	wantValue(t, g, key, "ten", f.Token)
	// The refusals did not move the fence: token 10's lease still writes.
	mustPut(t, g, key, "ten again", f)
	wantValue(t, g, key, "ten again", f.Token)
}

func guardDeleteNotFound(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	// Never written: ErrNotFound, and no fence is recorded.
	never := uniqueName(t, "never")
	wantErrIs(t, "Delete of a never-written key", g.Delete(ctx, never, fc.at(5)), fence.ErrNotFound)
	_, err := g.Get(ctx, never)
	wantErrIs(t, "Get after a Delete of a never-written key", err, fence.ErrNotFound)
	mustPut(t, g, never, "first", fc.at(1)) // Delete(5) fenced nothing

	// Only fenced: ErrNotFound, and the fence stays what it was.
	fenced := uniqueName(t, "fenced")
	if err := g.Fence(ctx, fenced, fc.at(2)); err != nil {
		t.Fatalf("Fence(2) of a new key = %v", err)
	}
	wantErrIs(t, "Delete of a key that was only fenced", g.Delete(ctx, fenced, fc.at(6)), fence.ErrNotFound)
	it, err := g.Get(ctx, fenced)
	if err != nil || len(it.Value) != 0 || it.Fence.Token != fc.tok(2) {
		t.Fatalf("Get of a fenced key after a refused Delete = %q with token %d, %v; want no value with token %d", it.Value, it.Fence.Token, err, fc.tok(2))
	}
	mustPut(t, g, fenced, "three", fc.at(3))
}

func guardDeleteBadInput(t *testing.T, g *guardT) {
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	good := fc.at(1)
	mustPut(t, g, key, "kept", good)
	for _, bf := range badFences(fc.name, good) {
		wantInvalid(t, "Delete with a fence with "+bf.desc, g.Delete(ctx, key, bf.f), bf.field)
	}
	for _, bn := range badNames {
		wantInvalid(t, fmt.Sprintf("Delete with a key %s", bn.desc), g.Delete(ctx, bn.name, good), "key")
	}
	wantValue(t, g, key, "kept", good.Token)
}

func guardPurge(t *testing.T, g *guardT) {
	p, ok := g.Guarded.(fence.Purger)
	if !ok {
		t.Skipf("%T is not a fence.Purger", g.Guarded)
	}
	ctx := testContext(t)
	fc := newFencer(t, g)
	key, fenced := uniqueName(t, "key"), uniqueName(t, "fenced")
	mustPut(t, g, key, "v5", fc.at(5))
	if err := g.Fence(ctx, fenced, fc.at(5)); err != nil {
		t.Fatalf("Fence(5) of a new key = %v; want nil", err)
	}
	for _, k := range []string{key, fenced} {
		if err := p.Purge(ctx, k); err != nil {
			t.Fatalf("Purge(%q) = %v; want nil", k, err)
		}
		_, err := g.Get(ctx, k)
		wantErrIs(t, "Get after Purge", err, fence.ErrNotFound)
		wantErrIs(t, "a second Purge", p.Purge(ctx, k), fence.ErrNotFound)
		// The fence went with the value: a lower token is admitted again.
		mustPut(t, g, k, "v3", fc.at(3))
		wantValue(t, g, k, "v3", fc.tok(3))
	}
	wantErrIs(t, "Purge of a never-written key", p.Purge(ctx, uniqueName(t, "never")), fence.ErrNotFound)
	wantInvalid(t, "Purge of an empty key", p.Purge(ctx, ""), "key")
}

// guardConcurrent has 16 goroutines write interleaved tokens to one key. It checks
// the register's history: an accepted write whose call began after another
// accepted write's call returned must carry a higher token, a rejection carries a
// highest at least its token, and the final value is the highest token's.
func guardConcurrent(t *testing.T, g *guardT) {
	const workers, perWorker = 16, 8
	ctx := testContext(t)
	fc := newFencer(t, g)
	key := uniqueName(t, "key")
	fc.at(workers * perWorker) // an issuer grants every token before the race

	type op struct {
		tok        fence.Token
		start, end int64 // logical time from one counter: real-time order
		accepted   bool
	}
	var (
		clock atomic.Int64
		mu    sync.Mutex
		ops   []op
	)
	inParallel(t, workers, func(w int) error {
		for i := 0; i < perWorker; i++ {
			// Worker w writes tokens w+1, w+1+16, ...: interleaved across workers.
			f := fc.at(fence.Token(w + 1 + i*workers))
			tok := f.Token
			start := clock.Add(1)
			err := g.Put(ctx, key, []byte(fmt.Sprintf("v%d", tok)), f)
			end := clock.Add(1)
			var st *fence.StaleTokenError
			switch {
			case err == nil:
			case errors.As(err, &st):
				if st.Highest <= tok {
					return fmt.Errorf("Put with token %d rejected with Highest %d; want Highest > %d", tok, st.Highest, tok)
				}
			default:
				return fmt.Errorf("Put with token %d = %v; want nil or a *fence.StaleTokenError", tok, err)
			}
			mu.Lock()
			ops = append(ops, op{tok, start, end, err == nil})
			mu.Unlock()
		}
		return nil
	})
	top := fc.tok(workers * perWorker)
	if len(ops) != workers*perWorker {
		t.Fatalf("recorded %d Puts; want %d", len(ops), workers*perWorker)
	}
	for _, a := range ops {
		if !a.accepted {
			// A rejection needs a higher token accepted before the rejected call returned.
			ok := false
			for _, c := range ops {
				if c.accepted && c.tok > a.tok && c.start < a.end {
					ok = true
					break
				}
			}
			if !ok {
				t.Fatalf("token %d rejected although no higher token was accepted before its Put returned", a.tok)
			}
			continue
		}
		for _, b := range ops {
			if b.accepted && a.end < b.start && b.tok <= a.tok {
				t.Fatalf("token %d accepted after token %d was accepted (its Put began after the other's returned); a guard never accepts a lower token later (P2)", b.tok, a.tok)
			}
		}
	}
	for _, o := range ops {
		if o.tok == top && !o.accepted {
			t.Fatalf("Put with token %d, the highest, was rejected; want it accepted", top)
		}
	}
	wantValue(t, g, key, fmt.Sprintf("v%d", top), top)
}
