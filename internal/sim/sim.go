package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/inmem"
)

// Tick is the unit of virtual time in timelines: T31 is 31 ticks after the start.
const Tick = time.Second

// T returns n ticks as a duration, for writing timelines as in the seed: T(31).
func T(n int) time.Duration { return time.Duration(n) * Tick }

// maxSteps bounds one run, so a scenario bug cannot loop forever.
const maxSteps = 100000

// epoch is the virtual start time. It is never printed: timelines show time since
// the start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Kind is what an Event records.
type Kind string

// The kinds of events.
const (
	KindAcquire       Kind = "acquire"        // a worker was granted a lease
	KindAcquireFailed Kind = "acquire-failed" // the lock was held
	KindRenew         Kind = "renew"          // a lease was renewed
	KindRenewFailed   Kind = "renew-failed"   // renewal refused (lease lost)
	KindRelease       Kind = "release"        // a lease was released (or the release failed)
	KindExpire        Kind = "expire"         // the lock service no longer holds a lease
	KindPause         Kind = "pause"          // a worker stopped (GC, VM stall)
	KindResume        Kind = "resume"         // a paused worker runs again
	KindCheck         Kind = "check"          // a worker asked whether it still holds the lock
	KindSend          Kind = "send"           // a write left the worker and is delayed in the network
	KindWrite         Kind = "write"          // the resource accepted a write
	KindReject        Kind = "reject"         // the resource (guard) rejected a write
	KindRead          Kind = "read"           // a worker read the resource
	KindCall          Kind = "call"           // a call to a third party (payment provider)
	KindFailover      Kind = "failover"       // the lock service failed over to a stale replica
	KindSync          Kind = "sync"           // the replica caught up with the primary
	KindClockJump     Kind = "clock-jump"     // the lock server's clock jumped
	KindHeal          Kind = "heal"           // a worker raised the lock's counter past a seen token
	KindNote          Kind = "note"           // anything else worth a line
)

// Event is one line of a timeline.
type Event struct {
	At       time.Duration // virtual time since the start
	Worker   string        // the worker it concerns ("" for the lock service itself)
	Kind     Kind
	Lock     string      // lock name, if any
	Resource string      // resource, if any
	Token    fence.Token // token involved, if any
	Lease    string      // lease label ("A1"), never the lease id
	Value    string      // value written or read, if any
	Op       string      // for writes: what was written ("write", "claim", "payout ch_1")
	Err      string      // error text of a failed operation
	Limit    int         // the semaphore's permits (fence.WithLimit), 0 for a lock
	Slot     int         // the permit's slot of a semaphore lease (Limit > 0)
	Text     string      // the whole line, for the text timeline

	// For sequence diagrams: the participant the worker talks to ("lock service",
	// a resource, "provider"; "" for a note), the request and the reply, and
	// whether the reply is a success.
	Peer    string
	Request string
	Reply   string
	OK      bool
	Delayed bool // the request was sent earlier (a KindSend event) and arrives now
}

// Span is an interval in a worker's lane: a lease, a pause, or a write in flight.
type Span struct {
	Worker string
	Start  time.Duration
	End    time.Duration
	Label  string      // "lease A1 token 1", "paused (GC)", ...
	Lease  string      // lease label, for lease spans
	Token  fence.Token // token, for lease spans
	Limit  int         // for a semaphore lease: its permits (0 for a lock)
	Slot   int         // for a semaphore lease: its slot (Limit > 0)
	Reason string      // how it ended: "expired", "released", "lost in failover", "still held"
}

// Write is a write a resource accepted, as CheckWrites sees it.
type Write struct {
	At       time.Duration
	Worker   string
	Resource string
	Token    fence.Token
	Lease    string // lease label; writes with equal tokens are fine only within one lease
	Value    string
}

// Run is the record of one simulated run: one scenario (or one payments case) in
// one fencing mode.
type Run struct {
	Scenario    string
	Case        string // payments case name, "" otherwise
	Title       string // one line saying what the run shows
	Fencing     bool
	Protections []string // payments: the protections that were on
	Seed        uint64
	TTL         time.Duration
	Workers     []string
	Events      []Event
	Leases      []Span
	Pauses      []Span
	InFlight    []Span // writes delayed in the network
	Writes      []Write
	Violations  []Violation
	Outcome     []string // summary lines
	End         time.Duration
}

