// Package bench measures fence's lockers side by side with the libraries users pick
// instead (bsm/redislock, redsync, etcd's concurrency.Mutex), on throwaway servers
// it starts itself: one redis-server (internal/servers) and one single-member
// embedded etcd (internal/servers/etcdmember) shared by every row that needs them, fence
// serve's handler in process over an embedded bolt store, and a bolt store in
// process. `fence-bench` prints its table; the package's `go test -bench`
// benchmarks run the same measurements, so the two agree.
//
// Three figures per row:
//
//   - pair: the latency of an uncontended acquire+release pair on one client;
//   - handoff: from the holder's release call until a waiter, already waiting on a
//     client of its own, holds the lock;
//   - pairs/s: acquire+release pairs per second of N clients, each on a name of
//     its own, all at once.
//
// Run measures every row once per round, the rows in a fresh shuffled order in each
// round and each measurement, so that load from elsewhere on the machine hits them
// alike; the figures are medians over rounds. It must never import testing.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Lock is one client's handle on one lock name.
type Lock interface {
	// Acquire takes the lock. With wait false it fails at once if the lock is
	// held; with wait true it waits for it until ctx ends, the way the row's
	// library waits (fence: woken by the release; the peers: their own retries or
	// watches). It returns the library's error.
	Acquire(ctx context.Context, wait bool) error
	// Release releases the lock taken by the last Acquire and returns the
	// library's error.
	Release(ctx context.Context) error
}

// Client is one client of a row's system, with connections of its own.
type Client interface {
	// Lock returns the client's handle on the lock name. It does not contact the
	// server.
	Lock(name string) Lock
	// Close releases the client's connections and returns the first error.
	Close() error
}

// Budget bounds one measurement: it stops after N samples (pairs or handoffs) or
// once D has passed, whichever comes first; a zero field is no bound. A
// measurement takes at least one sample whatever the budget.
type Budget struct {
	N int
	D time.Duration
}

// done reports whether a measurement that took n samples since start is over.
func (b Budget) done(n int, start time.Time) bool {
	if n < 1 {
		return false
	}
	return (b.N > 0 && n >= b.N) || (b.D > 0 && time.Since(start) >= b.D) || (b.N <= 0 && b.D <= 0)
}

// maxSamples bounds any measurement whose budget is a duration only, so that a
// loop stays bounded in count as well as in time.
const maxSamples = 10_000_000

// lockTTL is the TTL of every lease the measurements take: far longer than a
// measurement, so that no lease expires during one.
const lockTTL = 30 * time.Second

// waitTimeout bounds a waiter's wait in a handoff.
const waitTimeout = 30 * time.Second

// BlockDelay is how long, at least, a handoff gives the waiter, after it started
// asking, to be waiting before the holder releases (what fencetest's handoff
// benchmarks give). A random BlockJitter more is added to it in each round, so the
// release never falls at a fixed phase of a polling waiter's retries (redislock
// polls every 10ms from its first try: a fixed 30ms delay would release just
// before its fourth try in every round and show a handoff of one round trip).
const (
	BlockDelay  = 30 * time.Millisecond
	BlockJitter = 20 * time.Millisecond
)

// Pair measures uncontended acquire+release pairs of l (a lock no other client
// takes) within bud, after one pair of warm-up (connections, script caches). It
// returns the median pair and the number of pairs measured, or the first error of
// an Acquire or Release.
func Pair(ctx context.Context, l Lock, bud Budget) (median time.Duration, n int, err error) {
	if err := pair(ctx, l); err != nil {
		return 0, 0, err
	}
	var samples []time.Duration
	start := time.Now()
	for !bud.done(len(samples), start) && len(samples) < maxSamples {
		t0 := time.Now()
		if err := pair(ctx, l); err != nil {
			return 0, len(samples), err
		}
		samples = append(samples, time.Since(t0))
	}
	return medianOf(samples), len(samples), nil
}

