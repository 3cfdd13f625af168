package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// insertEntry is a write fenced by the resource fence: a row in a table that has
// no fence column.
func insertEntry(ctx context.Context, resource string, tok fence.Token, note string) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO entries (resource, token, note) VALUES ($1, $2, $3)`, resource, int64(tok), note)
		return err
	}
}

// entryTokens returns the tokens of resource's entries in insertion order.
func entryTokens(t testing.TB, pool *pgxpool.Pool, resource string) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT token FROM entries WHERE resource = $1 ORDER BY id`, resource)
	if err != nil {
		t.Fatalf("read entries: %v", err)
	}
	toks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("read entries: %v", err)
	}
	return toks
}

// wantEntries fails t unless resource's entries have exactly the tokens want, in
// insertion order; why says what the test expects of them.
func wantEntries(t testing.TB, resource, why string, want ...int64) {
	t.Helper()
	if got := entryTokens(t, sharedPool, resource); !slices.Equal(got, want) {
		t.Fatalf("entries = %v, want %v: %s", got, want, why)
	}
}

func TestGuard_Do_WritesOfOneTxAreFencedTogether(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(t, "res"), uniq(t, "lock")

	two := func(tok fence.Token) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			if err := insertEntry(ctx, res, tok, "a")(tx); err != nil {
				return err
			}
			return insertEntry(ctx, res, tok, "b")(tx)
		}
	}
	wantOK(t, "Do with token 5", g.Do(ctx, res, fenceOf(lock, 5), two(5)))
	err := g.Do(ctx, res, fenceOf(lock, 3), two(3))
	wantStale(t, "Do with token 3 after 5", err, 5)
	wantEntries(t, res, "the stale transaction must leave nothing", 5, 5)
	h, err := g.Highest(ctx, res)
	wantOK(t, "Highest", err)
	if h != fenceOf(lock, 5) {
		t.Fatalf("Highest = %+v, want %+v", h, fenceOf(lock, 5))
	}
}

func TestGuard_FenceTx_SameLeaseAgainAcceptedOtherLeaseRejected(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(t, "res"), uniq(t, "lock")
	f := fenceOf(lock, 7)
	for i := 0; i < 3; i++ {
		wantOK(t, "Fence under the same lease", g.Fence(ctx, res, f))
	}
	other := fence.Fence{Name: lock, Token: 7, LeaseID: "someone-else"}
	err := g.Fence(ctx, res, other)
	wantStale(t, "equal token, other lease", err, 7)
	var st *fence.StaleTokenError
	if errors.As(err, &st); !st.SameToken {
		t.Fatalf("StaleTokenError.SameToken = false, want true (error %v)", err)
	}
	noLease := fence.Fence{Name: lock, Token: 7}
	wantStale(t, "equal token without lease id", g.Fence(ctx, res, noLease), 7)
	wantOK(t, "higher token without lease id", g.Fence(ctx, res, fence.Fence{Name: lock, Token: 8}))
	wantStale(t, "equal token without lease id after one without", g.Fence(ctx, res, fence.Fence{Name: lock, Token: 8}), 8)
}

func TestGuard_FenceTx_OtherNamespaceRejected(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock, other := uniq(t, "res"), uniq(t, "lock"), uniq(t, "other")
	wantOK(t, "first fence", g.Fence(ctx, res, fenceOf(lock, 2)))
	err := g.Do(ctx, res, fenceOf(other, 100), insertEntry(ctx, res, 100, "x"))
	var ne *fence.NamespaceError
	if !errors.As(err, &ne) || ne.Want != lock || ne.Got != other {
		t.Fatalf("Do with another lock's token: error = %v, want *fence.NamespaceError{Want: %q, Got: %q}", err, lock, other)
	}
	wantEntries(t, res, "the refused Do must write none")
}

func TestGuard_Fence_FencesOffZombieBeforeNewHoldersFirstWrite(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(t, "res"), uniq(t, "lock")
	zombie, next := fenceOf(lock, 1), fenceOf(lock, 2)
	wantOK(t, "zombie's first write", g.Do(ctx, res, zombie, insertEntry(ctx, res, 1, "before pause")))
	wantOK(t, "new holder fences", g.Fence(ctx, res, next))
	err := g.Do(ctx, res, zombie, insertEntry(ctx, res, 1, "after pause"))
	wantStale(t, "zombie's write after the new holder's Fence", err, 2)
	wantEntries(t, res, "only the zombie's first write", 1)
}

func TestGuard_FenceTx_RowLockQueuesConcurrentWriterUntilCommit(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(t, "res"), uniq(t, "lock")
	wantOK(t, "first fence", g.Fence(ctx, res, fenceOf(lock, 1)))

	tx1, err := sharedPool.Begin(ctx)
	wantOK(t, "begin tx1", err)
	defer tx1.Rollback(ctx)
	wantOK(t, "tx1 fences with 3", g.FenceTx(ctx, tx1, res, fenceOf(lock, 3)))

	second := make(chan error, 1)
	go func() { second <- g.Fence(ctx, res, fenceOf(lock, 2)) }()
	// The second writer must be blocked on tx1's row lock, not refused or
	// accepted against the old fence.
	waitForLockWait(t, ctx)
	select {
	case err := <-second:
		t.Fatalf("second writer returned %v while tx1 held the fence row, want it to wait", err)
	default:
	}
	wantOK(t, "commit tx1", tx1.Commit(ctx))
	wantStale(t, "second writer after tx1 committed 3", <-second, 3)
}