// sim is the engine of one run.
type sim struct {
	ctx     context.Context
	clock   *inmem.ManualClock
	server  *skewClock // the lock server's clock: the virtual clock plus jumps
	locker  *inmem.Locker
	guard   *inmem.Guard
	fencing bool
	rng     *rand.Rand
	run     *Run

	queue   itemQueue
	actions int // queued items that are not expiry watches
	seq     uint64
	now     time.Duration
	steps   int
	workers []*worker

	labels map[string]string // lease id -> label
	open   []*openLease      // leases not yet seen to end, in grant order
	plain  map[string]plainItem
	cause  string // why leases end during the current event (failover, clock jump)
}

type plainItem struct {
	value string
	token fence.Token
	lease string
}

type openLease struct {
	worker *worker
	lease  *fence.Lease
	label  string
	span   int // index in run.Leases
	limit  int // the semaphore's permits, 0 for a lock
}

type worker struct {
	name        string
	pausedUntil time.Duration
	grants      int
	lease       *fence.Lease
	label       string // label of lease
}

func newSim(scenario string, fencing bool, seed uint64, ttl time.Duration) *sim {
	clk := inmem.NewManualClock(epoch)
	srv := &skewClock{base: clk}
	return &sim{
		ctx:     context.Background(),
		clock:   clk,
		server:  srv,
		locker:  inmem.NewLocker(inmem.Options{Clock: srv}),
		guard:   inmem.NewGuard(),
		fencing: fencing,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		run:     &Run{Scenario: scenario, Fencing: fencing, Seed: seed, TTL: ttl},
		labels:  make(map[string]string),
		plain:   make(map[string]plainItem),
	}
}

// skewClock is the lock server's clock: the simulation's virtual clock plus an
// offset that a clock jump changes. Timers run on the virtual clock.
type skewClock struct {
	base   *inmem.ManualClock
	mu     sync.Mutex
	offset time.Duration
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Now().Add(c.offset)
}

func (c *skewClock) AfterFunc(d time.Duration, f func()) driver.Timer { return c.base.AfterFunc(d, f) }

func (c *skewClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func (s *sim) worker(name string) *worker {
	for _, w := range s.workers {
		if w.name == name {
			return w
		}
	}
	w := &worker{name: name}
	s.workers = append(s.workers, w)
	s.run.Workers = append(s.run.Workers, name)
	return w
}

// Scheduling. Items at the same time run in priority order (system items such as
// resumes and expiry checks first), then in the order they were scheduled.

const (
	prioSystem = 0
	prioAction = 1
)

type item struct {
	at    time.Duration
	prio  int
	seq   uint64
	w     *worker // nil: not subject to the worker being paused
	fn    func()
	watch bool // only looks at the lock service; the run ends when only these are left
}

type itemQueue []*item

func (q itemQueue) Len() int { return len(q) }
func (q itemQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.prio != b.prio {
		return a.prio < b.prio
	}
	return a.seq < b.seq
}
func (q itemQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *itemQueue) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *itemQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return it
}

func (s *sim) push(at time.Duration, prio int, w *worker, fn func()) {
	s.pushItem(&item{at: at, prio: prio, w: w, fn: fn})
}

func (s *sim) pushItem(it *item) {
	if it.at < s.now {
		it.at = s.now
	}
	s.seq++
	it.seq = s.seq
	if !it.watch {
		s.actions++
	}
	heap.Push(&s.queue, it)
}

// at schedules w's action fn at time t; if w is paused then, fn runs when it wakes.
func (s *sim) at(t time.Duration, w *worker, fn func()) { s.push(t, prioAction, w, fn) }

// after schedules w's action fn d after now.
func (s *sim) after(d time.Duration, w *worker, fn func()) { s.at(s.now+d, w, fn) }

