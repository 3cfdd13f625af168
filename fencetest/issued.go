package fencetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// IssuingKV is what TestIssuedKV tests: a store that both grants locks and keeps
// a fenced key-value store and fences (P9), such as the embedded bolt store.
type IssuingKV interface {
	fence.Locker
	fence.KV
	fence.Guard
}

// TestIssuedKV runs the P9 suite ("only issued tokens fence") against the stores
// newKV returns, one per subtest, and the lifecycle of a key (Delete, and Purge
// when the store implements fence.Purger). Every fence it writes with is drawn
// from the store's own grants. It checks:
//
//   - Put, Delete and Fence with a token above the last one issued for the lock
//     are refused with a *fence.UnissuedTokenError (errors.Is
//     fence.ErrUnissuedToken) naming the lock, the token and the last token, whose
//     message names both tokens; nothing is written, and the real holder still
//     writes (a typo cannot wedge a key);
//   - a lock that was never granted is refused the same way, with Last 0;
//   - a grant's token under another lease id than the live lease holding that
//     token is refused with OtherLease set;
//   - the holder's own fence is admitted; a released holder's fence is stale
//     once a later grant wrote (*fence.StaleTokenError), not unissued;
//   - a live lease's token without a lease id is refused by Put, Fence and
//     Delete with a *fence.LeaseRequiredError (errors.Is
//     fence.ErrLeaseRequired), on a key the holder wrote and on a new one, and
//     nothing is written: stored without a lease, it would refuse the holder's
//     own writes under its token, so anyone who read the token could fence the
//     holder out. The holder still writes. Once the lease has ended (released),
//     its token without a lease id is admitted as fence.Admit admits it: no live
//     holder is left to fence out, every later grant's token is higher, and the
//     ended lease's own writes with that token are then stale;
//   - on a store that declares Features.Semaphores, a permit's token under
//     another live permit's lease id, or a fresh one, is refused with
//     OtherLease set, without a lease id with a *fence.LeaseRequiredError, and
//     each permit's own fence is admitted;
//   - Delete removes the value and keeps the fence (Get: nil value, the
//     Delete's fence), a stale Put after it is refused with a
//     *fence.StaleTokenError, and a key never written gives fence.ErrNotFound;
//   - Purge (if the store is a fence.Purger) removes value and fence, so Get
//     gives fence.ErrNotFound and a write under another lock is admitted; a key
//     with neither gives fence.ErrNotFound.
//
// Stores that check P9 run TestGuard too, with WithIssuer(store). Options are
// accepted for symmetry; none changes this suite yet.
func TestIssuedKV(t *testing.T, newKV func(t *testing.T) IssuingKV, opts ...Option) {
	t.Helper()
	_ = newConfig(opts)
	runCases(t, "IssuingKV", newKV, []suiteCase[IssuingKV]{
		{"TokenAboveLastIssued_Refused_NothingWritten", issuedAboveLast},
		{"LockNeverGranted_Refused_NothingWritten", issuedNeverGranted},
		{"OtherLeaseForLiveLeasesToken_Refused", issuedOtherLease},
		{"RealHoldersFence_Admitted", issuedRealHolder},
		{"LiveLeasesTokenWithoutLease_Refused_EndedLeasesAdmitted", issuedLeaseRequired},
		{"Delete_KeepsFence_StaleWriterRefused_NeverWrittenNotFound", issuedDelete},
		{"Purge_RemovesValueAndFence", issuedPurge},
		{"Permit_OtherPermitsLease_Refused_EachOwnAdmitted", issuedPermitOtherLease},
	})
}

// release releases l.
func release(t *testing.T, kv IssuingKV, l *fence.Lease) {
	t.Helper()
	if err := kv.Release(testContext(t), l.Name(), l.ID()); err != nil {
		t.Fatalf("Release(%q) = %v", l.Name(), err)
	}
}

