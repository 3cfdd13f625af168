package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// watchPromptly bounds how soon a watcher must see a change, as fencetest's does:
// well under driver.DefaultWatchPoll, so only a notification can explain it.
const watchPromptly = 2 * time.Second

// watchState is one state or error a watch yielded.
type watchState struct {
	info fence.LockInfo
	err  error
}

// startWatch runs l.Watch(name) in a goroutine until ctx or t ends or stop is
// called, and returns what it yields; done closes when the sequence has ended.
func startWatch(t testing.TB, ctx context.Context, l *postgres.Locker, name string) (states <-chan watchState, done <-chan struct{}, stop context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan watchState, 64)
	fin := make(chan struct{})
	go func() {
		defer close(fin)
		for info, err := range l.Watch(ctx, name) {
			select {
			case out <- watchState{info, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-fin:
		case <-time.After(5 * time.Second):
			t.Errorf("Watch(%q) still running 5s after its context was cancelled", name)
		}
	})
	return out, fin, cancel
}

// awaitState returns the first state from states that satisfies ok, failing t
// on an error or if none comes within the bound.
func awaitState(t testing.TB, states <-chan watchState, within time.Duration, what string, ok func(fence.LockInfo) bool) fence.LockInfo {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	var last fence.LockInfo
	for {
		select {
		case s := <-states:
			if s.err != nil {
				t.Fatalf("watch yielded %v while waiting for %s", s.err, what)
			}
			if last.Name != "" && s.info.Index() <= last.Index() {
				t.Fatalf("watch yielded %+v after %+v; want each index greater than the last", s.info, last)
			}
			last = s.info
			if ok(s.info) {
				return s.info
			}
		case <-timer.C:
			t.Fatalf("watch: no state with %s within %v (last state %+v)", what, within, last)
			return fence.LockInfo{}
		}
	}
}

func isFree(i fence.LockInfo) bool { return !i.Held }

// heldWith returns a predicate true of a state held under tok.
func heldWith(tok fence.Token) func(fence.LockInfo) bool {
	return func(i fence.LockInfo) bool { return i.Held && i.Token == tok }
}

// listenerPIDs returns the backends of pool's database that LISTEN as a
// Locker's listener does.
func listenerPIDs(t testing.TB, ctx context.Context, pool *pgxpool.Pool) []int32 {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN "fence_locks"' ORDER BY pid`)
	wantOK(t, "list the LISTEN connections", err)
	defer rows.Close()
	var pids []int32
	for rows.Next() {
		var pid int32
		wantOK(t, "scan a pid", rows.Scan(&pid))
		pids = append(pids, pid)
	}
	wantOK(t, "list the LISTEN connections", rows.Err())
	return pids
}

// waitForListeners returns the LISTEN connections of pool's database once there
// are exactly n, none of them in not, failing t after 10s.
func waitForListeners(t testing.TB, ctx context.Context, pool *pgxpool.Pool, n int, not ...int32) []int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := listenerPIDs(t, ctx, pool)
		fresh := len(pids) == n
		for _, p := range pids {
			for _, o := range not {
				fresh = fresh && p != o
			}
		}
		if fresh {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("LISTEN connections %v after 10s; want %d, none of %v", pids, n, not)
		}
		time.Sleep(5 * time.Millisecond) // polling the server: no channel can tell us
	}
}

func TestLocker_Acquire_NotifiesWatchChannelOnlyWhenGranted(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	l := lockerOn(t, pool, nil)
	pc, err := pool.Acquire(ctx)
	wantOK(t, "take a connection", err)
	defer pc.Release()
	_, err = pc.Exec(ctx, `LISTEN "fence_locks:watch"`)
	wantOK(t, "LISTEN on the watch channel", err)
	_, err = pc.Exec(ctx, `LISTEN "fence_locks"`)
	wantOK(t, "LISTEN on the release channel", err)
	// next returns the next notification, or "" after 300ms.
	next := func() string {
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		n, err := pc.Conn().WaitForNotification(wctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("WaitForNotification: %v", err)
			}
			return ""
		}
		return n.Channel + " " + n.Payload
	}

	lease := mustAcquire(t, ctx, l, "job", time.Minute)
	if got, want := next(), "fence_locks:watch job"; got != want {
		t.Fatalf("notification after a grant = %q, want %q", got, want)
	}
	_, err = fence.TryAcquire(ctx, l, "job", time.Minute)
	wantIs(t, "TryAcquire of the held lock", err, fence.ErrNotAcquired)
	wantOK(t, "Renew", lease.Renew(ctx, time.Minute))
	if got := next(); got != "" {
		t.Fatalf("notification after a refused acquire and a renewal = %q, want none", got)
	}
	wantOK(t, "Release", lease.Release(ctx))
	if got, want := next(), "fence_locks job"; got != want {
		t.Fatalf("notification after a release = %q, want %q (the waiters' channel only)", got, want)
	}
	if got := next(); got != "" {
		t.Fatalf("second notification after a release = %q, want none", got)
	}
}

