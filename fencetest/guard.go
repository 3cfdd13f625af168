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
// Fence advances a resource without data and fences off older writers; bad keys
// and fences are rejected with ErrInvalid; resources are independent; and under 16
// goroutines writing interleaved tokens the highest token's value wins and no
// lower token is accepted after a higher one was.
//
// After a data-less Fence, the suite checks the value Get returns but not which
// fence it reports with it (the writer's or the newer one): stores differ.
//
// The fences are made up by the suite (unique lock names, fresh lease ids), so a
// guard needs no Locker to be tested.
func TestGuard(t *testing.T, newGuard func(t *testing.T) Guarded, opts ...Option) {
	t.Helper()
	_ = newConfig(opts) // no timing-dependent guard tests yet; options accepted for symmetry
	runCases(t, "Guard", newGuard, []suiteCase[Guarded]{
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
	})
}

// fencer makes fences of one made-up lock name, each token with its own lease id
// unless asked for the same lease.
type fencer struct{ name string }

func newFencer(t *testing.T) fencer { return fencer{name: uniqueName(t, "lock")} }

func (fc fencer) at(tok fence.Token) fence.Fence {
	return fence.Fence{Name: fc.name, Token: tok, LeaseID: driver.NewLeaseID()}
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

func guardSeveralWritesOneLease(t *testing.T, g Guarded) {
	fc := newFencer(t)
	key := uniqueName(t, "key")
	f := fc.at(5)
	for i := 1; i <= 3; i++ {
		mustPut(t, g, key, fmt.Sprintf("v%d", i), f)
	}
	if err := g.Fence(testContext(t), key, f); err != nil {
		t.Fatalf("Fence with the lease's own fence after its writes = %v; want nil", err)
	}
	mustPut(t, g, key, "v4", f)
	wantValue(t, g, key, "v4", 5)
	if it, _ := g.Get(testContext(t), key); it.Fence.Name != f.Name {
		t.Fatalf("Get(%q).Fence.Name = %q; want %q", key, it.Fence.Name, f.Name)
	}
}

func guardHigherAccepted(t *testing.T, g Guarded) {
	fc := newFencer(t)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "three", fc.at(3))
	mustPut(t, g, key, "hundred", fc.at(100)) // tokens may skip values
	mustPut(t, g, key, "max", fc.at(fence.MaxToken))
	wantValue(t, g, key, "max", fence.MaxToken)
}

func guardLowerRejected(t *testing.T, g Guarded) {
	fc := newFencer(t)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "ten", fc.at(10))
	ctx := testContext(t)
	wantStale(t, "Put with token 7 after 10", g.Put(ctx, key, []byte("seven"), fc.at(7)), 7, 10)
	wantStale(t, "Put with token 1 after 10", g.Put(ctx, key, []byte("one"), fc.at(1)), 1, 10)
	wantValue(t, g, key, "ten", 10)
}

func guardEqualOtherLease(t *testing.T, g Guarded) {
	fc := newFencer(t)
	key := uniqueName(t, "key")
	mine := fc.at(10)
	mustPut(t, g, key, "mine", mine)
	ctx := testContext(t)
	other := fc.at(10) // same token, another lease: a regressed counter (P2)
	wantStale(t, "Put with an equal token under another lease", g.Put(ctx, key, []byte("other"), other), 10, 10)
	noLease := fence.Fence{Name: fc.name, Token: 10}
	wantStale(t, "Put with an equal token and no lease id", g.Put(ctx, key, []byte("nolease"), noLease), 10, 10)
	wantValue(t, g, key, "mine", 10)
	mustPut(t, g, key, "mine again", mine)
}

func guardOtherNamespace(t *testing.T, g Guarded) {
	a, b := newFencer(t), newFencer(t)
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
	wantValue(t, g, key, "a", 5)
}

func guardRejectedLeavesValue(t *testing.T, g Guarded) {
	fc := newFencer(t)
	key := uniqueName(t, "key")
	f := fc.at(8)
	mustPut(t, g, key, "good", f)
	for _, bad := range []fence.Fence{fc.at(7), fc.at(8), newFencer(t).at(9)} {
		if err := g.Put(testContext(t), key, []byte("bad"), bad); err == nil {
			t.Fatalf("Put with %v after token 8 = nil; want it rejected", bad)
		}
		wantValue(t, g, key, "good", 8)
	}
	// The rejected writes did not move the fence either: token 8's lease still writes.
	mustPut(t, g, key, "good 2", f)
	wantValue(t, g, key, "good 2", 8)
}

func guardFenceAdvances(t *testing.T, g Guarded) {
	ctx := testContext(t)
	fc := newFencer(t)
	key := uniqueName(t, "key")
	mustPut(t, g, key, "old", fc.at(3))
	f5 := fc.at(5)
	if err := g.Fence(ctx, key, f5); err != nil {
		t.Fatalf("Fence(token 5) after token 3 = %v; want nil", err)
	}
	wantOnlyValue(t, g, key, "old") // Fence writes no data
	// The paused holder of token 4 is fenced off before 5's first write.
	wantStale(t, "Put with token 4 after Fence(5)", g.Put(ctx, key, []byte("zombie"), fc.at(4)), 4, 5)
	wantOnlyValue(t, g, key, "old")
	mustPut(t, g, key, "new", f5)
	wantValue(t, g, key, "new", 5)

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
	wantStale(t, "Put with token 2 on a key fenced at 9", g.Put(ctx, fresh, []byte("x"), fc.at(2)), 2, 9)
}

