package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// wantIs fails t unless errors.Is(err, target).
func wantIs(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want one matching %v", what, err, target)
	}
}

// wantOK fails t if err is not nil.
func wantOK(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: unexpected error: %v", what, err)
	}
}

// wantStale fails t unless err is a *fence.StaleTokenError with the given highest.
func wantStale(t testing.TB, what string, err error, highest fence.Token) {
	t.Helper()
	var st *fence.StaleTokenError
	if !errors.As(err, &st) {
		t.Fatalf("%s: error = %v, want a *fence.StaleTokenError", what, err)
	}
	if st.Highest != highest {
		t.Fatalf("%s: StaleTokenError.Highest = %d, want %d (error %v)", what, st.Highest, highest, err)
	}
}

// fenceOf is a fence of lock name with a lease id derived from the token, so
// each token is its own lease.
func fenceOf(name string, tok fence.Token) fence.Fence {
	return fence.Fence{Name: name, Token: tok, LeaseID: "lease-" + tok.String()}
}

// lockTest returns what a Locker test starts with: a context, a Locker on the
// shared database (closed when t ends) and a lock name of its own.
func lockTest(t testing.TB, opts *postgres.LockerOptions) (context.Context, *postgres.Locker, string) {
	t.Helper()
	return ctxT(t), lockerOn(t, sharedPool, opts), uniq(t, "lock")
}

// lockerOn returns a Locker on pool with its schema created, closed when t ends.
func lockerOn(t testing.TB, pool *pgxpool.Pool, opts *postgres.LockerOptions) *postgres.Locker {
	t.Helper()
	l := openLocker(t, pool, opts)
	wantOK(t, "CreateSchema", l.CreateSchema(ctxT(t)))
	return l
}

// openLocker returns a Locker on pool, closed when t ends.
func openLocker(t testing.TB, pool *pgxpool.Pool, opts *postgres.LockerOptions) *postgres.Locker {
	l := postgres.NewLocker(pool, opts)
	t.Cleanup(func() { l.Close() })
	return l
}

// mustAcquire returns the lease of name that l grants, failing t if it does not.
func mustAcquire(t testing.TB, ctx context.Context, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, name, ttl, opts...)
	wantOK(t, "Acquire("+name+")", err)
	return lease
}

// cycle acquires and releases name on l n times, failing t unless every token is
// above the one before (the first above last). It returns the last token.
func cycle(t testing.TB, ctx context.Context, l fence.Locker, name string, n int, last fence.Token) fence.Token {
	t.Helper()
	for i := 0; i < n; i++ {
		lease := mustAcquire(t, ctx, l, name, time.Minute)
		if lease.Token() <= last {
			t.Fatalf("token %d of %q after %d", lease.Token(), name, last)
		}
		last = lease.Token()
		wantOK(t, "Release("+name+")", lease.Release(ctx))
	}
	return last
}

// acquired is the outcome of an Acquire run by acquireLater.
type acquired struct {
	lease *fence.Lease
	err   error
}

// acquireLater runs a waiting Acquire of name (with opts) on l in its own
// goroutine and returns once a Locker listens on pool's database (a waiter
// subscribes before it starts listening); the outcome comes on the channel.
func acquireLater(t testing.TB, ctx context.Context, pool *pgxpool.Pool, l fence.Locker, name string, wait time.Duration, opts ...fence.AcquireOption) <-chan acquired {
	t.Helper()
	got := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, time.Minute, append(opts, fence.WithWait(wait))...)
		got <- acquired{lease, err}
	}()
	waitForListenerOn(t, ctx, pool, "fence_locks")
	return got
}

// waitForListenerOn returns once a connection of pool's database LISTENs on
// channel, and fails t after 10s.
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
