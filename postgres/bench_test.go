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
	pairedAs(b, unit, "plain", "fenced", base, variant)
}

// pairedAs is paired with the metrics named after baseName and varName.
func pairedAs(b *testing.B, unit, baseName, varName string, base, variant func() error) {
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
	b.ReportMetric(float64(mb.Nanoseconds()), baseName+"-p50-ns/"+unit)
	b.ReportMetric(float64(mv.Nanoseconds()), varName+"-p50-ns/"+unit)
	b.ReportMetric(float64(mv)/float64(mb), varName+"/"+baseName)
	b.ReportMetric(float64(sum(tVar))/float64(sum(tBase)), varName+"/"+baseName+"-mean")
}

func median(ds []time.Duration) time.Duration { return quantile(ds, 0.5) }

// quantile returns the q-quantile (0 <= q < 1) of ds, which must not be empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)))]
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

// BenchmarkLocker_AcquireRelease_GrantNotifyVsNot prices the NOTIFY a grant sends
// to watchers: an uncontended Acquire+Release pair on a Locker as it is
// ("notify") and on one whose acquire statement has the pg_notify replaced by a
// no-op ("nonotify"), alternately on one server. Read notify/nonotify.
//
//	go test -run '^$' -bench GrantNotifyVsNot -benchtime 2000x -count 5 ./postgres/
func BenchmarkLocker_AcquireRelease_GrantNotifyVsNot(b *testing.B) {
	ctx := context.Background()
	with, without := openLocker(b, sharedPool, nil), openLocker(b, sharedPool, nil)
	if err := postgres.WithoutGrantNotify(without); err != nil {
		b.Fatal(err)
	}
	pairedAs(b, "pair", "nonotify", "notify", pairOn(ctx, without, uniq(b, "without")), pairOn(ctx, with, uniq(b, "with")))
}

// pairOn returns a function that acquires name on l (with opts) and releases it.
func pairOn(ctx context.Context, l fence.Locker, name string, opts ...fence.AcquireOption) func() error {
	return func() error {
		lease, err := l.Acquire(ctx, name, 10*time.Second, opts...)
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}
}