// system schedules fn at t, before actions at the same time, regardless of pauses.
func (s *sim) system(t time.Duration, fn func()) { s.push(t, prioSystem, nil, fn) }

// network schedules fn at t, after system items, regardless of pauses: a message
// in flight arrives whether or not its sender is running.
func (s *sim) network(t time.Duration, fn func()) { s.push(t, prioAction, nil, fn) }

// loop runs the queue until nothing but expiry watches is left. It returns an
// error if the run does not end within maxSteps.
func (s *sim) loop() error {
	for s.queue.Len() > 0 {
		if s.actions == 0 {
			break // only expiry watches are left: nothing more happens
		}
		it := heap.Pop(&s.queue).(*item)
		if !it.watch {
			s.actions--
		}
		s.steps++
		if s.steps > maxSteps {
			return fmt.Errorf("sim: %s: more than %d steps, the scenario does not end", s.run.Scenario, maxSteps)
		}
		if it.at > s.now {
			s.clock.Advance(it.at - s.now)
			s.now = it.at
		}
		if it.w != nil && it.w.pausedUntil > s.now {
			it.at = it.w.pausedUntil
			s.pushItem(it)
			continue
		}
		it.fn()
		s.observe()
		s.cause = ""
	}
	s.finish()
	return nil
}

// finish closes the spans still open at the end of the run.
func (s *sim) finish() {
	end := s.now + 2*Tick
	s.run.End = end
	for _, ol := range s.open {
		sp := &s.run.Leases[ol.span]
		sp.End, sp.Reason = end, "still held"
	}
	s.open = nil
	for i := range s.run.InFlight {
		if s.run.InFlight[i].End < 0 {
			s.run.InFlight[i].End = end
		}
	}
}

func (s *sim) emit(e Event) {
	e.At = s.now
	s.run.Events = append(s.run.Events, e)
}

// lockService is the participant name of the lock service in diagrams.
const lockService = "lock service"

// observe asks the lock service about every lease not yet seen to end, and records
// those it no longer holds: expired by its clock, or lost in a failover.
func (s *sim) observe() {
	keep := s.open[:0]
	for _, ol := range s.open {
		info, err := s.locker.Inspect(s.ctx, ol.lease.Name())
		if err == nil && holds(info, ol.lease.Token()) && !s.replaced(ol) {
			keep = append(keep, ol)
			continue
		}
		reason := "expired"
		if s.cause != "" {
			reason = s.cause
		}
		text := fmt.Sprintf("lease %s (token %d) %s", ol.label, ol.lease.Token(), reason)
		if s.cause == "" {
			text += " at the lock service"
		}
		sp := &s.run.Leases[ol.span]
		sp.End, sp.Reason = s.now, reason
		s.emit(Event{Worker: ol.worker.name, Kind: KindExpire, Lock: ol.lease.Name(), Token: ol.lease.Token(),
			Lease: ol.label, Limit: ol.limit, Slot: ol.lease.Slot(), Text: text, Peer: lockService, Request: fmt.Sprintf("lease %s (token %d) %s", ol.label, ol.lease.Token(), reason)})
	}
	s.open = keep
}

// holds reports whether the lock service's state info shows a live lease with
// token t: the exclusive holder's, or one of a semaphore's holders.
func holds(info fence.LockInfo, t fence.Token) bool {
	if !info.Held {
		return false
	}
	if info.Token == t {
		return true
	}
	for _, h := range info.Holders {
		if h.Token == t {
			return true
		}
	}
	return false
}

// replaced reports whether another open lease with ol's token, granted later,
// holds ol's lock: after a failover the same token can be granted again to
// another lease. (Several open leases on one name with different tokens are a
// semaphore's permits, none replacing another.)
func (s *sim) replaced(ol *openLease) bool {
	for _, o := range s.open {
		if o != ol && o.lease.Name() == ol.lease.Name() && o.lease.Token() == ol.lease.Token() && o.span > ol.span {
			return true
		}
	}
	return false
}

// Worker actions. Each records what happened, with the library's own errors.

