package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrExpired is what Lease.Err returns, and the cause its Context carries, when the
// lease reached its deadline by the holder's clock without a successful renewal. It
// matches ErrNotHeld.
var ErrExpired = fmt.Errorf("%w: expired before it was renewed", ErrNotHeld)

// Lease is one grant of a lock: its name, fencing token and lease id, and what the
// holder knows of its expiry. Callers get leases from Locker.Acquire (backends make
// them with package driver). A Lease is safe for concurrent use.
//
// Done closes as soon as the holder can no longer be sure it holds the lock: at the
// local deadline (the time the acquire or last successful renew was sent, plus its
// TTL), when a renewal is answered with ErrNotHeld, or on Release. This is advisory:
// it narrows the window in which a paused holder acts on a lost lock, it never closes
// it. Writes must carry Fence() to a guard.
type Lease struct {
	locker Locker
	clock  Clock
	name   string
	id     string
	token  Token
	owner  string
	slot   int

	opMu sync.Mutex // serialises Renew and Release, so deadlines follow the order the backend saw

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time
	expiry   Timer
	renewal  Timer
	auto     bool
	err      error
	done     chan struct{}
	ctx      context.Context         // made on first use: most holders never ask
	cancel   context.CancelCauseFunc // set with ctx
}

// Clock is the time source of leases and of backends that judge expiry locally:
// Now returns the current time (for the system clock with a monotonic reading), and
// AfterFunc calls f in its own goroutine after d (for a virtual clock, when time is
// advanced past it) unless the Timer is stopped. The system clock is the default;
// the simulator and tests inject a virtual one through a backend's options.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled call made by a Clock: Stop prevents the call if it has not
// happened yet and reports whether it did.
type Timer interface {
	Stop() bool
}

// systemClock is time.Now and time.AfterFunc, the Clock of a LeaseConfig without one.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// LeaseConfig is what a backend knows of a grant, for NewLease. Applications never
// fill one: they get leases from Locker.Acquire.
type LeaseConfig struct {
	Locker Locker        // renews and releases the lease; required
	Name   string        // lock name
	Token  Token         // fencing token of the grant
	ID     string        // lease id (a credential)
	TTL    time.Duration // TTL granted
	// Start is when the acquire request was sent, by Clock. The local deadline is
	// Start+TTL, which is never later than the backend's expiry of the lease (the
	// backend started counting after the request left). Zero means Clock.Now().
	Start time.Time
	// Clock measures the local deadline; nil means the system clock.
	Clock Clock
	// AutoRenew starts renewal at about TTL/3 (see WithAutoRenew).
	AutoRenew bool
	// Owner is the owner the acquire named (WithOwner), "" if none.
	Owner string
	// Slot is the semaphore permit's slot (Lease.Slot), 0 for a lock.
	Slot int
}

// NewLease is for backend authors, who reach it as driver.NewLease (the acquire
// engine of package driver calls it for every grant it makes): it returns the held
// lease of a grant the backend has made, with its expiry timer (and renewal, if
// configured) running. It validates nothing and never fails. Applications get
// leases from Locker.Acquire.
func NewLease(c LeaseConfig) *Lease {
	clock := c.Clock
	if clock == nil {
		clock = systemClock{}
	}
	start := c.Start
	if start.IsZero() {
		start = clock.Now()
	}
	l := &Lease{
		locker: c.Locker, clock: clock, name: c.Name, id: c.ID, token: c.Token, owner: c.Owner, slot: c.Slot,
		ttl: c.TTL, deadline: start.Add(c.TTL), auto: c.AutoRenew,
		done: make(chan struct{}),
	}
	l.mu.Lock()
	l.armLocked()
	if l.auto {
		l.scheduleRenewLocked(l.ttl / 3)
	}
	l.mu.Unlock()
	return l
}

// Name returns the lock name.
func (l *Lease) Name() string { return l.name }

// Owner returns the owner the acquire named (WithOwner), "" if none.
func (l *Lease) Owner() string { return l.owner }

// Slot returns the permit's slot, in [0, limit), for a lease on a semaphore
// (WithLimit): no two unexpired leases on the name have the same slot, so a
// resource per slot is fenced by the name's tokens as a resource is by a lock's. It
// is 0 for a lock and for a shared lease.
func (l *Lease) Slot() int { return l.slot }

