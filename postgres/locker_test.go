package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/testserv"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockerOn returns a Locker on pool with its schema created, closed when t ends.
func lockerOn(t testing.TB, pool *pgxpool.Pool, opts *postgres.LockerOptions) *postgres.Locker {
	t.Helper()
	l := postgres.NewLocker(pool, opts)
	wantOK(t, "CreateSchema", l.CreateSchema(ctxT(t)))
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLocker_HeldError_CarriesHoldersRemainingTTL(t *testing.T) {
	ctx := ctxT(t)
	l := lockerOn(t, sharedPool, nil)
	name := uniq(t, "lock")
	lease, err := l.Acquire(ctx, name, 10*time.Second)
	wantOK(t, "Acquire", err)
	defer lease.Release(ctx)
	_, err = fence.TryAcquire(ctx, l, name, time.Second)
	var held *fence.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire of a held lock: error = %v, want a *fence.HeldError", err)
	}
	if held.ExpiresIn <= 8*time.Second || held.ExpiresIn > 10*time.Second {
		t.Fatalf("HeldError.ExpiresIn = %v, want in (8s, 10s] for a 10s lease just granted", held.ExpiresIn)
	}
}

func TestLocker_Wait_WokenByNotifyNotByPolling(t *testing.T) {
	ctx := ctxT(t)
	l := lockerOn(t, sharedPool, &postgres.LockerOptions{PollInterval: time.Hour})
	name := uniq(t, "lock")
	holder, err := l.Acquire(ctx, name, time.Minute)
	wantOK(t, "holder Acquire", err)

	got := make(chan error, 1)
	var waiter *fence.Lease
	go func() {
		var err error
		waiter, err = l.Acquire(ctx, name, time.Minute, fence.WithWait(30*time.Second))
		got <- err
	}()
	waitForListenerOn(t, ctx, sharedPool, "fence_locks")
	released := time.Now()
	wantOK(t, "holder Release", holder.Release(ctx))
	select {
	case err := <-got:
		wantOK(t, "waiter Acquire", err)
		t.Logf("handoff after release: %v", time.Since(released))
		defer waiter.Release(ctx)
		if waiter.Token() <= holder.Token() {
			t.Fatalf("waiter token %d, want above the holder's %d", waiter.Token(), holder.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken within 10s of the release (poll interval 1h, holder TTL 1m): NOTIFY did not wake it")
	}
}

func TestLocker_HandEditedRow_LowerTokenOrDeleteRefusedByTrigger(t *testing.T) {
	ctx := ctxT(t)
	l := lockerOn(t, sharedPool, nil)
	name := uniq(t, "lock")
	for i := 0; i < 3; i++ {
		lease, err := l.Acquire(ctx, name, time.Minute)
		wantOK(t, "Acquire", err)
		wantOK(t, "Release", lease.Release(ctx))
	}
	_, err := sharedPool.Exec(ctx, `UPDATE fence_locks SET token = 1 WHERE name = $1`, name)
	if err == nil || !strings.Contains(err.Error(), "never go down") {
		t.Fatalf("lowering a token by hand: error = %v, want the trigger's refusal", err)
	}
	_, err = sharedPool.Exec(ctx, `DELETE FROM fence_locks WHERE name = $1`, name)
	if err == nil || !strings.Contains(err.Error(), "never go down or be deleted") {
		t.Fatalf("deleting a lock row by hand: error = %v, want the trigger's refusal", err)
	}
	lease, err := l.Acquire(ctx, name, time.Minute)
	wantOK(t, "Acquire after the refused edits", err)
	defer lease.Release(ctx)
	if lease.Token() != 4 {
		t.Fatalf("token after three grants = %d, want 4", lease.Token())
	}
}

func TestLocker_HandEditedRow_NullOrInfiniteExpiry_ErrCorruptNeverGranted(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	l := lockerOn(t, pool, nil)
	lease, err := l.Acquire(ctx, "job", time.Minute)
	wantOK(t, "Acquire", err)
	_, err = pool.Exec(ctx, `ALTER TABLE fence_locks ALTER COLUMN expires_at DROP NOT NULL`)
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
	ctx := ctxT(t)
	l := lockerOn(t, sharedPool, nil)
	name := uniq(t, "lock")
	lease, err := l.Acquire(ctx, name, time.Minute)
	wantOK(t, "Acquire", err)
	wantOK(t, "Release", lease.Release(ctx))
	_, err = sharedPool.Exec(ctx, `UPDATE fence_locks SET token = $2 WHERE name = $1`, name, int64(fence.MaxToken))
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
	ctx := ctxT(t)
	l := lockerOn(t, sharedPool, nil)
	name := uniq(t, "lock")
	lease, err := l.Acquire(ctx, name, time.Minute)
	wantOK(t, "Acquire", err)
	defer func() { _ = postgres.NewLocker(sharedPool, nil).Release(ctx, name, lease.ID()) }()
	got := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(fence.WaitForever))
		got <- err
	}()
	waitForListenerOn(t, ctx, sharedPool, "fence_locks")
	wantOK(t, "Close", l.Close())
	wantIs(t, "waiting Acquire after Close", <-got, fence.ErrClosed)
	_, err = l.Acquire(ctx, uniq(t, "other"), time.Second)
	wantIs(t, "Acquire after Close", err, fence.ErrClosed)
	wantIs(t, "Renew after Close", l.Renew(ctx, name, lease.ID(), time.Second), fence.ErrClosed)
	wantOK(t, "second Close", l.Close())
}