// TestLocker_Watch_ListenConnectionLost_ListenerBackWatcherSeesChanges cuts the
// Locker's LISTEN connection and keeps the pool from giving it another while the
// lock changes (the change's notification is lost): once the listener is back,
// the watcher sees that change, and the next one, each well before the
// fallback poll.
func TestLocker_Watch_ListenConnectionLost_ListenerBackWatcherSeesChanges(t *testing.T) {
	ctx := ctxT(t)
	dsn := server.CreateDatabase(t)
	watchPool := newPool(t, dsn+"&pool_max_conns=1")
	l := lockerOn(t, watchPool, nil)
	otherPool := newPool(t, dsn) // the changer's, and the test's while watchPool is taken
	changer := openLocker(t, otherPool, nil)
	name := "job"
	states, _, _ := startWatch(t, ctx, l, name)
	awaitState(t, states, watchPromptly, "the first state", isFree)
	pids := waitForListeners(t, ctx, otherPool, 1)

	// change grants the lock if it is free, else releases it, and returns what
	// the watcher must see next.
	var lease *fence.Lease
	change := func() func(fence.LockInfo) bool {
		if lease == nil {
			lease = mustAcquire(t, ctx, changer, name, time.Minute)
			return heldWith(lease.Token())
		}
		wantOK(t, "Release", lease.Release(ctx))
		lease = nil
		return isFree
	}
	for round := 0; round < 3; round++ {
		// The pool's one connection is ours, so the listener cannot reconnect yet.
		held, err := watchPool.Acquire(ctx)
		wantOK(t, "take the pool's one connection", err)
		var ok bool
		wantOK(t, "terminate the LISTEN connection",
			held.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pids[0]).Scan(&ok))
		waitForListeners(t, ctx, otherPool, 0)
		want := change()
		held.Release()
		awaitState(t, states, watchPromptly, fmt.Sprintf("the change of round %d made while nobody listened", round), want)
		pids = waitForListeners(t, ctx, otherPool, 1, pids...)

		// The listener is back: a change now is notified.
		awaitState(t, states, watchPromptly, fmt.Sprintf("the change of round %d after the listener came back", round), change())
	}
}

func TestLocker_Watch_ManyWatchersOfOneName_AllSeeEachChangeOnOneConnection(t *testing.T) {
	const watchers = 50
	ctx := ctxT(t)
	pool := freshDB(t)
	l := lockerOn(t, pool, nil)
	changer := openLocker(t, pool, nil)
	name := "job"
	all := make([]<-chan watchState, watchers)
	for i := range all {
		all[i], _, _ = startWatch(t, ctx, l, name)
		awaitState(t, all[i], watchPromptly, "the first state", isFree)
	}
	for round := 0; round < 3; round++ {
		lease := mustAcquire(t, ctx, changer, name, time.Minute)
		for _, states := range all {
			awaitState(t, states, watchPromptly, "the grant", heldWith(lease.Token()))
		}
		wantOK(t, "Release", lease.Release(ctx))
		for _, states := range all {
			awaitState(t, states, watchPromptly, "the release", isFree)
		}
	}
	if pids := listenerPIDs(t, ctx, pool); len(pids) != 1 {
		t.Fatalf("%d watchers of one Locker: %d LISTEN connections, want 1", watchers, len(pids))
	}
}