// waitForLockWait returns once some backend waits on a heavyweight lock.
func waitForLockWait(t testing.TB, ctx context.Context) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := sharedPool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n)
		wantOK(t, "read pg_stat_activity", err)
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no backend waited on a lock within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling the server: no channel can tell us
	}
}

func TestGuard_FenceTx_SerializationFailureIsErrConflictAndWritesNothing(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(t, "res"), uniq(t, "lock")
	wantOK(t, "first fence", g.Fence(ctx, res, fenceOf(lock, 1)))

	tx, err := sharedPool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	wantOK(t, "begin repeatable read", err)
	defer tx.Rollback(ctx)
	var one int
	wantOK(t, "take the snapshot", tx.QueryRow(ctx, "SELECT 1").Scan(&one))
	wantOK(t, "concurrent fence with 2", g.Fence(ctx, res, fenceOf(lock, 2)))

	err = g.FenceTx(ctx, tx, res, fenceOf(lock, 3))
	wantIs(t, "FenceTx on a row changed after the snapshot", err, postgres.ErrConflict)
	wantOK(t, "rollback", tx.Rollback(ctx))
	h, err := g.Highest(ctx, res)
	wantOK(t, "Highest", err)
	if h.Token != 2 {
		t.Fatalf("Highest token = %d, want 2 (the aborted transaction wrote nothing)", h.Token)
	}
}

func TestGuard_Highest_NeverFencedIsNotFound(t *testing.T) {
	_, err := postgres.NewGuard(sharedPool, nil).Highest(ctxT(t), uniq(t, "res"))
	wantIs(t, "Highest of a resource never fenced", err, fence.ErrNotFound)
}

func TestGuard_BadInput_ClearErrorsAndNothingWritten(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(t, "res"), uniq(t, "lock")
	for _, c := range []struct {
		what string
		res  string
		f    fence.Fence
	}{
		{"token 0", res, fence.Fence{Name: lock, Token: 0, LeaseID: "l"}},
		{"token above MaxToken", res, fence.Fence{Name: lock, Token: fence.MaxToken + 1, LeaseID: "l"}},
		{"token above the bigint range", res, fence.Fence{Name: lock, Token: 1 << 63, LeaseID: "l"}},
		{"empty lock name", res, fence.Fence{Token: 1, LeaseID: "l"}},
		{"lease id with a space", res, fence.Fence{Name: lock, Token: 1, LeaseID: "a b"}},
		{"empty resource", "", fenceOf(lock, 1)},
		{"resource with a control character", "a\nb", fenceOf(lock, 1)},
	} {
		wantIs(t, "Fence with "+c.what, g.Fence(ctx, c.res, c.f), fence.ErrInvalid)
		wantIs(t, "Do with "+c.what, g.Do(ctx, c.res, c.f, insertEntry(ctx, res, 1, "x")), fence.ErrInvalid)
	}
	wantIs(t, "FenceTx with a nil tx", g.FenceTx(ctx, nil, res, fenceOf(lock, 1)), fence.ErrInvalid)
	wantIs(t, "Do with a nil write", g.Do(ctx, res, fenceOf(lock, 1), nil), fence.ErrInvalid)
	if _, err := g.Highest(ctx, res); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("after bad input: Highest error = %v, want ErrNotFound (nothing written)", err)
	}

	for _, table := range []string{"x; DROP TABLE entries", `fence"resources`, "a.b.c", "1abc", strings.Repeat("t", 64)} {
		err := postgres.NewGuard(sharedPool, &postgres.GuardOptions{Table: table}).Fence(ctx, res, fenceOf(lock, 1))
		wantIs(t, "Fence with table "+table, err, fence.ErrInvalid)
	}
	wantIs(t, "NewGuard(nil)", postgres.NewGuard(nil, nil).Fence(ctx, res, fenceOf(lock, 1)), fence.ErrInvalid)
}

