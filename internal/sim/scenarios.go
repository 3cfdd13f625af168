package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// ErrUnknownScenario is returned (wrapped) by Simulate for a scenario name that
// Scenarios does not list.
var ErrUnknownScenario = errors.New("sim: unknown scenario")

// Options configure a simulation.
type Options struct {
	// Seed seeds the random source (math/rand/v2 PCG). The scripted scenarios
	// ignore it; random draws every pause and delay from it.
	Seed uint64
	// Workers is the number of workers of the random scenario, 1 to 26 (0 means
	// 4), and the number of permits of semaphore-pause, 2 to 25 (0 means 3).
	Workers int
	// Horizon is how long the random scenario runs, in virtual time; 0 means 400
	// ticks. At most 100000 ticks.
	Horizon time.Duration
}

// Scenario is a named simulation.
type Scenario struct {
	Name    string // as given to Simulate and to fence simulate --scenario
	Summary string // one line saying what it shows
	run     func(o Options, fencing bool) (*Report, error)
}

// Report is what Simulate returns: one or more runs of a scenario, and for
// payments the table of which protection stops which case.
type Report struct {
	Scenario string
	Seed     uint64
	Runs     []*Run
	Table    *Table // nil except for payments
}

var scenarios = []Scenario{
	{"pause-past-ttl", "the seed's race: A pauses past its TTL, B acquires and writes, A wakes and writes", pausePastTTL},
	{"check-then-write", "A checks that it still holds the lock, then pauses between the check and the write", checkThenWrite},
	{"failover", "the lock service fails over and its counter goes backwards; the resource's highest token still rejects; healing restores progress", failover},
	{"semaphore-pause", "a semaphore of N: a permit holder pauses past its TTL, the next holder of its slot writes the slot's partition, the paused one wakes and writes it too", semaphorePause},
	{"payments", "the payments incident: five ways two instances process the same batch, and which protection stops each", payments},
	{"random", "N workers with random pauses and network delays from the seed; checks the fencing invariant", random},
}

// Scenarios returns the scenarios Simulate knows, in a fixed order.
func Scenarios() []Scenario { return append([]Scenario(nil), scenarios...) }

// ScenarioNames returns the names of the scenarios, in the order of Scenarios.
func ScenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.Name
	}
	return names
}

// Simulate runs scenario name with fencing on or off. The same arguments always
// give the same report. It returns an error matching ErrUnknownScenario for an
// unknown name and fence.ErrInvalid for options out of range.
func Simulate(name string, fencing bool, o Options) (*Report, error) {
	if o.Workers < 0 || o.Workers > 26 {
		return nil, fmt.Errorf("sim: workers must be 1 to 26, got %d: %w", o.Workers, fence.ErrInvalid)
	}
	if o.Horizon < 0 || o.Horizon > T(100000) {
		return nil, fmt.Errorf("sim: horizon must be 0 to %v, got %v: %w", T(100000), o.Horizon, fence.ErrInvalid)
	}
	for _, sc := range scenarios {
		if sc.Name == name {
			return sc.run(o, fencing)
		}
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownScenario, name, strings.Join(ScenarioNames(), ", "))
}

// SimulateBoth runs scenario name with fencing off, then on, and returns both
// runs in one report (a payments table once). Errors are as for Simulate.
func SimulateBoth(name string, o Options) (*Report, error) {
	off, err := Simulate(name, false, o)
	if err != nil {
		return nil, err
	}
	on, err := Simulate(name, true, o)
	if err != nil {
		return nil, err
	}
	off.Runs = append(off.Runs, on.Runs...)
	if off.Table == nil {
		off.Table = on.Table
	}
	return off, nil
}

func single(s *sim) (*Report, error) {
	if err := s.loop(); err != nil {
		return nil, err
	}
	s.summarize()
	return &Report{Scenario: s.run.Scenario, Seed: s.run.Seed, Runs: []*Run{s.run}}, nil
}

const (
	ledgerLock = "ledger-lock"
	ledger     = "ledger"
)

