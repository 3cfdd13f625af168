package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// grantOnce acquires name and releases it, and returns the token it was granted.
func grantOnce(t *testing.T, s *Store, name string) fence.Token {
	t.Helper()
	l, err := s.Acquire(context.Background(), name, time.Minute, fence.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", name, err)
	}
	return l.Token()
}

// Issue 29: a heal used to raise the one counter every name shares, so healing
// jobs/x made other/b's tokens jump too (and a heal to 2^53-1 exhausted every
// name). A heal as large as the bound allows now moves jobs/x alone: other/b's
// next grant is the one it would have had without the heal.
func TestStore_Heal_OfOneName_LeavesOtherNamesNextTokenUnchanged(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	b1 := grantOnce(t, s, "other/b")
	// jobs/x was never granted: its last token is the shared counter's, b1.
	seen := b1 + fence.MaxHealAhead
	if err := s.Heal(ctx, "jobs/x", seen); err != nil {
		t.Fatalf("Heal(jobs/x, last+MaxHealAhead = %d) = %v; want nil", seen, err)
	}
	if info, err := s.Inspect(ctx, "jobs/x"); err != nil || info.LastToken != seen {
		t.Fatalf("Inspect(jobs/x) after the heal = %+v, %v; want LastToken %d", info, err, seen)
	}
	a := grantOnce(t, s, "jobs/x")
	if a <= seen {
		t.Fatalf("jobs/x after Heal(%d): token %d; want above %d (P4)", seen, a, seen)
	}
	if b2 := grantOnce(t, s, "other/b"); b2 != b1+1 {
		t.Fatalf("other/b after jobs/x was healed to %d: token %d; want %d, as without the heal", seen, b2, b1+1)
	}
	if a2 := grantOnce(t, s, "jobs/x"); a2 <= a {
		t.Fatalf("jobs/x's next grant: token %d; want above %d (P1)", a2, a)
	}
	// The shared counter's grants interleave with the floor's without
	// touching it.
	if b3 := grantOnce(t, s, "other/b"); b3 != b1+2 {
		t.Fatalf("other/b's third grant: token %d; want %d", b3, b1+2)
	}
}

// A heal more than fence.MaxHealAhead above the name's last token (the issue's
// 9007199254740991 among them) is refused with a *fence.HealBoundError naming
// the name's last token, and changes nothing: neither that name's next token
// nor any other's.
func TestStore_Heal_BeyondBound_RefusedChangesNothing(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	a1 := grantOnce(t, s, "victim")
	b1 := grantOnce(t, s, "other")
	// victim's last token: the higher of its own (a1) and the shared
	// counter's (b1), the highest it could have been issued.
	for _, seen := range []fence.Token{fence.MaxToken, b1 + fence.MaxHealAhead + 1} {
		err := s.Heal(ctx, "victim", seen)
		var hb *fence.HealBoundError
		if !errors.As(err, &hb) || !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("Heal(victim, %d) = %v; want a *fence.HealBoundError matching ErrInvalid", seen, err)
		}
		if hb.Name != "victim" || hb.Seen != seen || hb.Last != b1 {
			t.Fatalf("Heal(victim, %d): %+v; want Name victim, Seen %d, Last %d", seen, *hb, seen, b1)
		}
	}
	if info, err := s.Inspect(ctx, "victim"); err != nil || info.LastToken != a1 {
		t.Fatalf("Inspect(victim) after the refused heals = %+v, %v; want LastToken %d", info, err, a1)
	}
	if a2 := grantOnce(t, s, "victim"); a2 != b1+1 {
		t.Fatalf("victim after the refused heals: token %d; want %d", a2, b1+1)
	}
	if b2 := grantOnce(t, s, "other"); b2 != b1+2 {
		t.Fatalf("other after the refused heals: token %d; want %d", b2, b1+2)
	}
}

// P1 after a crash: a heal's floor is on disk when Heal returns, so after a
// kill-style stop (the store writes nothing more, as under kill -9) and a
// reopen, the healed name's next token is above seen and above every token it
// was granted from the floor; the other name's tokens keep rising from where
// they were, far below the floor. Four crashes: right after the heal (the floor
// in the lease log only), after grants from the floor, after a clean close and
// reopen (the floor in the bbolt file), and with the healed name held.
func TestStore_Heal_FloorSurvivesCrash_OtherNamesRiseFromWhereTheyWere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	o := &Options{TokenBlock: 4}
	s := mustOpen(t, path, o)
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	b := grantOnce(t, s, "other/b")
	seen := b + fence.MaxHealAhead
	if err := s.Heal(ctx, "jobs/x", seen); err != nil {
		t.Fatal(err)
	}
	a := seen
	crash := func(why string) {
		t.Helper()
		s.abandon()
		s = mustOpen(t, path, o)
		if info, err := s.Inspect(ctx, "jobs/x"); err != nil || info.LastToken < a {
			t.Fatalf("%s: Inspect(jobs/x) after the crash = %+v, %v; want LastToken at least %d", why, info, err, a)
		}
		check := func() {
			t.Helper()
			next := grantOnce(t, s, "jobs/x")
			if next <= a {
				t.Fatalf("%s: jobs/x after the crash: token %d; want above %d (healed to %d; P1)", why, next, a, seen)
			}
			a = next
			nb := grantOnce(t, s, "other/b")
			if nb <= b || nb >= seen {
				t.Fatalf("%s: other/b after the crash: token %d; want above its last %d and far below jobs/x's floor %d", why, nb, b, seen)
			}
			b = nb
		}
		check()
		check()
	}
	crash("crash right after the heal")
	crash("crash after grants from the floor")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, o)
	crash("crash after a clean close and reopen")
	l := mustAcquire(t, s, "jobs/x", 50*time.Millisecond)
	if l.Token() <= a {
		t.Fatalf("jobs/x held: token %d; want above %d", l.Token(), a)
	}
	a = l.Token()
	crash("crash with jobs/x held")
}