func TestGuard_WrongSchema_ErrSchema(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	missing := postgres.NewGuard(pool, &postgres.GuardOptions{Table: "no_such_table"})
	err := missing.Fence(ctx, "r", fenceOf("lock", 1))
	wantIs(t, "Fence on a missing table", err, postgres.ErrSchema)
	if !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("error %q does not name the missing table", err)
	}
	_, err = missing.Highest(ctx, "r")
	wantIs(t, "Highest on a missing table", err, postgres.ErrSchema)

	_, err = pool.Exec(ctx, `CREATE TABLE no_lease (resource text PRIMARY KEY, name text NOT NULL, token bigint NOT NULL)`)
	wantOK(t, "create a table without the lease column", err)
	err = postgres.NewGuard(pool, &postgres.GuardOptions{Table: "no_lease"}).Fence(ctx, "r", fenceOf("lock", 1))
	wantIs(t, "Fence on a table without lease column", err, postgres.ErrSchema)

	_, err = pool.Exec(ctx, `CREATE TABLE no_key (resource text, name text NOT NULL, token bigint NOT NULL, lease text NOT NULL)`)
	wantOK(t, "create a table without primary key", err)
	err = postgres.NewGuard(pool, &postgres.GuardOptions{Table: "no_key"}).Fence(ctx, "r", fenceOf("lock", 1))
	wantIs(t, "Fence on a table without a unique resource", err, postgres.ErrSchema)
}

func TestGuard_ClosedPool_ErrUnavailable(t *testing.T) {
	ctx := ctxT(t)
	pool := newPool(t, sharedDSN)
	g := postgres.NewGuard(pool, nil)
	pool.Close()
	wantIs(t, "Fence on a closed pool", g.Fence(ctx, uniq(t, "res"), fenceOf("lock", 1)), fence.ErrUnavailable)
	wantIs(t, "Do on a closed pool", g.Do(ctx, uniq(t, "res"), fenceOf("lock", 1), func(pgx.Tx) error { return nil }), fence.ErrUnavailable)
}

func TestGuard_CreateSchema_CustomTableInSchemaIsIdempotent(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	_, err := pool.Exec(ctx, `CREATE SCHEMA app`)
	wantOK(t, "create schema", err)
	g := postgres.NewGuard(pool, &postgres.GuardOptions{Table: "app.fences"})
	wantOK(t, "CreateSchema", g.CreateSchema(ctx))
	wantOK(t, "CreateSchema again", g.CreateSchema(ctx))
	wantOK(t, "Fence", g.Fence(ctx, "r", fenceOf("lock", 4)))
	var tok int64
	wantOK(t, "read app.fences", pool.QueryRow(ctx, `SELECT token FROM app.fences WHERE resource = 'r'`).Scan(&tok))
	if tok != 4 {
		t.Fatalf("app.fences token = %d, want 4", tok)
	}
	_, err = pool.Exec(ctx, `INSERT INTO app.fences VALUES ('z', 'lock', 0, 'x')`)
	if err == nil || !strings.Contains(err.Error(), "check") {
		t.Fatalf("inserting token 0: error = %v, want a check constraint violation", err)
	}
}

func TestGuard_FenceTx_ClosedTxOrConn_ClearErrors(t *testing.T) {
	ctx := ctxT(t)
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(t, "res"), uniq(t, "lock")
	tx, err := sharedPool.Begin(ctx)
	wantOK(t, "begin", err)
	wantOK(t, "commit", tx.Commit(ctx))
	wantIs(t, "FenceTx on a committed tx", g.FenceTx(ctx, tx, res, fenceOf(lock, 1)), fence.ErrInvalid)

	conn, err := pgx.Connect(ctx, sharedDSN)
	wantOK(t, "connect", err)
	wantOK(t, "close conn", conn.Close(ctx))
	wantIs(t, "Fence through a closed conn", postgres.NewGuard(conn, nil).Fence(ctx, res, fenceOf(lock, 1)), fence.ErrUnavailable)
	wantIs(t, "Row.Update through a closed conn", accounts.Update(ctx, conn, fenceOf(lock, 1), res, 1), fence.ErrUnavailable)
	if _, err := g.Highest(ctx, res); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Highest after the failed calls: error = %v, want ErrNotFound (nothing written)", err)
	}
}

func TestSchemaConstants_CreateTablesTheDefaultsWorkOn(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	for _, ddl := range []string{postgres.Schema, postgres.KVSchema, postgres.LockerSchema} {
		_, err := pool.Exec(ctx, ddl)
		wantOK(t, "run documented DDL", err)
	}
	g, kv, l := postgres.NewGuard(pool, nil), postgres.NewKV(pool, nil), postgres.NewLocker(pool, nil)
	defer l.Close()
	wantOK(t, "Guard.CreateSchema over the DDL", g.CreateSchema(ctx))
	wantOK(t, "KV.CreateSchema over the DDL", kv.CreateSchema(ctx))
	wantOK(t, "Locker.CreateSchema over the DDL", l.CreateSchema(ctx))
	lease, err := l.Acquire(ctx, "job", time.Minute)
	wantOK(t, "Acquire", err)
	wantOK(t, "Guard.Fence", g.Fence(ctx, "r", lease.Fence()))
	wantOK(t, "KV.Put", kv.Put(ctx, "k", []byte("v"), lease.Fence()))
	wantOK(t, "Release", lease.Release(ctx))
	_, err = pool.Exec(ctx, `UPDATE fence_locks SET token = 0`)
	if err == nil {
		t.Fatal("setting a token to 0 by hand succeeded; want the documented schema to refuse it")
	}
}
