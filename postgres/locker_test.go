package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
)

func TestLocker_HeldError_CarriesHoldersRemainingTTL(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	lease := mustAcquire(t, ctx, l, name, 10*time.Second)
	defer lease.Release(ctx)
	_, err := fence.TryAcquire(ctx, l, name, time.Second)
	var held *fence.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire of a held lock: error = %v, want a *fence.HeldError", err)
	}
	if held.ExpiresIn <= 8*time.Second || held.ExpiresIn > 10*time.Second {
		t.Fatalf("HeldError.ExpiresIn = %v, want in (8s, 10s] for a 10s lease just granted", held.ExpiresIn)
	}
}

func TestLocker_Wait_WokenByNotifyNotByPolling(t *testing.T) {
	for _, end := range []struct {
		how string
		end func(*testing.T, context.Context, *fence.Lease) error
	}{
		{"Release", func(_ *testing.T, ctx context.Context, holder *fence.Lease) error { return holder.Release(ctx) }},
		{"RevokeByAnotherLocker", func(t *testing.T, ctx context.Context, holder *fence.Lease) error {
			return openLocker(t, sharedPool, nil).Revoke(ctx, holder.Name())
		}},
	} {
		t.Run(end.how, func(t *testing.T) {
			ctx, l, name := lockTest(t, &postgres.LockerOptions{PollInterval: time.Hour})
			holder := mustAcquire(t, ctx, l, name, time.Minute)
			got := acquireLater(t, ctx, sharedPool, l, name, 30*time.Second)
			ended := time.Now()
			wantOK(t, end.how, end.end(t, ctx, holder))
			select {
			case w := <-got:
				wantOK(t, "waiter Acquire", w.err)
				t.Logf("handoff after %s: %v", end.how, time.Since(ended))
				defer w.lease.Release(ctx)
				if w.lease.Token() <= holder.Token() {
					t.Fatalf("waiter token %d, want above the holder's %d", w.lease.Token(), holder.Token())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter not woken within 10s of the %s (poll interval 1h, holder TTL 1m): NOTIFY did not wake it", end.how)
			}
		})
	}
}

func TestLocker_Revoke_ExpiredOrFreeLock_ErrNotHeldNothingChanged(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	err := l.Revoke(ctx, name)
	wantIs(t, "Revoke of a lock never acquired", err, fence.ErrNotHeld)
	if want := `postgres: revoke "` + name + `": `; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Revoke error = %q, want it to start %q", err, want)
	}
	lease := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner("expired"))
	_, err = sharedPool.Exec(ctx, `UPDATE fence_locks SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, name)
	wantOK(t, "expire the lease by hand", err)
	wantIs(t, "Revoke of an expired lease", l.Revoke(ctx, name), fence.ErrNotHeld)
	var (
		tok   int64
		owner string
	)
	wantOK(t, "read the row", sharedPool.QueryRow(ctx, `SELECT token, owner FROM fence_locks WHERE name = $1`, name).Scan(&tok, &owner))
	if fence.Token(tok) != lease.Token() || owner != "expired" {
		t.Fatalf("row after a refused Revoke: token %d, owner %q; want %d, %q (untouched)", tok, owner, lease.Token(), "expired")
	}
	wantIs(t, "Revoke with a bad name", l.Revoke(ctx, "bad\nname"), fence.ErrInvalid)
}

func TestLocker_HandEditedRow_NullOwner_InspectErrCorrupt(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	l := lockerOn(t, pool, nil)
	lease := mustAcquire(t, ctx, l, "job", time.Minute, fence.WithOwner("me"))
	_, err := pool.Exec(ctx, `ALTER TABLE fence_locks ALTER COLUMN owner DROP NOT NULL; UPDATE fence_locks SET owner = NULL`)
	wantOK(t, "set owner NULL by hand", err)
	_, err = l.Inspect(ctx, "job")
	wantIs(t, "Inspect with a NULL owner", err, postgres.ErrCorrupt)
	_, err = l.List(ctx, fence.ListOptions{})
	wantIs(t, "List with a NULL owner", err, postgres.ErrCorrupt)
	wantOK(t, "the holder's Renew (the owner is only a label)", lease.Renew(ctx, time.Minute))
}

func TestLocker_HandEditedRow_LowerTokenOrDeleteRefusedByTrigger(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	cycle(t, ctx, l, name, 3, 0)
	_, err := sharedPool.Exec(ctx, `UPDATE fence_locks SET token = 1 WHERE name = $1`, name)
	if err == nil || !strings.Contains(err.Error(), "never go down") {
		t.Fatalf("lowering a token by hand: error = %v, want the trigger's refusal", err)
	}
	_, err = sharedPool.Exec(ctx, `DELETE FROM fence_locks WHERE name = $1`, name)
	if err == nil || !strings.Contains(err.Error(), "never go down or be deleted") {
		t.Fatalf("deleting a lock row by hand: error = %v, want the trigger's refusal", err)
	}
	lease := mustAcquire(t, ctx, l, name, time.Minute)
	defer lease.Release(ctx)
	if lease.Token() != 4 {
		t.Fatalf("token after three grants = %d, want 4", lease.Token())
	}
}

func TestLocker_HandEditedRow_NullOrInfiniteExpiry_ErrCorruptNeverGranted(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	l := lockerOn(t, pool, nil)
	lease := mustAcquire(t, ctx, l, "job", time.Minute)
	_, err := pool.Exec(ctx, `ALTER TABLE fence_locks ALTER COLUMN expires_at DROP NOT NULL`)
	wantOK(t, "drop NOT NULL", err)

	for _, edit := range []string{"NULL", "'infinity'", "now() + interval '10 years'"} {
		_, err = pool.Exec(ctx, `UPDATE fence_locks SET expires_at = `+edit+` WHERE name = 'job'`)
		wantOK(t, "set expires_at to "+edit, err)
		_, err = fence.TryAcquire(ctx, l, "job", time.Second)
		wantIs(t, "TryAcquire with expires_at "+edit, err, postgres.ErrCorrupt)
		_, err = l.Acquire(ctx, "job", time.Second, fence.WithWait(50*time.Millisecond))
		wantIs(t, "waiting Acquire with expires_at "+edit, err, postgres.ErrCorrupt)
		_, err = l.Inspect(ctx, "job")
		wantIs(t, "Inspect with expires_at "+edit, err, postgres.ErrCorrupt)
	}
	var tok int64
	wantOK(t, "read token", pool.QueryRow(ctx, `SELECT token FROM fence_locks WHERE name = 'job'`).Scan(&tok))
	if tok != 1 {
		t.Fatalf("token = %d after refused acquires, want 1: nothing granted", tok)
	}
	_, err = pool.Exec(ctx, `UPDATE fence_locks SET expires_at = NULL WHERE name = 'job'`)
	wantOK(t, "set expires_at NULL", err)
	err = lease.Renew(ctx, time.Minute)
	wantIs(t, "holder's Renew after its row lost its expiry", err, fence.ErrNotHeld)
	select {
	case <-lease.Done():
	default:
		t.Fatal("lease Done still open after Renew returned ErrNotHeld")
	}
}

func TestLocker_TokenAtMax_ErrTokenExhausted(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	cycle(t, ctx, l, name, 1, 0)
	_, err := sharedPool.Exec(ctx, `UPDATE fence_locks SET token = $2 WHERE name = $1`, name, int64(fence.MaxToken))
	wantOK(t, "raise the counter to MaxToken", err)
	_, err = fence.TryAcquire(ctx, l, name, time.Second)
	wantIs(t, "TryAcquire at MaxToken", err, fence.ErrTokenExhausted)
	info, err := l.Inspect(ctx, name)
	wantOK(t, "Inspect", err)
	if info.Held || info.LastToken != fence.MaxToken {
		t.Fatalf("Inspect = %+v, want not held with LastToken %d", info, fence.MaxToken)
	}
}

func TestLocker_Close_WaitersAndCallsGetErrClosed(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	lease := mustAcquire(t, ctx, l, name, time.Minute)
	defer func() { _ = postgres.NewLocker(sharedPool, nil).Release(ctx, name, lease.ID()) }()
	got := acquireLater(t, ctx, sharedPool, l, name, fence.WaitForever)
	wantOK(t, "Close", l.Close())
	wantIs(t, "waiting Acquire after Close", (<-got).err, fence.ErrClosed)
	_, err := l.Acquire(ctx, uniq(t, "other"), time.Second)
	wantIs(t, "Acquire after Close", err, fence.ErrClosed)
	wantIs(t, "Renew after Close", l.Renew(ctx, name, lease.ID(), time.Second), fence.ErrClosed)
	wantIs(t, "Revoke after Close", l.Revoke(ctx, name), fence.ErrClosed)
	wantOK(t, "second Close", l.Close())
}

func TestLocker_List_PrefixInByteOrderWithLimit(t *testing.T) {
	ctx, l, prefix := lockTest(t, nil)
	prefix += "/"
	for _, n := range []string{"b", "a", "c", "é"} {
		lease := mustAcquire(t, ctx, l, prefix+n, time.Minute)
		if n == "b" {
			wantOK(t, "Release b", lease.Release(ctx))
		} else {
			defer lease.Release(ctx)
		}
	}
	mustAcquire(t, ctx, l, prefix[:len(prefix)-1]+"x", time.Minute) // shares all but the last byte
	infos, err := l.List(ctx, fence.ListOptions{Prefix: prefix, All: true})
	wantOK(t, "List", err)
	var got []string
	for _, in := range infos {
		got = append(got, strings.TrimPrefix(in.Name, prefix)+map[bool]string{true: "+", false: "-"}[in.Held])
	}
	if strings.Join(got, " ") != "a+ b- c+ é+" {
		t.Fatalf("List = %v, want [a+ b- c+ é+] (byte order, held marked +)", got)
	}
	infos, err = l.List(ctx, fence.ListOptions{Prefix: prefix, Limit: 2})
	wantOK(t, "List held", err)
	got = got[:0]
	for _, in := range infos {
		got = append(got, strings.TrimPrefix(in.Name, prefix)+map[bool]string{true: "+", false: "-"}[in.Held])
	}
	if strings.Join(got, " ") != "a+ c+" {
		t.Fatalf("List held, limit 2 = %v, want [a+ c+] (the released b left out, not counted)", got)
	}
	infos, err = l.List(ctx, fence.ListOptions{Prefix: prefix, Limit: 2, All: true})
	wantOK(t, "List with limit", err)
	if len(infos) != 2 {
		t.Fatalf("List with limit 2 returned %d locks", len(infos))
	}
}

func TestLocker_MissingTableOrBadOptions_ClearErrors(t *testing.T) {
	ctx := ctxT(t)
	l := postgres.NewLocker(sharedPool, &postgres.LockerOptions{Table: "no_such_locks"})
	defer l.Close()
	_, err := l.Acquire(ctx, "x", time.Second)
	wantIs(t, "Acquire on a missing table", err, postgres.ErrSchema)
	for _, table := range []string{"bad name", "a.b.c", strings.Repeat("t", 60)} {
		_, err := postgres.NewLocker(sharedPool, &postgres.LockerOptions{Table: table}).Acquire(ctx, "x", time.Second)
		wantIs(t, "Acquire with table "+table, err, fence.ErrInvalid)
	}
	_, err = postgres.NewLocker(nil, nil).Acquire(ctx, "x", time.Second)
	wantIs(t, "Acquire on a nil pool", err, fence.ErrInvalid)
}

func TestLocker_Wait_WokenAtHoldersExpiryWithoutReleaseOrPolling(t *testing.T) {
	ctx, l, name := lockTest(t, &postgres.LockerOptions{PollInterval: time.Hour})
	holder := mustAcquire(t, ctx, l, name, 300*time.Millisecond)
	start := time.Now()
	waiter := mustAcquire(t, ctx, l, name, time.Minute, fence.WithWait(20*time.Second)) // the holder never releases
	defer waiter.Release(ctx)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("waiter got the lock after %v; want it soon after the holder's 300ms lease ended (poll interval 1h)", waited)
	}
	if waiter.Token() <= holder.Token() {
		t.Fatalf("waiter token %d, want above the expired holder's %d", waiter.Token(), holder.Token())
	}
}