// wantUnissued fails unless err is a *fence.UnissuedTokenError for lock and tok,
// with last as the last token issued (when otherLease is false) and a message
// naming both tokens.
func wantUnissued(t *testing.T, what string, err error, lock string, tok, last fence.Token, otherLease bool) {
	t.Helper()
	var ue *fence.UnissuedTokenError
	if !errors.As(err, &ue) || !errors.Is(err, fence.ErrUnissuedToken) {
		t.Fatalf("%s = %v; want a *fence.UnissuedTokenError matching ErrUnissuedToken", what, err)
	}
	if ue.Lock != lock || ue.Token != tok || ue.OtherLease != otherLease {
		t.Fatalf("%s: UnissuedTokenError{Lock: %q, Token: %d, OtherLease: %v}; want Lock %q, Token %d, OtherLease %v", what, ue.Lock, ue.Token, ue.OtherLease, lock, tok, otherLease)
	}
	if otherLease {
		return
	}
	if ue.Last != last {
		t.Fatalf("%s: UnissuedTokenError.Last = %d; want %d, the last token issued", what, ue.Last, last)
	}
	msg := err.Error()
	if !strings.Contains(msg, strconv.FormatUint(uint64(tok), 10)) || (last != 0 && !strings.Contains(msg, strconv.FormatUint(uint64(last), 10))) {
		t.Fatalf("%s: message %q; want it to name token %d and the last token %d", what, msg, tok, last)
	}
}

// wantLeaseRequired fails unless err is a *fence.LeaseRequiredError for lock
// and tok whose message names the token.
func wantLeaseRequired(t *testing.T, what string, err error, lock string, tok fence.Token) {
	t.Helper()
	var le *fence.LeaseRequiredError
	if !errors.As(err, &le) || !errors.Is(err, fence.ErrLeaseRequired) {
		t.Fatalf("%s = %v; want a *fence.LeaseRequiredError matching ErrLeaseRequired", what, err)
	}
	if le.Lock != lock || le.Token != tok {
		t.Fatalf("%s: LeaseRequiredError{Lock: %q, Token: %d}; want Lock %q, Token %d", what, le.Lock, le.Token, lock, tok)
	}
	if !strings.Contains(err.Error(), strconv.FormatUint(uint64(tok), 10)) {
		t.Fatalf("%s: message %q; want it to name token %d", what, err.Error(), tok)
	}
}

// wantItem fails unless key holds value (nil: none) under a fence with token tok
// of lock name.
func wantItem(t *testing.T, kv IssuingKV, key string, value []byte, name string, tok fence.Token) {
	t.Helper()
	it, err := kv.Get(testContext(t), key)
	if err != nil {
		t.Fatalf("Get(%q) = %v; want %q under %s#%d", key, err, value, name, tok)
	}
	if (value == nil) != (it.Value == nil) || string(it.Value) != string(value) || it.Fence.Name != name || it.Fence.Token != tok {
		t.Fatalf("Get(%q) = %q (nil: %v) under %v; want %q (nil: %v) under %s#%d", key, it.Value, it.Value == nil, it.Fence, value, value == nil, name, tok)
	}
}

func issuedAboveLast(t *testing.T, kv IssuingKV) {
	ctx := testContext(t)
	name, key, fresh := uniqueName(t, "lock"), uniqueName(t, "key"), uniqueName(t, "fresh")
	l := acquire(t, kv, name, longTTL)
	good := l.Fence()
	if err := kv.Put(ctx, key, []byte("good"), good); err != nil {
		t.Fatalf("Put with the holder's fence = %v; want nil", err)
	}
	typo := l.Token() + 999999
	for _, f := range []fence.Fence{
		{Name: name, Token: typo},
		{Name: name, Token: typo, LeaseID: driver.NewLeaseID()},
		{Name: name, Token: l.Token() + 1, LeaseID: l.ID()},
	} {
		wantUnissued(t, "Put with a token above the last issued", kv.Put(ctx, key, []byte("typo"), f), name, f.Token, l.Token(), false)
		wantUnissued(t, "Fence with a token above the last issued", kv.Fence(ctx, key, f), name, f.Token, l.Token(), false)
		wantUnissued(t, "Delete with a token above the last issued", kv.Delete(ctx, key, f), name, f.Token, l.Token(), false)
		wantItem(t, kv, key, []byte("good"), name, l.Token())
		wantUnissued(t, "Put of a new key with a token above the last issued", kv.Put(ctx, fresh, []byte("typo"), f), name, f.Token, l.Token(), false)
		wantUnissued(t, "Fence of a new key with a token above the last issued", kv.Fence(ctx, fresh, f), name, f.Token, l.Token(), false)
		_, err := kv.Get(ctx, fresh)
		wantErrIs(t, "Get of a key only refused writes went to", err, fence.ErrNotFound)
	}
	// The real holder is not fenced out by the refused fences.
	if err := kv.Put(ctx, key, []byte("again"), good); err != nil {
		t.Fatalf("the holder's Put after the refused ones = %v; want nil", err)
	}
	wantItem(t, kv, key, []byte("again"), name, l.Token())
	release(t, kv, l)
	// The next grant is issued and admitted: the refusals did not burn tokens.
	next := acquire(t, kv, name, longTTL)
	if err := kv.Put(ctx, key, []byte("next"), next.Fence()); err != nil {
		t.Fatalf("Put with the next grant's fence = %v; want nil", err)
	}
	wantItem(t, kv, key, []byte("next"), name, next.Token())
}

