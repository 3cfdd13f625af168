package postgres_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/postgres"
)

// ownerLockerDDLFile is the lock table's DDL with owners and before semaphores,
// as LockerSchema was up to commit a88ecf7.
const ownerLockerDDLFile = "testdata/locker_schema_before_semaphores.sql"

// The statements of that version, as an older binary still running during an
// upgrade sends them: they know nothing of semaphores and shared locks.
const (
	ownerAcquireSQL = `WITH granted AS (
    INSERT INTO "fence_locks" AS l (name, token, lease, expires_at, owner) VALUES ($1, 1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond', $5)
    ON CONFLICT (name) DO UPDATE SET token = l.token + 1, lease = excluded.lease, expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond', owner = excluded.owner
    WHERE l.expires_at <= clock_timestamp() AND l.token < $4
    RETURNING token, name)
SELECT token FROM granted, pg_notify($6, name)`
	ownerRenewSQL = `UPDATE "fence_locks" SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()`
	ownerReleaseSQL = `WITH ended AS (
    UPDATE "fence_locks" SET expires_at = '-infinity', owner = ''
    WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()
    RETURNING name)
SELECT pg_notify($3, name) FROM ended`
	ownerRevokeSQL = `WITH ended AS (
    UPDATE "fence_locks" SET expires_at = '-infinity', owner = ''
    WHERE name = $1 AND expires_at > clock_timestamp()
    RETURNING name)
SELECT pg_notify($2, name) FROM ended`
)

