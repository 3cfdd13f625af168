package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5"
)

// paired runs base and variant alternately b.N times each and reports their
// median and mean times and the ratios variant/base. Alternating in one loop
// exposes both to the same load on the (shared) machine; the median ratio
// ("fenced/plain") is the figure to read, since a loaded machine adds spikes
// that the mean ("fenced/plain-mean") keeps.
func paired(b *testing.B, unit string, base, variant func() error) {
	b.Helper()
	// Warm up: connections, prepared statements, the rows' first versions.
	for i := 0; i < 50; i++ {
		if err := base(); err != nil {
			b.Fatal(err)
		}
		if err := variant(); err != nil {
			b.Fatal(err)
		}
	}
	tBase := make([]time.Duration, 0, b.N)
	tVar := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := time.Now()
		if err := base(); err != nil {
			b.Fatal(err)
		}
		m := time.Now()
		if err := variant(); err != nil {
			b.Fatal(err)
		}
		tVar = append(tVar, time.Since(m))
		tBase = append(tBase, m.Sub(s))
	}
	b.StopTimer()
	mb, mv := median(tBase), median(tVar)
	b.ReportMetric(float64(mb.Nanoseconds()), "plain-p50-ns/"+unit)
	b.ReportMetric(float64(mv.Nanoseconds()), "fenced-p50-ns/"+unit)
	b.ReportMetric(float64(mv)/float64(mb), "fenced/plain")
	b.ReportMetric(float64(sum(tVar))/float64(sum(tBase)), "fenced/plain-mean")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func sum(ds []time.Duration) (t time.Duration) {
	for _, d := range ds {
		t += d
	}
	return t
}

// BenchmarkRowFence_UpdateVsPlainUpdate compares Row.Update (one conditional
// UPDATE writing the fence columns too) with the same UPDATE without the fence,
// on the same table. Target: fenced/plain <= 1.10.
func BenchmarkRowFence_UpdateVsPlainUpdate(b *testing.B) {
	ctx := context.Background()
	lock := uniq(b, "lock")
	plainID, fencedID := uniq(b, "plain"), uniq(b, "fenced")
	for _, id := range []string{plainID, fencedID} {
		if _, err := sharedPool.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, 0)`, id); err != nil {
			b.Fatal(err)
		}
	}
	f := fenceOf(lock, 1)
	var n int64
	paired(b, "write",
		func() error {
			n++
			_, err := sharedPool.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE id = $1`, plainID, n)
			return err
		},
		func() error { return accounts.Update(ctx, sharedPool, f, fencedID, n) })
}

// BenchmarkRowFence_UpsertVsPlainUpsert is the same for Row.Upsert and a plain
// INSERT ... ON CONFLICT DO UPDATE.
func BenchmarkRowFence_UpsertVsPlainUpsert(b *testing.B) {
	ctx := context.Background()
	lock := uniq(b, "lock")
	plainID, fencedID := uniq(b, "plain"), uniq(b, "fenced")
	f := fenceOf(lock, 1)
	var n int64
	paired(b, "write",
		func() error {
			n++
			_, err := sharedPool.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET balance = excluded.balance`, plainID, n)
			return err
		},
		func() error { return accounts.Upsert(ctx, sharedPool, f, fencedID, n) })
}

// BenchmarkResourceFence_TxVsPlainTx compares a transaction of two writes (an
// INSERT and an UPDATE on tables without fence columns) with the same
// transaction plus Guard.FenceTx: the fence costs one statement.
func BenchmarkResourceFence_TxVsPlainTx(b *testing.B) {
	ctx := context.Background()
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(b, "res"), uniq(b, "lock")
	if _, err := sharedPool.Exec(ctx, `INSERT INTO plain_accounts (id, balance) VALUES ($1, 0)`, res); err != nil {
		b.Fatal(err)
	}
	f := fenceOf(lock, 1)
	var n int64
	writes := func(tx pgx.Tx) error {
		n++
		if _, err := tx.Exec(ctx, `INSERT INTO entries (resource, token, note) VALUES ($1, $2, 'bench')`, res, n); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE plain_accounts SET balance = balance + 1 WHERE id = $1`, res)
		return err
	}
	paired(b, "tx",
		func() error { return pgx.BeginFunc(ctx, sharedPool, writes) },
		func() error {
			return pgx.BeginFunc(ctx, sharedPool, func(tx pgx.Tx) error {
				if err := g.FenceTx(ctx, tx, res, f); err != nil {
					return err
				}
				return writes(tx)
			})
		})
}

// BenchmarkGuard_Fence measures Guard.Fence alone (its own transaction).
func BenchmarkGuard_Fence(b *testing.B) {
	ctx := context.Background()
	g := postgres.NewGuard(sharedPool, nil)
	res, lock := uniq(b, "res"), uniq(b, "lock")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := g.Fence(ctx, res, fenceOf(lock, fence.Token(i+1))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLocker_AcquireRelease measures an uncontended Acquire+Release pair on
// one name (two statements, two round trips).
func BenchmarkLocker_AcquireRelease(b *testing.B) {
	fencetest.BenchmarkAcquireRelease(b, openLocker(b, sharedPool, nil))
}

// BenchmarkLocker_Handoff measures how long a waiter takes to get a lock after
// its holder releases it (see fencetest.BenchmarkHandoff): NOTIFY wake-up plus one
// acquire statement. The waiter's Locker polls only hourly, so a handoff is never
// a poll's.
func BenchmarkLocker_Handoff(b *testing.B) {
	holder := openLocker(b, sharedPool, nil)
	waiter := openLocker(b, sharedPool, &postgres.LockerOptions{PollInterval: time.Hour})
	fencetest.BenchmarkHandoff(b, holder, waiter)
}

// BenchmarkLocker_ExpiryHandoff measures the handoff after an expiry (see
// fencetest.BenchmarkExpiryHandoff): a holder never releases a 100ms lease, a waiter
// on its own Locker (default options) is already waiting. Expiry sends no NOTIFY: the
// waiter wakes at the remaining time the database reported.
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 100x ./postgres/
func BenchmarkLocker_ExpiryHandoff(b *testing.B) {
	holder, waiter := openLocker(b, sharedPool, nil), openLocker(b, sharedPool, nil)
	fencetest.BenchmarkExpiryHandoff(b, holder, waiter, 100*time.Millisecond)
}
