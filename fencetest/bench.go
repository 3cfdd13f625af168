package fencetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/election"
)

// BenchmarkAcquireRelease measures an uncontended Acquire (10s TTL, no wait, with
// opts) and Release of one lock on l, the same way on every backend: ns/op is one
// pair. With fence.WithLimit or fence.WithShared in opts it measures a permit or a
// shared lease, so a backend compares the kinds on one server in one run.
func BenchmarkAcquireRelease(b *testing.B, l fence.Locker, opts ...fence.AcquireOption) {
	b.Helper()
	ctx := context.Background()
	name := uniqueName(b, "")
	for b.Loop() {
		lease, err := l.Acquire(ctx, name, 10*time.Second, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// A Mutex is a lock without fencing tokens that a backend's benchmarks compare its
// Locker with (etcd's concurrency.Mutex, ZooKeeper's lock recipe), by
// BenchmarkMutexLockUnlock and BenchmarkMutexHandoff. Lock blocks until the lock is
// held or ctx ends; Unlock gives it up. Either returns what went wrong.
type Mutex interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// BenchmarkMutexLockUnlock is BenchmarkAcquireRelease for a Mutex: ns/op is one
// uncontended Lock and Unlock pair.
func BenchmarkMutexLockUnlock(b *testing.B, m Mutex) {
	b.Helper()
	ctx := context.Background()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// waiterBlockDelay is how long a handoff round gives the waiter to make its failed
// try and start waiting before the holder releases. No Locker says "now waiting",
// so this is a delay, outside the measured interval; it only has to be long enough.
const waiterBlockDelay = 30 * time.Millisecond

// BenchmarkHandoff measures the handoff after a release, the same way on every
// backend: in each of b.N rounds, holder acquires the benchmark's lock (10s TTL), a
// waiter on waiter asks for it with fence.WithWait and is given waiterBlockDelay
// (30ms) to start waiting, and the holder releases it. The waiter's token must be
// above the holder's.
//
// It reports the median and 90th percentile, in milliseconds, of the time from the
// holder's Release call to the waiter holding the lock (handoff-median-ms,
// handoff-p90-ms) and the median of the Release call alone (release-median-ms). ns/op
// includes each round's delay and is not the figure to read. holder and waiter may
// be the same Locker; two (two connections, two sessions) are closer to real use.
// The holder acquires with opts, the waiter asks for the lock: with
// fence.WithShared it measures the handoff from the last shared holder to a
// waiting exclusive acquire (a writer waiting for a reader). A permit's handoff
// to another permit is BenchmarkPermitHandoff's.
func BenchmarkHandoff(b *testing.B, holder, waiter fence.Locker, opts ...fence.AcquireOption) {
	b.Helper()
	name := uniqueName(b, "")
	h, w := &lockerMutex{l: holder, name: name, opts: opts}, &lockerMutex{l: waiter, name: name}
	benchmarkHandoff(b, h, w, func() {
		if w.lease.Token() <= h.lease.Token() {
			b.Fatalf("waiter's token %d; want > holder's %d", w.lease.Token(), h.lease.Token())
		}
	})
}

// BenchmarkPermitHandoff is BenchmarkHandoff for a semaphore of n permits
// (fence.WithLimit(n)): n-1 permits are taken on holder for the whole benchmark,
// and in each round holder takes the last one, a waiter on waiter asks for a
// permit with fence.WithWait and is given waiterBlockDelay (30ms) to start
// waiting, and holder releases its permit. The waiter must get the released
// slot, with a token above the holder's. It reports the figures BenchmarkHandoff
// does (handoff-median-ms, handoff-p90-ms, release-median-ms), so a permit's
// handoff compares directly with a lock's on one backend.
func BenchmarkPermitHandoff(b *testing.B, holder, waiter fence.Locker, n int) {
	b.Helper()
	ctx := context.Background()
	name := uniqueName(b, "")
	limit := fence.WithLimit(n)
	for range n - 1 {
		lease, err := holder.Acquire(ctx, name, longTTL, limit, fence.WithAutoRenew())
		if err != nil {
			b.Fatalf("taking the other permits: %v", err)
		}
		defer func() { _ = lease.Release(ctx) }()
	}
	h := &lockerMutex{l: holder, name: name, opts: []fence.AcquireOption{limit}}
	w := &lockerMutex{l: waiter, name: name, opts: []fence.AcquireOption{limit}}
	benchmarkHandoff(b, h, w, func() {
		if w.lease.Token() <= h.lease.Token() || w.lease.Slot() != h.lease.Slot() {
			b.Fatalf("waiter got slot %d, token %d; want the released slot %d and a token above %d", w.lease.Slot(), w.lease.Token(), h.lease.Slot(), h.lease.Token())
		}
	})
}

// BenchmarkMutexHandoff is BenchmarkHandoff for two Mutexes on one lock (two
// sessions), with the same rounds and figures.
func BenchmarkMutexHandoff(b *testing.B, holder, waiter Mutex) {
	b.Helper()
	benchmarkHandoff(b, holder, waiter, nil)
}

// BenchmarkResignHandoff measures the handoff after a leader resigns, as
// BenchmarkHandoff does after a release: in each of b.N rounds a candidate on
// holder campaigns for the benchmark's election (package election, 10s TTL) and
// leads, a candidate on waiter campaigns and is given waiterBlockDelay (30ms) to
// start waiting, and the leader resigns. The new term's epoch must be above the
// old one's.
//
// It reports the median and 90th percentile, in milliseconds, of the time from
// the leader's Resign call to the waiting candidate's Campaign returning
// (handoff-median-ms, handoff-p90-ms) and the median of the Resign call alone
// (release-median-ms): the same figures as BenchmarkHandoff, so the two compare
// directly on one backend. ns/op includes each round's delay and is not the
// figure to read.
func BenchmarkResignHandoff(b *testing.B, holder, waiter fence.Locker) {
	b.Helper()
	name := uniqueName(b, "")
	h, w := newTermMutex(holder, name), newTermMutex(waiter, name)
	benchmarkHandoff(b, h, w, func() {
		if w.term.Epoch() <= h.term.Epoch() {
			b.Fatalf("new leader's epoch %d; want > the resigned leader's %d", w.term.Epoch(), h.term.Epoch())
		}
	})
}

// A HandoffSubject is a lock (or an election) whose handoff
// BenchmarkHandoffInterleaved measures: two of its holders, as Mutexes, and
// the name its figures are reported under.
type HandoffSubject struct {
	Name           string
	Holder, Waiter Mutex
}

// BenchmarkHandoffInterleaved runs BenchmarkHandoff's rounds on several subjects
// in turn, one round of each per iteration, so that they see the same servers
// and the same load on the machine: a fair comparison in one run. For each
// subject it reports the median and 90th percentile handoff, in milliseconds
// (NAME-median-ms, NAME-p90-ms), and for each subject after the first its
// median over the first's (NAME/FIRST: above 1 means slower than the first).
func BenchmarkHandoffInterleaved(b *testing.B, subjects ...HandoffSubject) {
	b.Helper()
	if len(subjects) == 0 {
		b.Fatal("fencetest: BenchmarkHandoffInterleaved needs at least one subject")
	}
	ctx := context.Background()
	handoffs := make([][]time.Duration, len(subjects))
	for i := 0; i < b.N; i++ {
		for j, s := range subjects {
			d, _, err := handoffRound(ctx, s.Holder, s.Waiter, nil)
			if err != nil {
				b.Fatalf("%s: %v", s.Name, err)
			}
			handoffs[j] = append(handoffs[j], d)
		}
	}
	if b.N == 0 {
		return
	}
	medians := make([]time.Duration, len(subjects))
	for j, s := range subjects {
		slices.Sort(handoffs[j])
		medians[j] = handoffs[j][len(handoffs[j])/2]
		b.ReportMetric(ms(medians[j]), s.Name+"-median-ms")
		b.ReportMetric(ms(handoffs[j][len(handoffs[j])*9/10]), s.Name+"-p90-ms")
		if j > 0 && medians[0] > 0 {
			b.ReportMetric(float64(medians[j])/float64(medians[0]), s.Name+"/"+subjects[0].Name)
		}
	}
}

// LockerMutex returns the lock name on l as a Mutex, for BenchmarkHandoffInterleaved:
// Lock acquires it (10s TTL), waiting at most 30s, and Unlock releases that lease.
func LockerMutex(l fence.Locker, name string) Mutex { return &lockerMutex{l: l, name: name} }

// ElectionMutex returns a candidate for the election name on l (package
// election, 10s TTL) as a Mutex, for BenchmarkHandoffInterleaved: Lock
// campaigns until it leads, waiting at most 30s, and Unlock resigns that term.
func ElectionMutex(l fence.Locker, name string) Mutex { return newTermMutex(l, name) }

// lockerMutex is a Locker's lock on one name as a Mutex: Lock waits (at most 30s)
// and keeps the lease for Unlock. Its acquires add opts.
type lockerMutex struct {
	l     fence.Locker
	name  string
	opts  []fence.AcquireOption
	lease *fence.Lease
}

func (m *lockerMutex) Lock(ctx context.Context) (err error) {
	m.lease, err = m.l.Acquire(ctx, m.name, 10*time.Second, slices.Concat(m.opts, []fence.AcquireOption{fence.WithWait(longWait)})...)
	return err
}

func (m *lockerMutex) Unlock(ctx context.Context) error { return m.lease.Release(ctx) }

// termMutex is a candidate of an election as a Mutex: Lock campaigns (at most
// 30s) and keeps the term for Unlock, which resigns it.
type termMutex struct {
	e    *election.Election
	err  error // election.New's, returned by Lock
	term *election.Term
}

func newTermMutex(l fence.Locker, name string) *termMutex {
	e, err := election.New(l, name, election.WithTTL(10*time.Second))
	return &termMutex{e: e, err: err}
}

func (m *termMutex) Lock(ctx context.Context) (err error) {
	if m.err != nil {
		return m.err
	}
	ctx, cancel := context.WithTimeout(ctx, longWait)
	defer cancel()
	m.term, err = m.e.Campaign(ctx)
	return err
}

func (m *termMutex) Unlock(ctx context.Context) error { return m.term.Resign(ctx) }

// benchmarkHandoff runs BenchmarkHandoff's rounds on holder and waiter, calling
// check (if not nil) once the waiter holds the lock, and reports the figures.
func benchmarkHandoff(b *testing.B, holder, waiter Mutex, check func()) {
	ctx := context.Background()
	handoffs := make([]time.Duration, 0, b.N)
	releases := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		handoff, release, err := handoffRound(ctx, holder, waiter, check)
		if err != nil {
			b.Fatal(err)
		}
		handoffs = append(handoffs, handoff)
		releases = append(releases, release)
	}
	if len(handoffs) == 0 {
		return
	}
	slices.Sort(handoffs)
	slices.Sort(releases)
	b.ReportMetric(ms(handoffs[len(handoffs)/2]), "handoff-median-ms")
	b.ReportMetric(ms(handoffs[len(handoffs)*9/10]), "handoff-p90-ms")
	b.ReportMetric(ms(releases[len(releases)/2]), "release-median-ms")
}

// handoffRound is one round of BenchmarkHandoff: holder locks, waiter asks and
// is given waiterBlockDelay to start waiting, holder unlocks, and once waiter
// holds the lock, check (if any) runs and waiter unlocks. It returns the time
// from the holder's Unlock call to the waiter holding the lock, and of the
// Unlock call alone.
func handoffRound(ctx context.Context, holder, waiter Mutex, check func()) (handoff, release time.Duration, err error) {
	if err := holder.Lock(ctx); err != nil {
		return 0, 0, fmt.Errorf("holder: %w", err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	select {
	case err := <-got: // the round would measure nothing
		return 0, 0, fmt.Errorf("waiter did not wait for the holder (%v)", err)
	case <-time.After(waiterBlockDelay):
	}
	start := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		return 0, 0, fmt.Errorf("holder's release: %w", err)
	}
	release = time.Since(start)
	if err := <-got; err != nil {
		return 0, 0, fmt.Errorf("waiter: %w", err)
	}
	handoff = time.Since(start)
	if check != nil {
		check()
	}
	if err := waiter.Unlock(ctx); err != nil {
		return 0, 0, fmt.Errorf("waiter's release: %w", err)
	}
	return handoff, release, nil
}

// ms returns d in (fractional) milliseconds, the unit of the benchmarks' figures.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkExpiryHandoff measures the handoff after an expiry, the same way on
// every backend: in each of b.N rounds, holder acquires the benchmark's lock for ttl
// and never releases it, a waiter on waiter (already waiting: it asks at once, with
// fence.WithWait) gets the lock once the holder's lease expires, and the sample is
// the waiter's grant time minus the holder's deadline (Lease.Deadline: when the
// holder must stop trusting its lease, never later than the backend's expiry).
//
// It reports, in milliseconds after the holder's deadline, the median (late-p50-ms),
// the 99th percentile by nearest rank (late-p99-ms; with fewer than 100 rounds that
// is the maximum) and the maximum (late-max-ms), and late-p99/ttl. As a control for
// a loaded machine it also reports how late a plain local timer set for the holder's
// deadline fired in the same rounds (timer-p99-ms, timer-max-ms): scheduling delay
// that no backend can beat. A negative sample
// would be a grant before the holder's deadline; it fails the benchmark. ns/op is a
// whole round (about ttl) and is not the figure to read. holder and waiter may be
// the same Locker; two (two connections, two sessions) are closer to real use.
func BenchmarkExpiryHandoff(b *testing.B, holder, waiter fence.Locker, ttl time.Duration) {
	b.Helper()
	if err := fence.ValidateTTL(ttl); err != nil {
		b.Fatal(err)
	}
	late := make([]time.Duration, 0, b.N)
	sleeps := make([]time.Duration, 0, b.N) // the same wake-up by a local timer
	startedLate := 0
	// One name for all rounds, free again at the end of each: a lock in steady use
	// (a first use can cost more, as ZooKeeper's lock directory is created then).
	name := uniqueName(b, "")
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), ttl+time.Minute)
		h, err := holder.Acquire(ctx, name, ttl)
		if err != nil {
			cancel()
			b.Fatalf("holder: %v", err)
		}
		type grant struct {
			lease  *fence.Lease
			called time.Time
			at     time.Time
			err    error
		}
		got := make(chan grant, 1)
		timer := make(chan time.Duration, 1)
		go func() {
			time.Sleep(time.Until(h.Deadline()))
			timer <- time.Since(h.Deadline())
		}()
		go func() {
			called := time.Now()
			l, err := waiter.Acquire(ctx, name, longTTL, fence.WithWait(ttl+longWait))
			got <- grant{l, called, time.Now(), err}
		}()
		g := <-got
		cancel()
		if g.err != nil {
			b.Fatalf("waiter: %v", g.err)
		}
		if g.lease.Token() <= h.Token() {
			b.Fatalf("waiter's token %d; want > holder's %d", g.lease.Token(), h.Token())
		}
		d := g.at.Sub(h.Deadline())
		if d < 0 {
			b.Fatalf("granted %v before the holder's deadline", -d)
		}
		if g.called.After(h.Deadline()) {
			startedLate++ // the waiter was not waiting yet: a slow machine
		}
		late = append(late, d)
		sleeps = append(sleeps, <-timer)
		rctx, rcancel := context.WithTimeout(context.Background(), promptly)
		if err := g.lease.Release(rctx); err != nil {
			b.Errorf("release: %v", err)
		}
		rcancel()
	}
	if len(late) == 0 {
		return
	}
	slices.Sort(late)
	slices.Sort(sleeps)
	p99 := func(ds []time.Duration) time.Duration { return ds[(len(ds)*99+99)/100-1] }
	b.ReportMetric(ms(late[len(late)/2]), "late-p50-ms")
	b.ReportMetric(ms(p99(late)), "late-p99-ms")
	b.ReportMetric(ms(late[len(late)-1]), "late-max-ms")
	b.ReportMetric(float64(p99(late))/float64(ttl), "late-p99/ttl")
	b.ReportMetric(ms(p99(sleeps)), "timer-p99-ms")
	b.ReportMetric(ms(sleeps[len(sleeps)-1]), "timer-max-ms")
	if startedLate > 0 {
		b.Logf("%d of %d rounds: the waiter called Acquire after the holder's deadline (machine too slow for ttl %v)", startedLate, len(late), ttl)
	}
}