// pair is one acquire+release of l.
func pair(ctx context.Context, l Lock) error {
	if err := l.Acquire(ctx, false); err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// Handoff measures handoffs between holder and waiter, handles of two clients on
// one lock name, within bud. In each round the holder acquires, the waiter starts
// waiting and is given BlockDelay and up to BlockJitter, the holder releases; the sample is the time from
// the holder's release call until the waiter holds the lock, which it then
// releases. It returns the median handoff and the number of rounds, or an error
// if a call fails or the waiter got the lock while the holder held it.
func Handoff(ctx context.Context, holder, waiter Lock, bud Budget) (median time.Duration, n int, err error) {
	var samples []time.Duration
	start := time.Now()
	for !bud.done(len(samples), start) && len(samples) < maxSamples {
		d, err := handoff(ctx, holder, waiter)
		if err != nil {
			return 0, len(samples), err
		}
		samples = append(samples, d)
	}
	return medianOf(samples), len(samples), nil
}

// handoff is one round of Handoff.
func handoff(ctx context.Context, holder, waiter Lock) (time.Duration, error) {
	if err := holder.Acquire(ctx, false); err != nil {
		return 0, fmt.Errorf("holder: acquire: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- waiter.Acquire(wctx, true) }()
	timer := time.NewTimer(BlockDelay + rand.N(BlockJitter))
	defer timer.Stop()
	select {
	case err := <-got:
		if err == nil {
			_ = waiter.Release(ctx)
			_ = holder.Release(ctx)
			return 0, errors.New("the waiter got the lock while the holder held it")
		}
		_ = holder.Release(ctx)
		return 0, fmt.Errorf("waiter: acquire: %w", err)
	case <-timer.C:
	}
	t0 := time.Now()
	if err := holder.Release(ctx); err != nil {
		cancel()
		<-got
		return 0, fmt.Errorf("holder: release: %w", err)
	}
	err := <-got
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("waiter: acquire: %w", err)
	}
	if err := waiter.Release(ctx); err != nil {
		return 0, fmt.Errorf("waiter: release: %w", err)
	}
	return d, nil
}

// ExpiryTTL is the TTL of the holder that Expiry abandons: etcd's smallest lease
// TTL with the members' timing (etcdmember.MinLeaseTTL) and cluster mode's default.
const ExpiryTTL = time.Second

// Expiry measures handoffs after an expiry on the lock name within bud: in each
// round holder takes it with ExpiryTTL and abandons it (never renews nor releases
// it), the waiter, a handle on name of another client, at once starts waiting; the
// sample is the time from the holder's acquire call until the waiter holds the
// lock, which it then releases. It returns the median and the number of rounds, or
// an error if a call fails or the waiter got the lock before ExpiryTTL had passed
// since the holder's call (a second holder while the first one's lease was live).
func Expiry(ctx context.Context, holder Abandoner, name string, waiter Lock, bud Budget) (median time.Duration, n int, err error) {
	var samples []time.Duration
	start := time.Now()
	for !bud.done(len(samples), start) && len(samples) < maxSamples {
		d, err := expiry(ctx, holder, name, waiter)
		if err != nil {
			return 0, len(samples), err
		}
		samples = append(samples, d)
	}
	return medianOf(samples), len(samples), nil
}

// expiry is one round of Expiry.
func expiry(ctx context.Context, holder Abandoner, name string, waiter Lock) (time.Duration, error) {
	t0 := time.Now()
	if err := holder.Abandon(ctx, name, ExpiryTTL); err != nil {
		return 0, fmt.Errorf("holder: acquire: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	err := waiter.Acquire(wctx, true)
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("waiter: acquire: %w", err)
	}
	if d < ExpiryTTL {
		_ = waiter.Release(ctx)
		return 0, fmt.Errorf("the waiter got the lock %v after the holder's acquire call, before its TTL of %v had passed", d, ExpiryTTL)
	}
	if err := waiter.Release(ctx); err != nil {
		return 0, fmt.Errorf("waiter: release: %w", err)
	}
	return d, nil
}

// Throughput measures acquire+release pairs of locks, each on a client and name of
// its own, all at once (one goroutine each) within bud, bud.N counting the pairs of
// all of them together; every lock first makes one pair of warm-up. It returns the
// pairs per second and the number of pairs, or the first error.
func Throughput(ctx context.Context, locks []Lock, bud Budget) (perSec float64, n int, err error) {
	if len(locks) == 0 {
		return 0, 0, errors.New("bench: throughput of no clients")
	}
	for _, l := range locks {
		if err := pair(ctx, l); err != nil {
			return 0, 0, err
		}
	}
	limit := int64(maxSamples)
	if bud.N > 0 {
		limit = int64(max(bud.N, 1))
	}
	var deadline time.Time
	if bud.D > 0 {
		deadline = time.Now().Add(bud.D)
	} else if bud.N <= 0 {
		limit = 1
	}
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
		errMu      sync.Mutex
		first      error
		stop       atomic.Bool
	)
	start := time.Now()
	for _, l := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && next.Add(1) <= limit {
				if err := pair(ctx, l); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					stop.Store(true)
					return
				}
				done.Add(1)
				if !deadline.IsZero() && time.Now().After(deadline) {
					stop.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return 0, int(done.Load()), first
	}
	n = int(done.Load())
	return float64(n) / elapsed.Seconds(), n, nil
}

// medianOf returns the median of ds (the upper one of an even count), 0 if empty.
func medianOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