func issuedNeverGranted(t *testing.T, kv IssuingKV) {
	ctx := testContext(t)
	never, key := uniqueName(t, "never"), uniqueName(t, "key")
	for _, f := range []fence.Fence{
		{Name: never, Token: 42},
		{Name: never, Token: 1, LeaseID: driver.NewLeaseID()},
	} {
		wantUnissued(t, "Put with a lock never granted", kv.Put(ctx, key, []byte("x"), f), never, f.Token, 0, false)
		wantUnissued(t, "Fence with a lock never granted", kv.Fence(ctx, key, f), never, f.Token, 0, false)
		wantUnissued(t, "Delete with a lock never granted", kv.Delete(ctx, key, f), never, f.Token, 0, false)
		_, err := kv.Get(ctx, key)
		wantErrIs(t, "Get of a key only refused writes went to", err, fence.ErrNotFound)
	}
	// The key is free for the lock that is then granted.
	l := acquire(t, kv, uniqueName(t, "real"), longTTL)
	if err := kv.Put(ctx, key, []byte("real"), l.Fence()); err != nil {
		t.Fatalf("Put with a granted lock's fence = %v; want nil", err)
	}
	// A key fenced by a real lock refuses the never-granted one as unissued.
	wantUnissued(t, "Put with a lock never granted on a fenced key", kv.Put(ctx, key, []byte("x"), fence.Fence{Name: never, Token: 42}), never, 42, 0, false)
	wantItem(t, kv, key, []byte("real"), l.Name(), l.Token())
}

func issuedOtherLease(t *testing.T, kv IssuingKV) {
	ctx := testContext(t)
	name, key := uniqueName(t, "lock"), uniqueName(t, "key")
	l := acquire(t, kv, name, longTTL)
	forged := fence.Fence{Name: name, Token: l.Token(), LeaseID: driver.NewLeaseID()}
	wantUnissued(t, "Put with the live lease's token under another lease id", kv.Put(ctx, key, []byte("forged"), forged), name, l.Token(), 0, true)
	wantUnissued(t, "Fence with the live lease's token under another lease id", kv.Fence(ctx, key, forged), name, l.Token(), 0, true)
	_, err := kv.Get(ctx, key)
	wantErrIs(t, "Get of a key only refused writes went to", err, fence.ErrNotFound)
	if err := kv.Put(ctx, key, []byte("mine"), l.Fence()); err != nil {
		t.Fatalf("Put with the live lease's own fence = %v; want nil", err)
	}
	wantUnissued(t, "Delete with the live lease's token under another lease id", kv.Delete(ctx, key, forged), name, l.Token(), 0, true)
	wantItem(t, kv, key, []byte("mine"), name, l.Token())
}

func issuedRealHolder(t *testing.T, kv IssuingKV) {
	ctx := testContext(t)
	name, key := uniqueName(t, "lock"), uniqueName(t, "key")
	first := acquire(t, kv, name, longTTL)
	if err := kv.Fence(ctx, key, first.Fence()); err != nil {
		t.Fatalf("Fence with the holder's fence = %v; want nil", err)
	}
	if err := kv.Put(ctx, key, []byte("first"), first.Fence()); err != nil {
		t.Fatalf("Put with the holder's fence = %v; want nil", err)
	}
	release(t, kv, first)
	second := acquire(t, kv, name, longTTL)
	if err := kv.Put(ctx, key, []byte("second"), second.Fence()); err != nil {
		t.Fatalf("Put with the next holder's fence = %v; want nil", err)
	}
	// The released holder is stale, not unissued: its token was issued.
	wantStale(t, "Put by the released first holder", kv.Put(ctx, key, []byte("zombie"), first.Fence()), first.Token(), second.Token())
	wantItem(t, kv, key, []byte("second"), name, second.Token())
	release(t, kv, second)
	third := acquire(t, kv, name, longTTL)
	if err := kv.Delete(ctx, key, third.Fence()); err != nil {
		t.Fatalf("Delete with the holder's fence = %v; want nil", err)
	}
	if err := kv.Put(ctx, key, []byte("third"), third.Fence()); err != nil {
		t.Fatalf("Put with the holder's fence after its Delete = %v; want nil", err)
	}
	wantItem(t, kv, key, []byte("third"), name, third.Token())
}