// acquire tries once to take lock for ttl.
func (s *sim) acquire(w *worker, lock string, ttl time.Duration) (*fence.Lease, error) {
	return s.acquirePermit(w, lock, ttl, 0)
}

// acquirePermit tries once to take a permit of lock, a semaphore of limit
// permits (fence.WithLimit), for ttl; limit 0 takes it as a lock.
func (s *sim) acquirePermit(w *worker, lock string, ttl time.Duration, limit int) (*fence.Lease, error) {
	var opts []fence.AcquireOption
	what := fmt.Sprintf("%q", lock)
	if limit > 0 {
		opts = append(opts, fence.WithLimit(limit))
		what = fmt.Sprintf("%q (%d permits)", lock, limit)
	}
	lease, err := fence.TryAcquire(s.ctx, s.locker, lock, ttl, opts...)
	if err != nil {
		s.emit(Event{Worker: w.name, Kind: KindAcquireFailed, Lock: lock, Limit: limit, Err: err.Error(),
			Text: fmt.Sprintf("acquire %s: not granted: %s", what, rootMessage(err)),
			Peer: lockService, Request: "acquire " + lock, Reply: "not granted: " + shortReason(err)})
		return nil, err
	}
	w.grants++
	label := fmt.Sprintf("%s%d", w.name, w.grants)
	s.labels[lease.ID()] = label
	w.lease, w.label = lease, label
	granted, slot := fmt.Sprintf("token %d", lease.Token()), ""
	if limit > 0 {
		slot = fmt.Sprintf(" slot %d", lease.Slot())
		granted += "," + slot
	}
	s.run.Leases = append(s.run.Leases, Span{Worker: w.name, Start: s.now, End: -1, Lease: label, Token: lease.Token(),
		Limit: limit, Slot: lease.Slot(), Label: fmt.Sprintf("lease %s token %d%s", label, lease.Token(), slot)})
	s.open = append(s.open, &openLease{worker: w, lease: lease, label: label, span: len(s.run.Leases) - 1, limit: limit})
	s.emit(Event{Worker: w.name, Kind: KindAcquire, Lock: lock, Token: lease.Token(), Lease: label, Limit: limit, Slot: lease.Slot(),
		Text: fmt.Sprintf("acquire %s: granted %s (lease %s, ttl %v)", what, granted, label, ttl),
		Peer: lockService, Request: "acquire " + lock, Reply: fmt.Sprintf("%s (lease %s)", granted, label), OK: true})
	s.watchExpiry(ttl)
	return lease, nil
}

// watchExpiry makes the simulator look at the lock service when a lease granted or
// renewed now for ttl is due to expire, so the expiry shows on the timeline.
func (s *sim) watchExpiry(ttl time.Duration) {
	s.pushItem(&item{at: s.now + ttl, prio: prioSystem, fn: func() {}, watch: true})
}

// renew extends w's current lease by ttl.
func (s *sim) renew(w *worker, ttl time.Duration) error {
	if w.lease == nil {
		return fmt.Errorf("sim: renew: worker %s holds no lease: %w", w.name, fence.ErrNotHeld)
	}
	err := w.lease.Renew(s.ctx, ttl)
	if err != nil {
		s.emit(Event{Worker: w.name, Kind: KindRenewFailed, Lock: w.lease.Name(), Token: w.lease.Token(), Lease: w.label,
			Err: err.Error(), Text: fmt.Sprintf("renew lease %s: failed: %v", w.label, err),
			Peer: lockService, Request: "renew " + w.label, Reply: "failed: lease not held"})
		return err
	}
	s.emit(Event{Worker: w.name, Kind: KindRenew, Lock: w.lease.Name(), Token: w.lease.Token(), Lease: w.label,
		Text: fmt.Sprintf("renew lease %s (token %d) for %v", w.label, w.lease.Token(), ttl),
		Peer: lockService, Request: "renew " + w.label, Reply: "renewed", OK: true})
	s.watchExpiry(ttl)
	return nil
}