// Token returns the fencing token of this grant.
func (l *Lease) Token() Token { return l.token }

// ID returns the lease id. It is a credential: whoever has it can renew or release
// the lease.
func (l *Lease) ID() string { return l.id }

// Fence returns what a write under this lease carries to a guard.
func (l *Lease) Fence() Fence { return Fence{Name: l.name, Token: l.token, LeaseID: l.id} }

// TTL returns the TTL of the last grant or renewal.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Deadline returns the local deadline: after it, by the holder's clock, the lease
// may have expired at the backend.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done returns a channel that is closed when the holder can no longer be sure it
// holds the lock (see Lease). Err then says why.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Context returns a context that is cancelled when Done closes; context.Cause of it
// is Err. Run work that must stop on lease loss under it, and still fence its writes.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		if l.err != nil {
			l.cancel(l.err)
		}
	}
	return l.ctx
}

// Err returns nil while the lease is believed held, and after Done closes the
// reason: ErrReleased, ErrExpired, or the renewal error (matching ErrNotHeld).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Renew extends the lease to ttl from now. It returns ErrNotHeld (and closes Done) if
// the backend says the lease is gone, ErrInvalid for a bad TTL, and other errors
// (ErrUnavailable) without changing the local deadline.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("fence: renew %q: %w", l.name, err)
	}
	return l.renew(ctx, ttl)
}

func (l *Lease) renew(ctx context.Context, ttl time.Duration) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	start := l.clock.Now()
	err := l.locker.Renew(ctx, l.name, l.id, ttl)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return fmt.Errorf("fence: renew %q: %w", l.name, l.err)
	}
	switch {
	case err == nil:
		l.ttl = ttl
		l.deadline = start.Add(ttl)
		l.armLocked()
	case errors.Is(err, ErrNotHeld):
		l.endLocked(err)
	}
	return err
}

// Release ends the lease at the backend and closes Done with ErrReleased. It
// returns ErrNotHeld if the backend no longer had it (Done closes all the same),
// and other errors (ErrUnavailable) with the lease left as it was, so Release can be
// retried.
func (l *Lease) Release(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	err := l.locker.Release(ctx, l.name, l.id)
	if err == nil || errors.Is(err, ErrNotHeld) {
		l.mu.Lock()
		l.endLocked(ErrReleased)
		l.mu.Unlock()
	}
	return err
}

// armLocked (re)starts the expiry timer for the current deadline.
func (l *Lease) armLocked() {
	if l.err != nil {
		return
	}
	if l.expiry != nil {
		l.expiry.Stop()
	}
	l.expiry = l.clock.AfterFunc(l.deadline.Sub(l.clock.Now()), l.onDeadline)
}

func (l *Lease) onDeadline() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if left := l.deadline.Sub(l.clock.Now()); left > 0 { // renewed since the timer was set
		l.expiry = l.clock.AfterFunc(left, l.onDeadline)
		return
	}
	l.endLocked(ErrExpired)
}

func (l *Lease) scheduleRenewLocked(d time.Duration) {
	if l.err != nil || !l.auto {
		return
	}
	if d < time.Millisecond {
		d = time.Millisecond
	}
	l.renewal = l.clock.AfterFunc(d, l.autoRenew)
}

// autoRenew runs one renewal; on a transient failure it retries (at about TTL/10)
// until the deadline, after which the expiry timer closes Done.
func (l *Lease) autoRenew() {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	ttl := l.ttl
	left := l.deadline.Sub(l.clock.Now())
	l.mu.Unlock()
	if left <= 0 {
		return
	}
	// Bound the attempt by the time left, in real time: a renewal answered after
	// the deadline is useless.
	ctx, cancel := context.WithTimeout(l.Context(), left)
	err := l.renew(ctx, ttl)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.scheduleRenewLocked(ttl / 3)
		return
	}
	if l.err == nil {
		l.scheduleRenewLocked(ttl / 10)
	}
}

func (l *Lease) endLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	if l.expiry != nil {
		l.expiry.Stop()
	}
	if l.renewal != nil {
		l.renewal.Stop()
	}
	close(l.done)
	if l.cancel != nil {
		l.cancel(err)
	}
}