// issuedLeaseRequired: a live lease's token without its lease id fences
// nothing; once the lease ended, the token alone is admitted as before.
func issuedLeaseRequired(t *testing.T, kv IssuingKV) {
	ctx := testContext(t)
	name, key, fresh := uniqueName(t, "lock"), uniqueName(t, "key"), uniqueName(t, "fresh")
	l := acquire(t, kv, name, longTTL)
	if err := kv.Put(ctx, key, []byte("mine"), l.Fence()); err != nil {
		t.Fatalf("Put with the holder's fence = %v; want nil", err)
	}
	bare := fence.Fence{Name: name, Token: l.Token()}
	// On a key nobody fenced, fence.Admit alone would admit it and store a fence
	// that refuses the holder: P9 refuses it first.
	wantLeaseRequired(t, "Put of a new key with the live lease's token and no lease id", kv.Put(ctx, fresh, []byte("bare"), bare), name, l.Token())
	wantLeaseRequired(t, "Fence of a new key with the live lease's token and no lease id", kv.Fence(ctx, fresh, bare), name, l.Token())
	_, err := kv.Get(ctx, fresh)
	wantErrIs(t, "Get of a key only refused writes went to", err, fence.ErrNotFound)
	// On the holder's key too, whatever fence.Admit would say.
	wantLeaseRequired(t, "Put with the live lease's token and no lease id", kv.Put(ctx, key, []byte("bare"), bare), name, l.Token())
	wantLeaseRequired(t, "Fence with the live lease's token and no lease id", kv.Fence(ctx, key, bare), name, l.Token())
	wantLeaseRequired(t, "Delete with the live lease's token and no lease id", kv.Delete(ctx, key, bare), name, l.Token())
	wantItem(t, kv, key, []byte("mine"), name, l.Token())
	// The holder is not fenced out: its writes go through on both keys.
	for _, k := range []string{key, fresh} {
		if err := kv.Put(ctx, k, []byte("still mine"), l.Fence()); err != nil {
			t.Fatalf("the holder's Put(%q) after the refused ones = %v; want nil", k, err)
		}
		wantItem(t, kv, k, []byte("still mine"), name, l.Token())
	}
	// Ended, the lease has no holder to fence out: its token alone is admitted
	// where fence.Admit admits it, and the ended lease's own write is then stale.
	release(t, kv, l)
	ended := uniqueName(t, "ended")
	if err := kv.Put(ctx, ended, []byte("token only"), bare); err != nil {
		t.Fatalf("Put with a released lease's token and no lease id = %v; want nil", err)
	}
	wantItem(t, kv, ended, []byte("token only"), name, l.Token())
	wantStale(t, "Put by the released holder after a write with its token alone", kv.Put(ctx, ended, []byte("zombie"), l.Fence()), l.Token(), l.Token())
	next := acquire(t, kv, name, longTTL)
	if err := kv.Put(ctx, ended, []byte("next"), next.Fence()); err != nil {
		t.Fatalf("Put with the next grant's fence = %v; want nil", err)
	}
	wantItem(t, kv, ended, []byte("next"), name, next.Token())
}