// release releases w's current lease.
func (s *sim) release(w *worker) error {
	if w.lease == nil {
		return nil
	}
	lease, label := w.lease, w.label
	w.lease, w.label = nil, ""
	err := lease.Release(s.ctx)
	for i, ol := range s.open {
		if ol.lease == lease {
			sp := &s.run.Leases[ol.span]
			sp.End, sp.Reason = s.now, "released"
			s.open = append(s.open[:i], s.open[i+1:]...)
			break
		}
	}
	if err != nil {
		s.emit(Event{Worker: w.name, Kind: KindRelease, Lock: lease.Name(), Token: lease.Token(), Lease: label, Err: err.Error(),
			Text: fmt.Sprintf("release lease %s: %v", label, err),
			Peer: lockService, Request: "release " + label, Reply: "not held"})
		return err
	}
	s.emit(Event{Worker: w.name, Kind: KindRelease, Lock: lease.Name(), Token: lease.Token(), Lease: label,
		Text: fmt.Sprintf("release lease %s (token %d)", label, lease.Token()),
		Peer: lockService, Request: "release " + label, Reply: "released", OK: true})
	return nil
}

// pause stops w for d: its actions wait until it wakes. Messages it already sent
// keep travelling and its lease keeps ageing.
func (s *sim) pause(w *worker, d time.Duration, why string) {
	until := s.now + d
	w.pausedUntil = until
	s.run.Pauses = append(s.run.Pauses, Span{Worker: w.name, Start: s.now, End: until, Label: "paused (" + why + ")"})
	s.emit(Event{Worker: w.name, Kind: KindPause,
		Text:    fmt.Sprintf("pause (%s) for %v, until %s", why, d, stamp(until)),
		Request: fmt.Sprintf("paused (%s) until %s", why, stamp(until))})
	s.system(until, func() {
		s.emit(Event{Worker: w.name, Kind: KindResume, Text: fmt.Sprintf("wakes up after %v (%s), unaware of the pause", d, why),
			Request: "wakes up, unaware of the pause"})
	})
}

// check asks the lock service whether w still holds its lease, the way a careful
// TTL-only client would right before a write, and reports the answer.
func (s *sim) check(w *worker) bool {
	if w.lease == nil {
		return false
	}
	info, err := s.locker.Inspect(s.ctx, w.lease.Name())
	held := err == nil && info.Held && info.Token == w.lease.Token() && w.lease.Err() == nil
	if held {
		s.emit(Event{Worker: w.name, Kind: KindCheck, Lock: w.lease.Name(), Token: w.lease.Token(), Lease: w.label,
			Text: fmt.Sprintf("check: still holds %q with token %d, %v left: safe to write, it concludes", w.lease.Name(), info.Token, info.ExpiresIn),
			Peer: lockService, Request: "do I still hold " + w.lease.Name() + "?", Reply: fmt.Sprintf("yes, token %d, %v left", info.Token, info.ExpiresIn), OK: true})
		return true
	}
	s.emit(Event{Worker: w.name, Kind: KindCheck, Lock: w.lease.Name(), Token: w.lease.Token(), Lease: w.label,
		Text: fmt.Sprintf("check: no longer holds %q", w.lease.Name()),
		Peer: lockService, Request: "do I still hold " + w.lease.Name() + "?", Reply: "no"})
	return false
}

// write sends a write of value to resource under w's current lease; it arrives
// after delay. With fencing on it goes through the guard (inmem.Guard.Put),
// otherwise straight to the store. then, if not nil, runs as w's next action with
// the result (once w is awake).
func (s *sim) write(w *worker, resource, value string, delay time.Duration, then func(error)) {
	lease, label := w.lease, w.label
	if lease == nil {
		return
	}
	f := lease.Fence()
	if delay > 0 {
		s.run.InFlight = append(s.run.InFlight, Span{Worker: w.name, Start: s.now, End: -1,
			Label: fmt.Sprintf("write token %d in flight", f.Token)})
		idx := len(s.run.InFlight) - 1
		s.emit(Event{Worker: w.name, Kind: KindSend, Resource: resource, Token: f.Token, Lease: label, Value: value, Op: "write",
			Text: fmt.Sprintf("send write %q = %q with token %d; the network delays it %v", resource, value, f.Token, delay),
			Peer: resource, Request: fmt.Sprintf("write token %d (delayed %v)", f.Token, delay)})
		s.network(s.now+delay, func() {
			s.run.InFlight[idx].End = s.now
			err := s.apply(w, resource, value, f, label, true)
			if then != nil {
				s.at(s.now, w, func() { then(err) })
			}
		})
		return
	}
	err := s.apply(w, resource, value, f, label, false)
	if then != nil {
		then(err)
	}
}

