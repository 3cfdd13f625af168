package postgres_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/postgres"
)

// TestLocker_SynchronousCommitOff_KillNine_TokensRiseLeaseStaysHeld runs the
// Locker on a database whose sessions default to synchronous_commit = off (as a
// per-database speed setting would), pauses PostgreSQL's WAL writer so that
// asynchronous commits stay in memory, kills the server with SIGKILL and restarts
// it. Every acquire (with its owner), renew, release and revoke the Locker
// acknowledged survives: tokens keep rising, a held lease stays held, renewable
// by its holder, and a revoked one stays ended. A plain
// statement committed asynchronously just before the kill is lost: the control
// that shows the kill would have caught a Locker that commits asynchronously.
func TestLocker_SynchronousCommitOff_KillNine_TokensRiseLeaseStaysHeld(t *testing.T) {
	servertest.SkipIfShort(t)
	srv := servertest.Postgres(t) // its own server: this test kills it
	dsn := srv.CreateDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	wantOK(t, "ALTER DATABASE ... SET synchronous_commit = off",
		srv.Exec("postgres", `ALTER DATABASE "`+db+`" SET synchronous_commit = off`))
	ctx := ctxT(t)
	pool := newPool(t, dsn)
	var setting string
	wantOK(t, "SHOW synchronous_commit", pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&setting))
	if setting != "off" {
		t.Fatalf("session synchronous_commit = %q, want off", setting)
	}
	_, err = pool.Exec(ctx, `CREATE TABLE control (id int PRIMARY KEY, n bigint NOT NULL); INSERT INTO control VALUES (1, 0)`)
	wantOK(t, "create the control table", err)

	l := lockerOn(t, pool, &postgres.LockerOptions{PollInterval: time.Hour})
	// The set-up is on disk whatever follows, so that a Locker that commits
	// asynchronously fails below on its tokens and leases, not on a lost table.
	_, err = pool.Exec(ctx, "CHECKPOINT")
	wantOK(t, "CHECKPOINT", err)
	last := cycle(t, ctx, l, "job", 3, 0)
	held := mustAcquire(t, ctx, l, "held", time.Minute)
	revoked := mustAcquire(t, ctx, l, "revoked", time.Minute)

	resume, err := srv.PauseWALWriter()
	wantOK(t, "pause the WAL writer", err)
	t.Cleanup(resume) // harmless after the kill
	last = cycle(t, ctx, l, "job", 3, last)
	heldLast := mustAcquire(t, ctx, l, "held-late", time.Minute, fence.WithOwner("late holder"))
	wantOK(t, "Renew(held)", held.Renew(ctx, 2*time.Minute))
	wantOK(t, "Revoke(revoked)", l.Revoke(ctx, "revoked"))
	// The control: acknowledged, committed asynchronously, after the Locker's
	// last commit (a synchronous commit would write it too).
	_, err = pool.Exec(ctx, `UPDATE control SET n = n + 1 WHERE id = 1`)
	wantOK(t, "control UPDATE", err)

	srv.Kill()
	killed := time.Now()
	wantOK(t, "restart PostgreSQL after SIGKILL", srv.Restart())
	t.Logf("PostgreSQL kill -9 to accepting connections again: %v", time.Since(killed).Round(time.Millisecond))
	pool.Reset()

	var n int64
	err = retryDead(func() error { return pool.QueryRow(ctx, `SELECT n FROM control WHERE id = 1`).Scan(&n) })
	wantOK(t, "read the control row", err)
	if n != 0 {
		t.Fatalf("control: the asynchronous commit survived the kill (n = %d): this run could not tell a durable Locker from one that is not", n)
	}

	var lease *fence.Lease
	err = retryDead(func() (err error) { lease, err = l.Acquire(ctx, "job", time.Minute); return err })
	wantOK(t, "Acquire(job) after the restart", err)
	if lease.Token() <= last || lease.Token() <= heldLast.Token() {
		t.Fatalf("token after the kill = %d, want above %d and %d (granted before it)", lease.Token(), last, heldLast.Token())
	}
	for _, h := range []*fence.Lease{held, heldLast} {
		info, err := l.Inspect(ctx, h.Name())
		wantOK(t, "Inspect", err)
		if !info.Held || info.Token != h.Token() || info.Owner != h.Owner() {
			t.Fatalf("Inspect(%q) after the kill = %+v, want held by token %d, owner %q", h.Name(), info, h.Token(), h.Owner())
		}
		_, err = l.Acquire(ctx, h.Name(), time.Second)
		wantIs(t, "Acquire of a lease held across the kill", err, fence.ErrNotAcquired)
	}
	if info, _ := l.Inspect(ctx, "held"); info.ExpiresIn < time.Minute {
		t.Fatalf("held expires in %v after the kill, want over 1m (its renewal to 2m was lost)", info.ExpiresIn)
	}
	wantOK(t, "Renew(held) by its holder after the kill", l.Renew(ctx, "held", held.ID(), time.Minute))
	if info, _ := l.Inspect(ctx, "revoked"); info.Held {
		t.Fatalf("Inspect(revoked) after the kill = %+v; the revoke was lost", info)
	}
	wantIs(t, "Renew(revoked) by its holder after the kill", l.Renew(ctx, "revoked", revoked.ID(), time.Minute), fence.ErrNotHeld)
	wantOK(t, "Release(held-late) by its holder after the kill", l.Release(ctx, "held-late", heldLast.ID()))
}

// TestLocker_PostgresKilledAndRestarted_KeepsCounters kills PostgreSQL in the
// middle of a test: calls fail with ErrUnavailable, the holder's Done closes, and
// after the restart tokens continue above every token granted before.
func TestLocker_PostgresKilledAndRestarted_KeepsCounters(t *testing.T) {
	servertest.SkipIfShort(t)
	ctx := ctxT(t)
	pool := freshDB(t)
	l := lockerOn(t, pool, &postgres.LockerOptions{PollInterval: time.Hour})
	cycle(t, ctx, l, "job", 3, 0)
	holder := mustAcquire(t, ctx, l, "job", 500*time.Millisecond, fence.WithAutoRenew())
	last := holder.Token()

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
	_, err := l.Acquire(ctx, "other", time.Second)
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
	err = retryDead(func() (err error) { lease, err = l.Acquire(ctx, "job", time.Minute); return err })
	wantOK(t, "Acquire after restart", err)
	if lease.Token() <= last {
		t.Fatalf("token after restart = %d, want above %d, the last before the crash", lease.Token(), last)
	}

	// The listener reconnects: a waiter is woken by a release, not by its 1h poll.
	got := acquireLater(t, ctx, pool, l, "job", 30*time.Second)
	wantOK(t, "Release", lease.Release(ctx))
	select {
	case w := <-got:
		wantOK(t, "waiter after restart", w.err)
		defer w.lease.Release(ctx)
		if w.lease.Token() <= lease.Token() {
			t.Fatalf("waiter token %d, want above %d", w.lease.Token(), lease.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken within 10s after the restart: the listener did not reconnect")
	}
}

// retryDead runs f up to three times while it fails with fence.ErrUnavailable or
// a connection error: the pool's first use after a crash may hit a dead connection.
func retryDead(f func() error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = f(); err == nil || !(errors.Is(err, fence.ErrUnavailable) || isConnErr(err)) {
			return err
		}
	}
	return err
}

func isConnErr(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection") || strings.Contains(s, "EOF") || strings.Contains(s, "broken pipe")
}