// BenchmarkLocker_AcquireReleaseParallel_GrantNotifyVsNot is the same under
// concurrency (4*GOMAXPROCS goroutines, a name each): PostgreSQL serialises the
// commits of transactions that NOTIFY, so this is where a grant's NOTIFY could
// cost throughput. Run the two alternately (-count) and compare ns/op; the test
// server runs with fsync off, which hides the commit's flush that a real server
// serialises too.
func BenchmarkLocker_AcquireReleaseParallel_GrantNotifyVsNot(b *testing.B) {
	for _, notify := range []bool{true, false} {
		b.Run(map[bool]string{true: "notify", false: "nonotify"}[notify], func(b *testing.B) {
			ctx := context.Background()
			l := openLocker(b, sharedPool, nil)
			if !notify {
				if err := postgres.WithoutGrantNotify(l); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				pair := pairOn(ctx, l, uniq(b, "lock"))
				for pb.Next() {
					if err := pair(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLocker_WatchLatency measures how soon a watcher on another Locker
// sees a change: from Release returning to the watch yielding the free state
// ("release"), and from Acquire returning to it yielding the grant ("grant"),
// median and p90 over b.N rounds. Both are one NOTIFY's trip through the server
// plus one Inspect.
//
//	go test -run '^$' -bench WatchLatency -benchtime 500x ./postgres/
func BenchmarkLocker_WatchLatency(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, watcher := openLocker(b, sharedPool, nil), openLocker(b, sharedPool, nil)
	name := uniq(b, "lock")
	states := make(chan fence.LockInfo)
	failed := make(chan error, 1)
	go func() {
		for info, err := range watcher.Watch(ctx, name) {
			if err != nil {
				failed <- err
				return
			}
			select {
			case states <- info:
			case <-ctx.Done():
				return
			}
		}
	}()
	// await returns how long after from the watch yielded a state satisfying ok.
	await := func(from time.Time, what string, ok func(fence.LockInfo) bool) time.Duration {
		timeout := time.NewTimer(10 * time.Second)
		defer timeout.Stop()
		for {
			select {
			case info := <-states:
				if ok(info) {
					return time.Since(from)
				}
			case err := <-failed:
				b.Fatalf("watch: %v", err)
			case <-timeout.C:
				b.Fatalf("watch: no %s within 10s", what)
			}
		}
	}
	await(time.Now(), "first state", func(fence.LockInfo) bool { return true })
	grant := make([]time.Duration, 0, b.N)
	release := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, err := holder.Acquire(ctx, name, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		grant = append(grant, await(time.Now(), "grant", func(i fence.LockInfo) bool { return i.Held && i.Token == lease.Token() }))
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
		release = append(release, await(time.Now(), "release", func(i fence.LockInfo) bool { return !i.Held }))
	}
	b.StopTimer()
	b.ReportMetric(float64(median(release).Nanoseconds()), "release-p50-ns")
	b.ReportMetric(float64(quantile(release, 0.9).Nanoseconds()), "release-p90-ns")
	b.ReportMetric(float64(median(grant).Nanoseconds()), "grant-p50-ns")
	b.ReportMetric(float64(quantile(grant, 0.9).Nanoseconds()), "grant-p90-ns")
}

// BenchmarkLocker_AcquireRelease_LockBeforeVsAfterSemaphores prices what
// semaphores and shared locks added to a lock's uncontended Acquire+Release:
// the acquire statement resets the row's holders and waiter record ("after")
// where the version before did not ("before"); Release is unchanged.
// Alternately on one server; read after/before.
//
//	go test -run '^$' -bench LockBeforeVsAfter -benchtime 2000x -count 5 ./postgres/
func BenchmarkLocker_AcquireRelease_LockBeforeVsAfterSemaphores(b *testing.B) {
	ctx := context.Background()
	after, before := openLocker(b, sharedPool, nil), openLocker(b, sharedPool, nil)
	if err := postgres.WithoutMultiReset(before); err != nil {
		b.Fatal(err)
	}
	pairedAs(b, "pair", "before", "after", pairOn(ctx, before, uniq(b, "before")), pairOn(ctx, after, uniq(b, "after")))
}

// BenchmarkLocker_AcquireRelease_SemaphoreVsLock compares an uncontended
// Acquire+Release pair of a semaphore permit (limit 3, two other permits held,
// so the grant rewrites a row of three holders) with a lock's, alternately on
// one server. Read permit/lock; shared/lock is the same for a shared lease
// (two other shared leases held).
//
//	go test -run '^$' -bench SemaphoreVsLock -benchtime 2000x -count 5 ./postgres/
func BenchmarkLocker_AcquireRelease_SemaphoreVsLock(b *testing.B) {
	ctx := context.Background()
	l := openLocker(b, sharedPool, nil)
	for _, kind := range []struct {
		name string
		opt  fence.AcquireOption
	}{{"permit", fence.WithLimit(3)}, {"shared", fence.WithShared()}} {
		b.Run(kind.name, func(b *testing.B) {
			name := uniq(b, kind.name)
			for i := 0; i < 2; i++ {
				if _, err := l.Acquire(ctx, name, time.Hour, kind.opt); err != nil {
					b.Fatal(err)
				}
			}
			pairedAs(b, "pair", "lock", kind.name, pairOn(ctx, l, uniq(b, "lock")), pairOn(ctx, l, name, kind.opt))
		})
	}
}

// BenchmarkLocker_Handoff_PermitVsLock compares the handoff of a permit (limit
// 2, the other permit held throughout) to a waiter on another Locker with a
// lock's handoff, one round of each in turn (fencetest.BenchmarkHandoffInterleaved):
// a release's NOTIFY and one acquire statement either way. Read permit/lock.
//
//	go test -run '^$' -bench PermitVsLock -benchtime 200x ./postgres/
func BenchmarkLocker_Handoff_PermitVsLock(b *testing.B) {
	holder := openLocker(b, sharedPool, nil)
	waiter := openLocker(b, sharedPool, &postgres.LockerOptions{PollInterval: time.Hour})
	lock, sem := uniq(b, "lock"), uniq(b, "sem")
	if _, err := holder.Acquire(context.Background(), sem, time.Hour, fence.WithLimit(2)); err != nil {
		b.Fatal(err)
	}
	fencetest.BenchmarkHandoffInterleaved(b,
		fencetest.HandoffSubject{Name: "lock", Holder: fencetest.LockerMutex(holder, lock), Waiter: fencetest.LockerMutex(waiter, lock)},
		fencetest.HandoffSubject{Name: "permit", Holder: &permitMutex{l: holder, name: sem}, Waiter: &permitMutex{l: waiter, name: sem}})
}

// permitMutex is a permit of a semaphore of 2 as a fencetest.Mutex: Lock waits
// (at most 30s) and keeps the lease for Unlock.
type permitMutex struct {
	l     fence.Locker
	name  string
	lease *fence.Lease
}

func (m *permitMutex) Lock(ctx context.Context) (err error) {
	m.lease, err = m.l.Acquire(ctx, m.name, 10*time.Second, fence.WithLimit(2), fence.WithWait(30*time.Second))
	return err
}

func (m *permitMutex) Unlock(ctx context.Context) error { return m.lease.Release(ctx) }