// ownerAcquire tries once to grant name for a minute under leaseID as the owner
// version does; it returns the token, or 0 if the lock was held.
func ownerAcquire(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name, leaseID string) fence.Token {
	t.Helper()
	var tok int64
	err := pool.QueryRow(ctx, ownerAcquireSQL, name, leaseID, time.Minute.Milliseconds(), int64(fence.MaxToken), "old binary", "fence_locks:watch").Scan(&tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	wantOK(t, "the owner version's acquire of "+name, err)
	return fence.Token(tok)
}

// ownerExec runs one of the owner version's statements and returns how many
// rows it changed.
func ownerExec(t *testing.T, ctx context.Context, pool *pgxpool.Pool, what, sql string, args ...any) int64 {
	t.Helper()
	tag, err := pool.Exec(ctx, sql, args...)
	wantOK(t, "the owner version's "+what, err)
	return tag.RowsAffected()
}

func TestLocker_CreateSchema_UpgradesTableOfTheOwnerDDL_LeasesKeptSemaphoresWork(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	ddl, err := os.ReadFile(ownerLockerDDLFile)
	wantOK(t, "read the owner version's DDL", err)
	_, err = pool.Exec(ctx, string(ddl))
	wantOK(t, "create the lock table with the owner version's DDL", err)
	held := ownerAcquire(t, ctx, pool, "held", "old-held-lease")
	for i := 0; i < 2; i++ {
		ownerAcquire(t, ctx, pool, "free", "old-free-lease")
		ownerExec(t, ctx, pool, "release", ownerReleaseSQL, "free", "old-free-lease", "fence_locks")
	}

	l := openLocker(t, pool, nil)
	_, err = l.Acquire(ctx, "free", time.Minute, fence.WithLimit(2))
	wantIs(t, "a permit before CreateSchema added the columns", err, postgres.ErrSchema)
	_, err = l.Acquire(ctx, "free", time.Minute)
	wantIs(t, "a lock before CreateSchema added the columns", err, postgres.ErrSchema)
	_, err = l.Inspect(ctx, "held")
	wantIs(t, "Inspect before CreateSchema added the columns", err, postgres.ErrSchema)

	wantOK(t, "CreateSchema on the owner version's table", l.CreateSchema(ctx))
	wantOK(t, "CreateSchema again", l.CreateSchema(ctx))
	wantHeldBy(t, ctx, l, "held", held, "old binary")
	wantOK(t, "Renew of a lease granted before the upgrade", l.Renew(ctx, "held", "old-held-lease", time.Minute))
	ps := permits(t, ctx, l, "free", 2, 2, time.Minute)
	if ps[0].Token() != 3 || ps[0].Slot() != 0 || ps[1].Slot() != 1 {
		t.Fatalf("permits after the upgrade: token %d slots %d, %d; want token 3 (two grants before) and slots 0, 1", ps[0].Token(), ps[0].Slot(), ps[1].Slot())
	}
	_, err = pool.Exec(ctx, `UPDATE fence_locks SET token = 1 WHERE name = 'free'`)
	if err == nil {
		t.Fatal("lowering a token by hand after the upgrade succeeded; want the triggers kept")
	}
}

// TestLocker_OwnerVersionOnTheNewTable_NeverGrantsOverPermitsRevokesThem is
// what an older binary does during a rolling upgrade while the new one holds
// permits: its acquire finds the name held, its renew and release never match a
// permit, its revoke ends them all; and the new binary treats the older one's
// lock as a lock.
func TestLocker_OwnerVersionOnTheNewTable_NeverGrantsOverPermitsRevokesThem(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	ps := permits(t, ctx, l, name, 3, 2, time.Minute)
	if tok := ownerAcquire(t, ctx, sharedPool, name, "old-lease"); tok != 0 {
		t.Fatalf("the owner version granted token %d while two permits were live", tok)
	}
	for _, p := range ps {
		if n := ownerExec(t, ctx, sharedPool, "renew", ownerRenewSQL, name, p.ID(), time.Minute.Milliseconds()); n != 0 {
			t.Fatalf("the owner version's renew of a permit changed %d rows", n)
		}
		if n := ownerExec(t, ctx, sharedPool, "release", ownerReleaseSQL, name, p.ID(), "fence_locks"); n != 0 {
			t.Fatalf("the owner version's release of a permit changed %d rows", n)
		}
	}
	wantOK(t, "Renew of a permit after the old binary's tries", ps[0].Renew(ctx, time.Minute))
	if n := ownerExec(t, ctx, sharedPool, "revoke", ownerRevokeSQL, name, "fence_locks"); n != 1 {
		t.Fatalf("the owner version's revoke changed %d rows, want 1", n)
	}
	for _, p := range ps {
		wantIs(t, "Renew of a permit the old binary revoked", p.Renew(ctx, time.Minute), fence.ErrNotHeld)
	}
	tok := ownerAcquire(t, ctx, sharedPool, name, "old-lease")
	if tok <= ps[1].Token() {
		t.Fatalf("the owner version's grant after the revoke: token %d, want above %d", tok, ps[1].Token())
	}
	var le *fence.LimitError
	if _, err := fence.TryAcquire(ctx, l, name, time.Minute, fence.WithLimit(3)); !errors.As(err, &le) {
		t.Fatalf("a permit while the old binary holds the lock: %v; want a *fence.LimitError", err)
	}
	_, err := fence.TryAcquire(ctx, l, name, time.Minute, fence.WithShared())
	wantIs(t, "a shared acquire while the old binary holds the lock", err, fence.ErrNotAcquired)
	wantHeldBy(t, ctx, l, name, tok, "old binary")
	ownerExec(t, ctx, sharedPool, "release", ownerReleaseSQL, name, "old-lease", "fence_locks")
	p := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	if p.Slot() != 0 || p.Token() <= tok {
		t.Fatalf("a permit after the old binary's release: slot %d token %d; want slot 0 above %d", p.Slot(), p.Token(), tok)
	}
}

// TestLocker_PostgresKilledAndRestarted_PermitsAndSharedLeasesSurvive kills
// PostgreSQL (SIGKILL) while permits and shared leases are held: after the
// restart they are still held, in their slots, and their holders renew and
// release them; tokens carry on above them.
func TestLocker_PostgresKilledAndRestarted_PermitsAndSharedLeasesSurvive(t *testing.T) {
	servertest.SkipIfShort(t)
	srv := servertest.Postgres(t) // its own server: this test kills it
	ctx := ctxT(t)
	pool := newPool(t, srv.CreateDatabase(t))
	l := lockerOn(t, pool, &postgres.LockerOptions{PollInterval: time.Hour})
	ps := permits(t, ctx, l, "sem", 3, 2, time.Minute)
	readers := []*fence.Lease{
		mustAcquire(t, ctx, l, "rw", time.Minute, fence.WithShared()),
		mustAcquire(t, ctx, l, "rw", time.Minute, fence.WithShared()),
	}

	srv.Kill()
	wantOK(t, "restart PostgreSQL after SIGKILL", srv.Restart())
	pool.Reset()

	var info fence.LockInfo
	err := retryDead(func() (err error) { info, err = l.Inspect(ctx, "sem"); return err })
	wantOK(t, "Inspect after the restart", err)
	if len(info.Holders) != 2 || info.Limit != 3 || info.Holders[1].Token != ps[1].Token() {
		t.Fatalf("Inspect(sem) after the restart = %+v; want the two permits of 3", info)
	}
	wantOK(t, "Renew of a permit after the restart", ps[0].Renew(ctx, time.Minute))
	third := mustAcquire(t, ctx, l, "sem", time.Minute, fence.WithLimit(3))
	if third.Slot() != 2 || third.Token() <= ps[1].Token() {
		t.Fatalf("third permit after the restart: slot %d token %d; want slot 2 above %d", third.Slot(), third.Token(), ps[1].Token())
	}
	_, err = fence.TryAcquire(ctx, l, "sem", time.Minute, fence.WithLimit(3))
	wantIs(t, "a fourth permit after the restart", err, fence.ErrNotAcquired)
	wantOK(t, "Release of a permit after the restart", ps[1].Release(ctx))

	_, err = fence.TryAcquire(ctx, l, "rw", time.Minute)
	wantIs(t, "a writer while the readers held across the restart", err, fence.ErrNotAcquired)
	for _, r := range readers {
		wantOK(t, "Renew of a reader after the restart", r.Renew(ctx, time.Minute))
		wantOK(t, "Release of a reader after the restart", r.Release(ctx))
	}
	w := mustAcquire(t, ctx, l, "rw", time.Minute)
	if w.Token() <= readers[1].Token() {
		t.Fatalf("writer token %d after the restart, want above %d", w.Token(), readers[1].Token())
	}
}