// pausePastTTL is the seed's timeline, tick for tick.
func pausePastTTL(o Options, fencing bool) (*Report, error) {
	s := newSim("pause-past-ttl", fencing, o.Seed, T(30))
	s.run.Title = "A pauses past its TTL; B acquires and writes; A wakes up and writes"
	a, b := s.worker("A"), s.worker("B")
	s.at(T(0), a, func() { s.acquire(a, ledgerLock, T(30)) })
	s.at(T(10), a, func() { s.pause(a, T(22), "GC") })
	s.at(T(31), b, func() {
		if _, err := s.acquire(b, ledgerLock, T(30)); err == nil {
			s.write(b, ledger, "B's data", 0, nil)
		}
	})
	s.at(T(32), a, func() { s.write(a, ledger, "A's data", 0, nil) })
	return single(s)
}

// checkThenWrite shows that checking the lease right before writing is not enough.
func checkThenWrite(o Options, fencing bool) (*Report, error) {
	s := newSim("check-then-write", fencing, o.Seed, T(30))
	s.run.Title = "A checks it still holds the lock, then pauses between the check and the write"
	a, b := s.worker("A"), s.worker("B")
	s.at(T(0), a, func() { s.acquire(a, ledgerLock, T(30)) })
	s.at(T(27), a, func() {
		if !s.check(a) {
			return
		}
		s.after(T(1), a, func() { s.pause(a, T(6), "GC") })
		s.after(T(1), a, func() { s.write(a, ledger, "A's data", 0, nil) })
	})
	s.at(T(31), b, func() {
		if _, err := s.acquire(b, ledgerLock, T(30)); err == nil {
			s.write(b, ledger, "B's data", 0, nil)
		}
	})
	return single(s)
}

// failover loses the lock service's recent increments.
func failover(o Options, fencing bool) (*Report, error) {
	s := newSim("failover", fencing, o.Seed, T(30))
	s.run.Title = "the lock service fails over to a replica that missed two increments: its counter goes from 3 back to 1"
	a, b, c := s.worker("A"), s.worker("B"), s.worker("C")
	s.at(T(0), a, func() {
		if _, err := s.acquire(a, ledgerLock, T(30)); err == nil {
			s.after(T(1), a, func() { s.write(a, ledger, "entry 1 by A", 0, nil) })
			s.after(T(2), a, func() { s.release(a) })
		}
	})
	snap := s.locker.Snapshot()
	s.system(T(3), func() { snap = s.snapshot(ledgerLock) })
	s.at(T(4), b, func() {
		if _, err := s.acquire(b, ledgerLock, T(30)); err == nil {
			s.after(T(1), b, func() { s.write(b, ledger, "entry 2 by B", 0, nil) })
			s.after(T(2), b, func() { s.release(b) })
		}
	})
	s.at(T(7), b, func() {
		if _, err := s.acquire(b, ledgerLock, T(30)); err == nil {
			s.after(T(1), b, func() { s.write(b, ledger, "entry 3 by B", 0, nil) })
			s.after(T(10), b, func() { s.write(b, ledger, "entry 5 by B", 0, nil) })
		}
	})
	s.system(T(10), func() { s.failover(ledgerLock, snap) })
	s.at(T(11), c, func() {
		if _, err := s.acquire(c, ledgerLock, T(30)); err != nil {
			return
		}
		s.after(T(1), c, func() {
			s.write(c, ledger, "entry 4 by C", 0, func(err error) {
				if err == nil {
					return
				}
				// P4: the guard's rejection carries the highest token seen; raise
				// the counter past it and try again with a fresh lease.
				s.heal(c, ledgerLock, err)
				s.after(T(1), c, func() { s.release(c) })
				s.after(T(2), c, func() {
					if _, err := s.acquire(c, ledgerLock, T(30)); err == nil {
						s.after(T(1), c, func() { s.write(c, ledger, "entry 4 by C", 0, nil) })
					}
				})
			})
		})
	})
	return single(s)
}

// random runs N workers with random pauses and delays.
func random(o Options, fencing bool) (*Report, error) {
	n := o.Workers
	if n == 0 {
		n = 4
	}
	horizon := o.Horizon
	if horizon == 0 {
		horizon = T(400)
	}
	ttl := T(30)
	s := newSim("random", fencing, o.Seed, ttl)
	s.run.Title = fmt.Sprintf("%d workers, random pauses and network delays (seed %d), for %s", n, o.Seed, stamp(horizon))
	resources := []string{ledger, "inventory"}
	for i := 0; i < n; i++ {
		rw := &randomWorker{s: s, w: s.worker(string(rune('A' + i))), ttl: ttl, horizon: horizon, resources: resources}
		s.at(time.Duration(s.rng.IntN(5))*Tick, rw.w, rw.tryAcquire)
	}
	return single(s)
}

