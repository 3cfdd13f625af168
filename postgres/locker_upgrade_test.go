package postgres_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/postgres"
)

// previousLockerDDLFile is the file of the lock table's DDL before owners, as
// LockerSchema was up to commit eeb0ebf: the table an upgrade starts from.
const previousLockerDDLFile = "testdata/locker_schema_before_owner.sql"

// The acquire and release statements of that version, as an older binary still
// running during an upgrade sends them: they do not name the owner column.
const (
	previousAcquireSQL = `INSERT INTO "fence_locks" AS l (name, token, lease, expires_at) VALUES ($1, 1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET token = l.token + 1, lease = excluded.lease, expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
WHERE l.expires_at <= clock_timestamp() AND l.token < $4
RETURNING token`
	previousReleaseSQL = `WITH released AS (
    UPDATE "fence_locks" SET expires_at = '-infinity'
    WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()
    RETURNING name)
SELECT pg_notify($3, name) FROM released`
)

// previousAcquire grants name for a minute under leaseID as the previous version
// does, and returns the token.
func previousAcquire(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name, leaseID string) fence.Token {
	t.Helper()
	var tok int64
	wantOK(t, "the previous version's acquire of "+name,
		pool.QueryRow(ctx, previousAcquireSQL, name, leaseID, time.Minute.Milliseconds(), int64(fence.MaxToken)).Scan(&tok))
	return fence.Token(tok)
}

// previousRelease releases name/leaseID as the previous version does.
func previousRelease(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name, leaseID string) {
	t.Helper()
	tag, err := pool.Exec(ctx, previousReleaseSQL, name, leaseID, "fence_locks")
	wantOK(t, "the previous version's release of "+name, err)
	if tag.RowsAffected() != 1 {
		t.Fatalf("the previous version's release of %s ended %d leases, want 1", name, tag.RowsAffected())
	}
}

// wantHeldBy fails t unless Inspect reports name held with token tok by owner.
func wantHeldBy(t *testing.T, ctx context.Context, l *postgres.Locker, name string, tok fence.Token, owner string) {
	t.Helper()
	info, err := l.Inspect(ctx, name)
	wantOK(t, "Inspect("+name+")", err)
	if !info.Held || info.Token != tok || info.Owner != owner {
		t.Fatalf("Inspect(%q) = %+v; want held by token %d, owner %q", name, info, tok, owner)
	}
}