func issuedDelete(t *testing.T, kv IssuingKV) {
	ctx := testContext(t)
	name, key := uniqueName(t, "lock"), uniqueName(t, "key")
	first := acquire(t, kv, name, longTTL)
	if err := kv.Put(ctx, key, []byte("v1"), first.Fence()); err != nil {
		t.Fatalf("Put = %v", err)
	}
	release(t, kv, first)
	second := acquire(t, kv, name, longTTL)
	if err := kv.Delete(ctx, key, second.Fence()); err != nil {
		t.Fatalf("Delete with a later grant's fence = %v; want nil", err)
	}
	wantItem(t, kv, key, nil, name, second.Token())
	wantStale(t, "Put by the first holder after the Delete", kv.Put(ctx, key, []byte("zombie"), first.Fence()), first.Token(), second.Token())
	wantItem(t, kv, key, nil, name, second.Token())
	wantErrIs(t, "a second Delete", kv.Delete(ctx, key, second.Fence()), fence.ErrNotFound)
	never := uniqueName(t, "never")
	wantErrIs(t, "Delete of a never-written key", kv.Delete(ctx, never, second.Fence()), fence.ErrNotFound)
	_, err := kv.Get(ctx, never)
	wantErrIs(t, "Get after a Delete of a never-written key", err, fence.ErrNotFound)
}

func issuedPurge(t *testing.T, kv IssuingKV) {
	p, ok := kv.(fence.Purger)
	if !ok {
		t.Skip("the store is not a fence.Purger")
	}
	ctx := testContext(t)
	key, fenced := uniqueName(t, "key"), uniqueName(t, "fenced")
	a := acquire(t, kv, uniqueName(t, "squatter"), longTTL)
	if err := kv.Put(ctx, key, []byte("squatted"), a.Fence()); err != nil {
		t.Fatalf("Put = %v", err)
	}
	if err := kv.Fence(ctx, fenced, a.Fence()); err != nil {
		t.Fatalf("Fence = %v", err)
	}
	b := acquire(t, kv, uniqueName(t, "owner"), longTTL)
	wantErrIs(t, "Put under another lock before the purge", kv.Put(ctx, key, []byte("b"), b.Fence()), fence.ErrNamespace)
	for _, k := range []string{key, fenced} {
		if err := p.Purge(ctx, k); err != nil {
			t.Fatalf("Purge(%q) = %v; want nil", k, err)
		}
		_, err := kv.Get(ctx, k)
		wantErrIs(t, "Get after Purge", err, fence.ErrNotFound)
		wantErrIs(t, "a second Purge", p.Purge(ctx, k), fence.ErrNotFound)
		if err := kv.Put(ctx, k, []byte("owned"), b.Fence()); err != nil {
			t.Fatalf("Put under another lock after Purge = %v; want nil", err)
		}
		wantItem(t, kv, k, []byte("owned"), b.Name(), b.Token())
	}
	wantErrIs(t, "Purge of a never-written key", p.Purge(ctx, uniqueName(t, "never")), fence.ErrNotFound)
	wantInvalid(t, "Purge of an empty key", p.Purge(ctx, ""), "key")
}

func issuedPermitOtherLease(t *testing.T, kv IssuingKV) {
	needSemaphores(t, kv)
	ctx := testContext(t)
	name, key := uniqueName(t, "sem"), uniqueName(t, "key")
	a := acquire(t, kv, name, longTTL, fence.WithLimit(3))
	b := acquire(t, kv, name, longTTL, fence.WithLimit(3))
	for _, f := range []fence.Fence{
		{Name: name, Token: a.Token(), LeaseID: b.ID()},
		{Name: name, Token: a.Token(), LeaseID: driver.NewLeaseID()},
	} {
		wantUnissued(t, "Put with a permit's token under another lease id", kv.Put(ctx, key, []byte("forged"), f), name, a.Token(), 0, true)
		_, err := kv.Get(ctx, key)
		wantErrIs(t, "Get of a key only refused writes went to", err, fence.ErrNotFound)
	}
	wantLeaseRequired(t, "Put with a live permit's token and no lease id", kv.Put(ctx, key, []byte("bare"), fence.Fence{Name: name, Token: b.Token()}), name, b.Token())
	_, err := kv.Get(ctx, key)
	wantErrIs(t, "Get of a key only refused writes went to", err, fence.ErrNotFound)
	for _, l := range []*fence.Lease{a, b} {
		if err := kv.Put(ctx, key, []byte(l.ID()), l.Fence()); err != nil {
			t.Fatalf("Put with permit %d's own fence = %v; want nil", l.Slot(), err)
		}
		wantItem(t, kv, key, []byte(l.ID()), name, l.Token())
	}
}
