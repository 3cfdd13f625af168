//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
)

// The ledger has two payouts tables of the same shape: payouts carries the unique
// constraint on (batch_id, line), payouts_unconstrained does not. A run uses the
// first when the "unique" protection is on, the second otherwise, so runs with and
// without the constraint can share one database.
const (
	tableUnique        = "payouts"
	tableUnconstrained = "payouts_unconstrained"
)

// payoutColumns are the columns of both payouts tables. status is 'claimed' while
// the provider call runs and 'paid' once its charge id is recorded; token is the
// fencing token of the instance that claimed the line (0 when fencing is off).
const payoutColumns = `
    id           bigserial PRIMARY KEY,
    batch_id     text   NOT NULL,
    line         int    NOT NULL CHECK (line > 0),
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    claimed_by   text   NOT NULL,
    token        bigint NOT NULL DEFAULT 0,
    status       text   NOT NULL DEFAULT 'claimed' CHECK (status IN ('claimed', 'paid')),
    charge_id    text`

// ledgerSchema is the DDL of both payouts tables: the same columns, the unique
// constraint on one only.
const ledgerSchema = `
CREATE TABLE IF NOT EXISTS payouts (` + payoutColumns + `,
    UNIQUE (batch_id, line)
);
CREATE TABLE IF NOT EXISTS payouts_unconstrained (` + payoutColumns + `
);
CREATE INDEX IF NOT EXISTS payouts_unconstrained_batch_idx ON payouts_unconstrained (batch_id, line)`

// createSchema creates the ledger tables, the guard's fences table, the lock table
// and the provider's idempotency table. It runs once, in the coordinator, so that
// instances never race on DDL.
func createSchema(ctx context.Context, pool *pgxpool.Pool, createStore func(context.Context) error) error {
	if _, err := pool.Exec(ctx, ledgerSchema); err != nil {
		return fmt.Errorf("payments: create ledger tables: %w", err)
	}
	if err := postgres.NewGuard(pool, nil).CreateSchema(ctx); err != nil {
		return fmt.Errorf("payments: create fences table: %w", err)
	}
	l := postgres.NewLocker(pool, nil)
	defer l.Close()
	if err := l.CreateSchema(ctx); err != nil {
		return fmt.Errorf("payments: create lock table: %w", err)
	}
	if err := createStore(ctx); err != nil {
		return fmt.Errorf("payments: create idempotency table: %w", err)
	}
	return nil
}

// ledger is one instance's view of the payouts of a batch.
type ledger struct {
	pool     *pgxpool.Pool
	guard    *postgres.Guard // nil when fencing is off
	table    string
	unique   bool
	batch    string
	instance string
}

// amount is the deterministic amount of a line, in cents.
func amount(line int) int64 { return int64(1000 + 37*line) }

// pending returns the lines of the batch (1..size) that have no paid payout yet,
// in order: the snapshot the reconciliation job works through.
func (l *ledger) pending(ctx context.Context, size int) ([]int, error) {
	rows, err := l.pool.Query(ctx,
		fmt.Sprintf(`SELECT DISTINCT line FROM %s WHERE batch_id = $1 AND status = 'paid'`, l.table), l.batch)
	if err != nil {
		return nil, fmt.Errorf("payments: read paid lines of %q: %w", l.batch, err)
	}
	paid, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("payments: read paid lines of %q: %w", l.batch, err)
	}
	done := make(map[int]bool, len(paid))
	for _, p := range paid {
		done[int(p)] = true
	}
	var out []int
	for line := 1; line <= size; line++ {
		if !done[line] {
			out = append(out, line)
		}
	}
	return out, nil
}

// errAlreadyPaid means the line's payout row is already paid, so there is nothing to
// claim (only detectable with the unique constraint).
var errAlreadyPaid = errors.New("payments: line already paid")

// claim records that this instance is paying line, and returns the payout row's id.
// With the unique constraint, an unpaid claim left by another instance is taken over
// (its claimant may have crashed) and a paid one makes claim return errAlreadyPaid.
// With fencing the statement runs in the guard's transaction, so a fenced-off
// instance gets an error matching fence.ErrStaleToken and writes nothing.
func (l *ledger) claim(ctx context.Context, f fence.Fence, line int) (int64, error) {
	var sql string
	if l.unique {
		sql = fmt.Sprintf(`INSERT INTO %[1]s AS p (batch_id, line, amount_cents, claimed_by, token)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (batch_id, line) DO UPDATE SET claimed_by = excluded.claimed_by, token = excluded.token
WHERE p.status <> 'paid'
RETURNING id`, l.table)
	} else {
		sql = fmt.Sprintf(`INSERT INTO %s (batch_id, line, amount_cents, claimed_by, token)
VALUES ($1, $2, $3, $4, $5) RETURNING id`, l.table)
	}
	var id int64
	err := l.write(ctx, f, func(q postgres.Querier) error {
		return q.QueryRow(ctx, sql, l.batch, line, amount(line), l.instance, int64(f.Token)).Scan(&id)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s line %d", errAlreadyPaid, l.batch, line)
	}
	if err != nil {
		return 0, fmt.Errorf("payments: claim %s line %d: %w", l.batch, line, noRows(err))
	}
	return id, nil
}

// errTakenOver means another instance took the payout row over before this one
// recorded its charge; the charge is then in no ledger row of this instance.
var errTakenOver = errors.New("payments: claim taken over by another instance")

// record marks payout row id paid with chargeID, if this instance still holds the
// claim. It returns errTakenOver if another instance took the row over, and (with
// fencing) an error matching fence.ErrStaleToken if this instance was fenced off.
func (l *ledger) record(ctx context.Context, f fence.Fence, id int64, chargeID string) error {
	sql := fmt.Sprintf(`UPDATE %s SET status = 'paid', charge_id = $2 WHERE id = $1 AND claimed_by = $3`, l.table)
	var n int64
	err := l.write(ctx, f, func(q postgres.Querier) error {
		tag, err := q.Exec(ctx, sql, id, chargeID, l.instance)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("payments: record payout %d: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: payout %d", errTakenOver, id)
	}
	return nil
}

// write runs stmt under the guard (one transaction with the resource fence) when
// fencing is on, or directly on the pool when it is off.
func (l *ledger) write(ctx context.Context, f fence.Fence, stmt func(postgres.Querier) error) error {
	if l.guard == nil {
		return stmt(l.pool)
	}
	return l.guard.Do(ctx, "payouts/"+l.batch, f, func(tx pgx.Tx) error { return stmt(tx) })
}

// noRows hides pgx.ErrNoRows (callers translate it before) and leaves other errors.
func noRows(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return errors.New("no row returned")
	}
	return err
}