// apply applies a write at the resource and records the outcome.
func (s *sim) apply(w *worker, resource, value string, f fence.Fence, label string, delayed bool) error {
	prev, hadPrev := s.current(resource)
	var err error
	if s.fencing {
		err = s.guard.Put(s.ctx, resource, []byte(value), f)
	} else {
		s.plain[resource] = plainItem{value: value, token: f.Token, lease: label}
	}
	extra := ""
	if hadPrev && prev.token > f.Token {
		extra = fmt.Sprintf(", overwriting %q written with token %d", prev.value, prev.token)
	}
	s.record(w, resource, "write", fmt.Sprintf("%q = %q", resource, value), value, f, label, delayed, err, extra)
	return err
}

// commit runs op as a write to resource under fence f: through the guard
// (inmem.Guard.Do) when fencing is on, directly otherwise, and records the outcome.
// what describes the write for the timeline.
func (s *sim) commit(w *worker, resource, opName, what, value string, f fence.Fence, label string, delayed bool, op func() error) error {
	var err error
	if s.fencing {
		err = s.guard.Do(s.ctx, resource, f, op)
	} else {
		err = op()
	}
	s.record(w, resource, opName, what, value, f, label, delayed, err, "")
	return err
}

// record records the outcome of a write: an accepted write joins the history
// CheckWrites checks.
func (s *sim) record(w *worker, resource, op, what, value string, f fence.Fence, label string, delayed bool, err error, extra string) {
	verb := "write"
	if delayed {
		verb = "delayed write arrives:"
	}
	req := fmt.Sprintf("%s token %d", op, f.Token)
	if err != nil {
		s.emit(Event{Worker: w.name, Kind: KindReject, Resource: resource, Token: f.Token, Lease: label, Value: value, Op: op, Err: err.Error(),
			Text: fmt.Sprintf("%s %s with token %d: REJECTED: %s", verb, what, f.Token, rootMessage(err)),
			Peer: resource, Request: req, Reply: "REJECTED " + shortReason(err), Delayed: delayed})
		return
	}
	s.run.Writes = append(s.run.Writes, Write{At: s.now, Worker: w.name, Resource: resource, Token: f.Token, Lease: label, Value: value})
	how := "accepted"
	if !s.fencing {
		how = "accepted (no fencing)"
	}
	s.emit(Event{Worker: w.name, Kind: KindWrite, Resource: resource, Token: f.Token, Lease: label, Value: value, Op: op,
		Text: fmt.Sprintf("%s %s with token %d: %s%s", verb, what, f.Token, how, extra),
		Peer: resource, Request: req, Reply: how, OK: true, Delayed: delayed})
}

// current returns what resource holds now.
func (s *sim) current(resource string) (plainItem, bool) {
	if !s.fencing {
		it, ok := s.plain[resource]
		return it, ok
	}
	it, err := s.guard.Get(s.ctx, resource)
	if err != nil || it.Value == nil {
		return plainItem{}, false
	}
	return plainItem{value: string(it.Value), token: it.Fence.Token, lease: s.labels[it.Fence.LeaseID]}, true
}