func guardFenceRejected(t *testing.T, g Guarded) {
	ctx := testContext(t)
	fc := newFencer(t)
	key := uniqueName(t, "key")
	f := fc.at(20)
	if err := g.Fence(ctx, key, f); err != nil {
		t.Fatalf("Fence(20) = %v", err)
	}
	wantStale(t, "Fence(19) after Fence(20)", g.Fence(ctx, key, fc.at(19)), 19, 20)
	wantStale(t, "Fence(20) under another lease", g.Fence(ctx, key, fc.at(20)), 20, 20)
	if err := g.Fence(ctx, key, f); err != nil {
		t.Fatalf("Fence(20) again under the same lease = %v; want nil", err)
	}
	if err := g.Fence(ctx, key, fc.at(21)); err != nil {
		t.Fatalf("Fence(21) = %v; want nil", err)
	}
	wantStale(t, "Put with token 20 after Fence(21)", g.Put(ctx, key, []byte("x"), f), 20, 21)
}

func guardGetNotFound(t *testing.T, g Guarded) {
	_, err := g.Get(testContext(t), uniqueName(t, "never"))
	wantErrIs(t, "Get of a never-written key", err, fence.ErrNotFound)
}

func guardValuesRoundTrip(t *testing.T, g Guarded) {
	fc := newFencer(t)
	ctx := testContext(t)
	values := map[string][]byte{
		"empty":  {},
		"binary": {0, 1, 2, 0xff, 0xfe, 0, '\n', '\r'},
		"utf8":   []byte("ünïcødé ✓"),
		"large":  bytes.Repeat([]byte("0123456789abcdef"), 4096), // 64 KiB
	}
	tok := fence.Token(1)
	for name, v := range values {
		key := uniqueName(t, name)
		if err := g.Put(ctx, key, v, fc.at(tok)); err != nil {
			t.Fatalf("Put(%s value, %d bytes) = %v; want nil", name, len(v), err)
		}
		it, err := g.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get after Put of the %s value = %v", name, err)
		}
		if !bytes.Equal(it.Value, v) {
			t.Fatalf("Get returned %d bytes %q...; want the %s value of %d bytes", len(it.Value), truncate(it.Value), name, len(v))
		}
		tok++
	}
	// The guard keeps its own copy: changing the caller's buffer changes nothing.
	key := uniqueName(t, "copy")
	buf := []byte("abc")
	if err := g.Put(ctx, key, buf, fc.at(tok)); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	wantValue(t, g, key, "abc", tok)
}

func truncate(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

func guardBadInput(t *testing.T, g Guarded) {
	ctx := testContext(t)
	fc := newFencer(t)
	key := uniqueName(t, "key")
	good := fc.at(1)
	badFences := []struct {
		desc, field string
		f           fence.Fence
	}{
		{"zero token", "token", fence.Fence{Name: fc.name, Token: 0, LeaseID: good.LeaseID}},
		{"token above MaxToken", "token", fence.Fence{Name: fc.name, Token: fence.MaxToken + 1, LeaseID: good.LeaseID}},
		{"empty lock name", "name", fence.Fence{Name: "", Token: 1, LeaseID: good.LeaseID}},
		{"lock name with a newline", "name", fence.Fence{Name: "a\nb", Token: 1, LeaseID: good.LeaseID}},
		{"lease id with a space", "lease", fence.Fence{Name: fc.name, Token: 1, LeaseID: "bad lease"}},
	}
	for _, bf := range badFences {
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

func guardResourcesIndependent(t *testing.T, g Guarded) {
	ctx := testContext(t)
	fc := newFencer(t) // one lock protecting two resources
	k1, k2 := uniqueName(t, "one"), uniqueName(t, "two")
	mustPut(t, g, k1, "k1@10", fc.at(10))
	mustPut(t, g, k2, "k2@5", fc.at(5)) // k1's highest does not apply to k2
	if err := g.Fence(ctx, k1, fc.at(20)); err != nil {
		t.Fatal(err)
	}
	mustPut(t, g, k2, "k2@6", fc.at(6))
	wantOnlyValue(t, g, k1, "k1@10")
	wantValue(t, g, k2, "k2@6", 6)
	// Another lock may fence another resource.
	k3 := uniqueName(t, "three")
	mustPut(t, g, k3, "k3@1", newFencer(t).at(1))
	wantValue(t, g, k3, "k3@1", 1)
}

// guardConcurrent has 16 goroutines write interleaved tokens to one key. It checks
// the register's history: an accepted write whose call began after another
// accepted write's call returned must carry a higher token, a rejection carries a
// highest at least its token, and the final value is the highest token's.
func guardConcurrent(t *testing.T, g Guarded) {
	const workers, perWorker = 16, 8
	ctx := testContext(t)
	fc := newFencer(t)
	key := uniqueName(t, "key")

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
			tok := fence.Token(w + 1 + i*workers)
			start := clock.Add(1)
			err := g.Put(ctx, key, []byte(fmt.Sprintf("v%d", tok)), fc.at(tok))
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
	const top = fence.Token(workers * perWorker)
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