func TestLocker_List_PrefixInByteOrderWithLimit(t *testing.T) {
	ctx := ctxT(t)
	l := lockerOn(t, sharedPool, nil)
	prefix := uniq(t, "p") + "/"
	for _, n := range []string{"b", "a", "c", "é"} {
		lease, err := l.Acquire(ctx, prefix+n, time.Minute)
		wantOK(t, "Acquire "+n, err)
		if n == "b" {
			wantOK(t, "Release b", lease.Release(ctx))
		} else {
			defer lease.Release(ctx)
		}
	}
	_, err := l.Acquire(ctx, prefix[:len(prefix)-1]+"x", time.Minute) // shares all but the last byte
	wantOK(t, "Acquire outside the prefix", err)
	infos, err := l.List(ctx, prefix, 0)
	wantOK(t, "List", err)
	var got []string
	for _, in := range infos {
		got = append(got, strings.TrimPrefix(in.Name, prefix)+map[bool]string{true: "+", false: "-"}[in.Held])
	}
	if strings.Join(got, " ") != "a+ b- c+ é+" {
		t.Fatalf("List = %v, want [a+ b- c+ é+] (byte order, held marked +)", got)
	}
	infos, err = l.List(ctx, prefix, 2)
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

// TestLocker_PostgresKilledAndRestarted_KeepsCounters kills PostgreSQL in the
// middle of a test: calls fail with ErrUnavailable, the holder's Done closes, and
// after the restart tokens continue above every token granted before.
func TestLocker_PostgresKilledAndRestarted_KeepsCounters(t *testing.T) {
	testserv.SkipIfShort(t)
	ctx := ctxT(t)
	pool := freshDB(t)
	l := lockerOn(t, pool, &postgres.LockerOptions{PollInterval: time.Hour})
	var last fence.Token
	for i := 0; i < 3; i++ {
		lease, err := l.Acquire(ctx, "job", time.Minute)
		wantOK(t, "Acquire", err)
		last = lease.Token()
		wantOK(t, "Release", lease.Release(ctx))
	}
	holder, err := l.Acquire(ctx, "job", 500*time.Millisecond, fence.WithAutoRenew())
	wantOK(t, "Acquire with auto-renew", err)
	last = holder.Token()

	server.Kill()
	restarted := false
	defer func() {
		if !restarted {
			if err := server.Restart(); err != nil {
				t.Errorf("restart PostgreSQL: %v", err)
			}
		}
		sharedPool.Reset() // its connections died with the server
	}()
	_, err = l.Acquire(ctx, "other", time.Second)
	wantIs(t, "Acquire while PostgreSQL is down", err, fence.ErrUnavailable)
	select {
	case <-holder.Done():
		wantIs(t, "holder's Err after PostgreSQL died", holder.Err(), fence.ErrNotHeld)
	case <-time.After(10 * time.Second):
		t.Fatal("holder's Done still open 10s after PostgreSQL died (TTL 500ms)")
	}

	wantOK(t, "restart PostgreSQL", server.Restart())
	restarted = true
	var lease *fence.Lease
	for attempt := 1; ; attempt++ { // the pool's first use after the crash may hit a dead connection
		lease, err = l.Acquire(ctx, "job", time.Minute)
		if err == nil || !errors.Is(err, fence.ErrUnavailable) || attempt == 3 {
			break
		}
	}
	wantOK(t, "Acquire after restart", err)
	if lease.Token() <= last {
		t.Fatalf("token after restart = %d, want above %d, the last before the crash", lease.Token(), last)
	}

	// The listener reconnects: a waiter is woken by a release, not by its 1h poll.
	waiterDone := make(chan error, 1)
	go func() {
		w, err := l.Acquire(ctx, "job", time.Minute, fence.WithWait(30*time.Second))
		if err == nil {
			last = w.Token()
			err = w.Release(ctx)
		}
		waiterDone <- err
	}()
	waitForListenerOn(t, ctx, pool, "fence_locks")
	wantOK(t, "Release", lease.Release(ctx))
	select {
	case err := <-waiterDone:
		wantOK(t, "waiter after restart", err)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken within 10s after the restart: the listener did not reconnect")
	}
	if last <= lease.Token() {
		t.Fatalf("waiter token %d, want above %d", last, lease.Token())
	}
}

// waitForListenerOn is waitForListener for a connection of pool's database.
func waitForListenerOn(t testing.TB, ctx context.Context, pool *pgxpool.Pool, channel string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = $1`, `LISTEN "`+channel+`"`).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no LISTEN connection within 10s (last error %v)", err)
		}
		time.Sleep(5 * time.Millisecond) // polling the server: no channel can tell us
	}
}

func TestLocker_Wait_WokenAtHoldersExpiryWithoutReleaseOrPolling(t *testing.T) {
	ctx := ctxT(t)
	l := lockerOn(t, sharedPool, &postgres.LockerOptions{PollInterval: time.Hour})
	name := uniq(t, "lock")
	holder, err := l.Acquire(ctx, name, 300*time.Millisecond)
	wantOK(t, "holder Acquire", err)
	start := time.Now()
	waiter, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(20*time.Second))
	wantOK(t, "waiter Acquire (the holder never releases)", err)
	defer waiter.Release(ctx)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("waiter got the lock after %v; want it soon after the holder's 300ms lease ended (poll interval 1h)", waited)
	}
	if waiter.Token() <= holder.Token() {
		t.Fatalf("waiter token %d, want above the expired holder's %d", waiter.Token(), holder.Token())
	}
}
