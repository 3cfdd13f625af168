package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// exampleName makes the examples' lock and resource names unique per run, so
// their output does not depend on earlier runs against the same database.
func exampleName(s string) string { return fmt.Sprintf("example-%d/%s", runID, s) }

// A worker takes a lock, and every write it makes to the ledger runs in a
// transaction fenced by its lease: after a paused worker's lease expired and the
// next holder wrote, the paused worker's write is refused and rolled back.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, sharedDSN) // e.g. postgres://app@db/ledger
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	locker := postgres.NewLocker(pool, nil)
	defer locker.Close()
	guard := postgres.NewGuard(pool, nil)
	if err := locker.CreateSchema(ctx); err != nil {
		panic(err)
	}
	if err := guard.CreateSchema(ctx); err != nil {
		panic(err)
	}
	lock, ledger := exampleName("reconcile"), exampleName("ledger")
	post := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO entries (resource, token, note) VALUES ($1, 0, 'posted')`, ledger)
		return err
	}

	// Worker A acquires, then pauses past its TTL.
	a, err := locker.Acquire(ctx, lock, 50*time.Millisecond)
	if err != nil {
		panic(err)
	}
	<-a.Done()
	fmt.Println("A's lease:", a.Err())

	// Worker B acquires after expiry and writes.
	b, err := locker.Acquire(ctx, lock, 10*time.Second, fence.WithWait(time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("B's token is higher:", b.Token() > a.Token())
	fmt.Println("B writes:", guard.Do(ctx, ledger, b.Fence(), post))

	// A wakes up and writes with its old lease: refused, nothing written.
	err = guard.Do(ctx, ledger, a.Fence(), post)
	var stale *fence.StaleTokenError
	fmt.Println("A refused:", errors.As(err, &stale) && stale.Highest == b.Token())
	fmt.Println("B releases:", b.Release(ctx))
	// Output:
	// A's lease: fence: lease not held: expired before it was renewed
	// B's token is higher: true
	// B writes: <nil>
	// A refused: true
	// B releases: <nil>
}

// A table whose rows carry their own fence columns is written with one
// conditional statement per write.
func ExampleRow_Update() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, sharedDSN)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0,
	//     fence_name text NOT NULL DEFAULT '', fence_token bigint NOT NULL DEFAULT 0
	//     CHECK (fence_token >= 0), fence_lease text NOT NULL DEFAULT '')
	accounts := &postgres.Row{Table: "accounts", Key: "id", Columns: []string{"balance"}}
	id, lock := exampleName("alice"), exampleName("accounts-lock")
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, 100)`, id); err != nil {
		panic(err)
	}
	newer := fence.Fence{Name: lock, Token: 8, LeaseID: "lease-b"}
	older := fence.Fence{Name: lock, Token: 7, LeaseID: "lease-a"}

	fmt.Println(accounts.Update(ctx, pool, newer, id, 150))
	err = accounts.Update(ctx, pool, older, id, 999)
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("stale, highest seen", stale.Highest)
	}
	err = accounts.Update(ctx, pool, newer, exampleName("nobody"), 1)
	fmt.Println(errors.Is(err, fence.ErrNotFound))
	// Output:
	// <nil>
	// stale, highest seen 8
	// true
}

// FenceTx makes any transaction a fenced one: the fence row is advanced (and
// locked) first, and on a refusal the caller rolls back.
func ExampleGuard_FenceTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, sharedDSN)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	guard := postgres.NewGuard(pool, nil)
	ledger, lock := exampleName("ledger-tx"), exampleName("ledger-lock")

	transfer := func(f fence.Fence) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		if err := guard.FenceTx(ctx, tx, ledger, f); err != nil {
			return err // the deferred Rollback undoes nothing: nothing was written
		}
		if _, err := tx.Exec(ctx, `INSERT INTO entries (resource, token, note) VALUES ($1, $2, 'debit')`, ledger, int64(f.Token)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO entries (resource, token, note) VALUES ($1, $2, 'credit')`, ledger, int64(f.Token)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	fmt.Println(transfer(fence.Fence{Name: lock, Token: 2, LeaseID: "lease-2"}))
	fmt.Println(errors.Is(transfer(fence.Fence{Name: lock, Token: 1, LeaseID: "lease-1"}), fence.ErrStaleToken))
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM entries WHERE resource = $1`, ledger).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println(n, "entries")
	// Output:
	// <nil>
	// true
	// 2 entries
}