type randomWorker struct {
	s         *sim
	w         *worker
	ttl       time.Duration
	horizon   time.Duration
	resources []string
	writes    int // left under the current lease
	n         int // writes made under the current lease
}

func (r *randomWorker) ticks(lo, hi int) time.Duration {
	return time.Duration(lo+r.s.rng.IntN(hi-lo+1)) * Tick
}

func (r *randomWorker) tryAcquire() {
	s := r.s
	if s.now > r.horizon {
		return
	}
	if _, err := s.acquire(r.w, ledgerLock, r.ttl); err != nil {
		wait := r.ticks(1, 4)
		var he *fence.HeldError
		if errors.As(err, &he) && he.ExpiresIn > 0 {
			wait += he.ExpiresIn.Truncate(Tick)
		}
		s.after(wait, r.w, r.tryAcquire)
		return
	}
	r.writes, r.n = 1+s.rng.IntN(4), 0
	s.after(r.ticks(1, 3), r.w, r.step)
}

// step makes the next write under the current lease: maybe renew first (as a
// careful client does when little time is left), maybe pause (a GC, at any point),
// then write, sometimes through a slow network.
func (r *randomWorker) step() {
	s := r.s
	lease := r.w.lease
	if lease == nil {
		s.after(r.ticks(1, 5), r.w, r.tryAcquire)
		return
	}
	if lease.Deadline().Sub(s.clock.Now()) < 10*Tick {
		if err := s.renew(r.w, r.ttl); err != nil {
			s.release(r.w)
			s.after(r.ticks(1, 5), r.w, r.tryAcquire)
			return
		}
	}
	if s.rng.Float64() < 0.35 {
		s.pause(r.w, r.ticks(5, 50), "GC")
	}
	r.n++
	resource := r.resources[s.rng.IntN(len(r.resources))]
	value := fmt.Sprintf("%s.%d", r.w.label, r.n)
	var delay time.Duration
	if s.rng.Float64() < 0.15 {
		delay = r.ticks(5, 35)
	}
	s.after(r.ticks(0, 2), r.w, func() {
		if r.w.lease != lease {
			return
		}
		s.write(r.w, resource, value, delay, func(err error) {
			if err != nil {
				s.heal(r.w, ledgerLock, err)
				s.release(r.w)
				s.after(r.ticks(1, 5), r.w, r.tryAcquire)
				return
			}
			if r.w.lease != lease {
				return
			}
			r.writes--
			if r.writes > 0 {
				s.after(r.ticks(1, 4), r.w, r.step)
				return
			}
			s.release(r.w)
			s.after(r.ticks(1, 10), r.w, r.tryAcquire)
		})
	})
}

// summarize checks the invariant and writes the outcome lines.
func (s *sim) summarize() {
	r := s.run
	r.Violations = CheckWrites(r.Writes)
	var resources []string
	seen := make(map[string]bool)
	rejected := 0
	for _, e := range r.Events {
		if e.Kind == KindReject {
			rejected++
		}
		if (e.Kind == KindWrite || e.Kind == KindReject) && !seen[e.Resource] {
			seen[e.Resource] = true
			resources = append(resources, e.Resource)
		}
	}
	for _, res := range resources {
		if it, ok := s.current(res); ok {
			r.Outcome = append(r.Outcome, fmt.Sprintf("%q holds %q (token %d, lease %s)", res, it.value, it.token, it.lease))
		}
	}
	for _, w := range lostWrites(r.Writes) {
		r.Outcome = append(r.Outcome, fmt.Sprintf("LOST: %q = %q (token %d, lease %s, %s) was overwritten by a stale write",
			w.Resource, w.Value, w.Token, w.Lease, stamp(w.At)))
	}
	r.Outcome = append(r.Outcome, fmt.Sprintf("writes accepted: %d, rejected as stale: %d", len(r.Writes), rejected))
	if len(r.Violations) == 0 {
		r.Outcome = append(r.Outcome, "invariant holds: accepted writes carry increasing tokens, equal only within one lease")
	} else {
		r.Outcome = append(r.Outcome, fmt.Sprintf("INVARIANT VIOLATED by %d accepted write(s):", len(r.Violations)))
		for _, v := range r.Violations {
			r.Outcome = append(r.Outcome, "  "+v.String())
		}
	}
}