func TestLocker_Watch_ManyNames_OneConnectionNothingLeftAfterCancel(t *testing.T) {
	const names, maxConns = 200, 4
	ctx := ctxT(t)
	dsn := server.CreateDatabase(t)
	pool := newPool(t, fmt.Sprintf("%s&pool_max_conns=%d", dsn, maxConns))
	l := lockerOn(t, pool, nil)
	changer := openLocker(t, pool, nil)
	// Start the listener and fill the pool first, so that the baseline counts
	// their goroutines.
	states, done, stop := startWatch(t, ctx, l, "warm-up")
	awaitState(t, states, watchPromptly, "the first state", isFree)
	stop()
	<-done
	conns := make([]*pgxpool.Conn, maxConns)
	for i := range conns {
		c, err := pool.Acquire(ctx)
		wantOK(t, "fill the pool", err)
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
	waitForSubscriptions(t, l, 0)
	baseline := runtime.NumGoroutine()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	all := make([]<-chan watchState, names)
	dones := make([]<-chan struct{}, names)
	for i := range all {
		all[i], dones[i], _ = startWatch(t, wctx, l, fmt.Sprintf("job-%d", i))
	}
	for i, states := range all {
		awaitState(t, states, watchPromptly, fmt.Sprintf("the first state of job-%d", i), isFree)
	}
	if n := postgres.WatchSubscriptions(l); n != names {
		t.Fatalf("%d watches: %d subscriptions, want %d", names, n, names)
	}
	for i := 0; i < names; i += 20 {
		lease := mustAcquire(t, ctx, changer, fmt.Sprintf("job-%d", i), time.Minute)
		awaitState(t, all[i], watchPromptly, "the grant", heldWith(lease.Token()))
		wantOK(t, "Release", lease.Release(ctx))
		awaitState(t, all[i], watchPromptly, "the release", isFree)
	}
	var backends int
	wantOK(t, "count the backends", pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&backends))
	if backends > maxConns+1 {
		t.Fatalf("%d watches: %d backends of the database, want at most %d (the pool's %d and the listener)", names, backends, maxConns+1, maxConns)
	}
	if pids := listenerPIDs(t, ctx, pool); len(pids) != 1 {
		t.Fatalf("%d watches on %d names: %d LISTEN connections, want 1", names, names, len(pids))
	}

	cancel()
	for i, d := range dones {
		select {
		case <-d:
		case <-time.After(5 * time.Second):
			t.Fatalf("Watch(job-%d) still running 5s after its context was cancelled", i)
		}
	}
	waitForSubscriptions(t, l, 0)
	// What the watches started has ended too (context.AfterFunc's goroutines
	// run briefly after the cancel).
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 5s after %d watches ended, want at most the %d before them", runtime.NumGoroutine(), names, baseline)
		}
		time.Sleep(time.Millisecond)
	}
	if pids := listenerPIDs(t, ctx, pool); len(pids) != 1 {
		t.Fatalf("after the watches ended: %d LISTEN connections, want the Locker's 1 until Close", len(pids))
	}
}

// waitForSubscriptions returns once l holds n Watch subscriptions, failing t
// after 5s (a subscription is removed just after its watch ends).
func waitForSubscriptions(t testing.TB, l *postgres.Locker, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for postgres.WatchSubscriptions(l) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Watch subscriptions after 5s, want %d", postgres.WatchSubscriptions(l), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLocker_Watch_BadOptionOrClosed_OneErrorThenEnd(t *testing.T) {
	ctx := ctxT(t)
	closed := openLocker(t, sharedPool, nil)
	wantOK(t, "Close", closed.Close())
	for _, c := range []struct {
		what string
		l    *postgres.Locker
		want error
	}{
		{"a bad table option", postgres.NewLocker(sharedPool, &postgres.LockerOptions{Table: "bad name"}), fence.ErrInvalid},
		{"a nil pool", postgres.NewLocker(nil, nil), fence.ErrInvalid},
		{"a closed Locker", closed, fence.ErrClosed},
	} {
		start := time.Now()
		n := 0
		for _, err := range c.l.Watch(ctx, "job") {
			n++
			wantIs(t, "Watch on "+c.what, err, c.want)
		}
		if n != 1 {
			t.Fatalf("Watch on %s yielded %d times; want one error, then the end", c.what, n)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("Watch on %s took %v to report it; want it at once", c.what, took)
		}
	}

	l := openLocker(t, sharedPool, nil)
	states, done, _ := startWatch(t, ctx, l, uniq(t, "lock"))
	awaitState(t, states, watchPromptly, "the first state", isFree)
	wantOK(t, "Close", l.Close())
	select {
	case s := <-states:
		wantIs(t, "Watch when its Locker closed", s.err, fence.ErrClosed)
	case <-time.After(watchPromptly):
		t.Fatalf("Watch yielded nothing within %v of its Locker's Close; want ErrClosed", watchPromptly)
	}
	select {
	case <-done:
	case <-time.After(watchPromptly):
		t.Fatalf("Watch still running %v after ErrClosed", watchPromptly)
	}
}