func TestLocker_CreateSchema_UpgradesTableOfThePreviousDDL_RowsAndLeasesKept(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	ddl, err := os.ReadFile(previousLockerDDLFile)
	wantOK(t, "read the previous DDL", err)
	_, err = pool.Exec(ctx, string(ddl))
	wantOK(t, "create the lock table with the previous DDL", err)
	previousAcquire(t, ctx, pool, "held", "old-held-lease")
	for i := 0; i < 2; i++ {
		previousAcquire(t, ctx, pool, "free", "old-free-lease")
		previousRelease(t, ctx, pool, "free", "old-free-lease")
	}

	l := openLocker(t, pool, nil)
	_, err = l.Acquire(ctx, "free", time.Minute)
	wantIs(t, "Acquire before CreateSchema added the owner column", err, postgres.ErrSchema)
	_, err = l.Inspect(ctx, "held")
	wantIs(t, "Inspect before CreateSchema added the owner column", err, postgres.ErrSchema)

	wantOK(t, "CreateSchema on the previous table", l.CreateSchema(ctx))
	wantOK(t, "CreateSchema again", l.CreateSchema(ctx))
	var (
		typ, nullable string
		def           *string
	)
	wantOK(t, "read the owner column", pool.QueryRow(ctx, `SELECT data_type, is_nullable, column_default
FROM information_schema.columns WHERE table_name = 'fence_locks' AND column_name = 'owner'`).Scan(&typ, &nullable, &def))
	if typ != "text" || nullable != "NO" || def == nil || *def != "''::text" {
		t.Fatalf("owner column: %s, nullable %s, default %v; want text NOT NULL DEFAULT ''", typ, nullable, def)
	}

	// The lease granted before the upgrade is still held, with no owner, and its
	// holder can renew it.
	wantHeldBy(t, ctx, l, "held", 1, "")
	wantOK(t, "Renew of a lease granted before the upgrade", l.Renew(ctx, "held", "old-held-lease", time.Minute))
	// Counters carry on.
	lease := mustAcquire(t, ctx, l, "free", time.Minute, fence.WithOwner("after the upgrade"))
	if lease.Token() != 3 {
		t.Fatalf("first grant after the upgrade has token %d, want 3 (two before it)", lease.Token())
	}
	wantHeldBy(t, ctx, l, "free", 3, "after the upgrade")
	wantOK(t, "Revoke of a lease granted before the upgrade", l.Revoke(ctx, "held"))
	wantIs(t, "its holder's Renew after Revoke", l.Renew(ctx, "held", "old-held-lease", time.Minute), fence.ErrNotHeld)
	if next := mustAcquire(t, ctx, l, "held", time.Minute); next.Token() != 2 {
		t.Fatalf("grant after the revoke has token %d, want 2", next.Token())
	}
	_, err = pool.Exec(ctx, `UPDATE fence_locks SET token = 1 WHERE name = 'free'`)
	if err == nil {
		t.Fatal("lowering a token by hand after the upgrade succeeded; want the triggers kept")
	}
	if p := mustAcquire(t, ctx, l, "semaphore", time.Minute, fence.WithLimit(2)); p.Slot() != 0 {
		t.Fatalf("a permit on the upgraded table has slot %d, want 0", p.Slot())
	}
}

// TestLocker_PreviousVersionOnTheNewTable_GrantsWithoutOwner is what an older
// binary does during a rolling upgrade, on a table the new CreateSchema made:
// its statements still work, and its grants show no owner, also after a new
// binary's lease with an owner was released.
func TestLocker_PreviousVersionOnTheNewTable_GrantsWithoutOwner(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	tok := previousAcquire(t, ctx, sharedPool, name, "old-lease-1")
	wantHeldBy(t, ctx, l, name, tok, "")
	previousRelease(t, ctx, sharedPool, name, "old-lease-1")

	lease := mustAcquire(t, ctx, l, name, time.Minute, fence.WithOwner("new binary"))
	wantHeldBy(t, ctx, l, name, lease.Token(), "new binary")
	wantOK(t, "Release", lease.Release(ctx))
	tok = previousAcquire(t, ctx, sharedPool, name, "old-lease-2")
	if tok <= lease.Token() {
		t.Fatalf("the previous version's grant has token %d, want above %d", tok, lease.Token())
	}
	wantHeldBy(t, ctx, l, name, tok, "")
	wantOK(t, "Revoke of the previous version's lease", l.Revoke(ctx, name))
}

// TestLocker_Watch_PreviousVersion_ReleaseSeenPromptlyGrantAtThePoll is what a
// watcher of a new binary sees of an older binary's changes during a rolling
// upgrade: the older release notifies as before, so it is seen promptly; the
// older grant notifies nothing, so it is seen by the watch's fallback poll.
func TestLocker_Watch_PreviousVersion_ReleaseSeenPromptlyGrantAtThePoll(t *testing.T) {
	servertest.SkipIfShort(t) // waits for the fallback poll
	ctx, l, name := lockTest(t, nil)
	states, _, _ := startWatch(t, ctx, l, name)
	awaitState(t, states, watchPromptly, "the first state", isFree)
	tok := previousAcquire(t, ctx, sharedPool, name, "old-lease")
	awaitState(t, states, driver.DefaultWatchPoll+watchPromptly, "the previous version's grant", heldWith(tok))
	previousRelease(t, ctx, sharedPool, name, "old-lease")
	awaitState(t, states, watchPromptly, "the previous version's release", isFree)
}