// heal reports the highest token a guard saw to the lock service (fence.Heal).
// It does nothing unless cause is a stale-token rejection.
func (s *sim) heal(w *worker, lock string, cause error) {
	if !errors.Is(cause, fence.ErrStaleToken) {
		return
	}
	before, _ := s.locker.Inspect(s.ctx, lock)
	if err := fence.Heal(s.ctx, s.locker, lock, cause); err != nil {
		s.emit(Event{Worker: w.name, Kind: KindHeal, Lock: lock, Err: err.Error(),
			Text: fmt.Sprintf("heal %q: %v", lock, err), Peer: lockService, Request: "heal " + lock, Reply: "failed"})
		return
	}
	after, _ := s.locker.Inspect(s.ctx, lock)
	if after.LastToken == before.LastToken {
		return // the counter was already past the token the guard saw
	}
	s.emit(Event{Worker: w.name, Kind: KindHeal, Lock: lock, Token: after.LastToken,
		Text: fmt.Sprintf("heal %q with the highest token the guard saw: counter %d -> %d", lock, before.LastToken, after.LastToken),
		Peer: lockService, Request: "heal " + lock, Reply: fmt.Sprintf("counter now %d", after.LastToken), OK: true})
}

// failover replaces the lock service's state with snap, a replica's state that
// missed everything since it was taken.
func (s *sim) failover(lock string, snap inmem.Snapshot) {
	before, _ := s.locker.Inspect(s.ctx, lock)
	s.locker.Restore(snap)
	after, _ := s.locker.Inspect(s.ctx, lock)
	s.cause = "lost in the failover"
	s.emit(Event{Kind: KindFailover, Lock: lock,
		Text: fmt.Sprintf("lock service fails over to a replica that missed recent writes: %q counter %d -> %d", lock, before.LastToken, after.LastToken),
		Peer: lockService, Request: fmt.Sprintf("FAILOVER: counter %d -> %d", before.LastToken, after.LastToken)})
}

// snapshot records that the replica caught up, and returns its state.
func (s *sim) snapshot(lock string) inmem.Snapshot {
	info, _ := s.locker.Inspect(s.ctx, lock)
	s.emit(Event{Kind: KindSync, Lock: lock,
		Text: fmt.Sprintf("replica last synchronised: %q counter %d", lock, info.LastToken),
		Peer: lockService, Request: fmt.Sprintf("replica synced (counter %d)", info.LastToken)})
	return s.locker.Snapshot()
}

// jumpClock moves the lock server's clock forward by d.
func (s *sim) jumpClock(d time.Duration) {
	s.server.jump(d)
	s.cause = "expired early: the lock server's clock jumped"
	s.emit(Event{Kind: KindClockJump,
		Text: fmt.Sprintf("the lock server's clock jumps forward %v (NTP step)", d),
		Peer: lockService, Request: fmt.Sprintf("server clock jumps +%v", d)})
}

// note records a line of narration for w ("" for the system).
func (s *sim) note(w *worker, format string, args ...any) {
	name := ""
	if w != nil {
		name = w.name
	}
	text := fmt.Sprintf(format, args...)
	s.emit(Event{Worker: name, Kind: KindNote, Text: text, Request: text})
}

// stamp formats a virtual time as in the seed: T31.
func stamp(d time.Duration) string {
	if d%Tick == 0 {
		return fmt.Sprintf("T%d", d/Tick)
	}
	return fmt.Sprintf("T%g", d.Seconds())
}

// rootMessage returns the message of the fence error inside err ("fence: stale
// token 1 for \"ledger\", highest seen 2"), or err's own message.
func rootMessage(err error) string {
	var st *fence.StaleTokenError
	if errors.As(err, &st) {
		return st.Error()
	}
	var he *fence.HeldError
	if errors.As(err, &he) {
		return he.Error()
	}
	var ne *fence.NamespaceError
	if errors.As(err, &ne) {
		return ne.Error()
	}
	return err.Error()
}

// shortReason is a few words for diagrams.
func shortReason(err error) string {
	var st *fence.StaleTokenError
	if errors.As(err, &st) {
		if st.SameToken {
			return fmt.Sprintf("token %d already used by another lease", st.Token)
		}
		return fmt.Sprintf("stale token %d, highest seen %d", st.Token, st.Highest)
	}
	var he *fence.HeldError
	if errors.As(err, &he) {
		if he.ExpiresIn > 0 {
			return fmt.Sprintf("held, expires in %v", he.ExpiresIn)
		}
		return "held"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}
