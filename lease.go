package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fence/internal/core"
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
	locker core.Holder
	clock  core.Clock
	name   string
	id     string
	token  Token
	owner  string
	slot   int

	opMu sync.Mutex // serialises Renew and Release, so deadlines follow the order the backend saw

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time
	expiry   core.Timer
	renewal  core.Timer
	auto     bool
	err      error
	done     chan struct{}
	ctx      context.Context         // made on first use: most holders never ask
	cancel   context.CancelCauseFunc // set with ctx
}

func init() {
	core.NewLease = func(c core.LeaseConfig) any { return newLease(c) }
	core.ValidateName = validateName
	core.ValidateTTL = validateTTL
	core.ValidateToken = func(t uint64) error { return validateToken(Token(t)) }
	core.ValidateLeaseID = validateLeaseID
	core.ValidateOwner = validateOwner
	core.ValidateLimit = validateLimit
}

// newLease returns a held lease for a grant, with its expiry timer (and renewal, if
// configured) running. Backends reach it as driver.NewLease. The local deadline is
// c.Start+c.TTL: c.Start is when the acquire request was sent, so the deadline is
// never later than the backend's expiry (zero means now).
func newLease(c core.LeaseConfig) *Lease {
	clock := c.Clock
	if clock == nil {
		clock = core.SystemClock
	}
	start := c.Start
	if start.IsZero() {
		start = clock.Now()
	}
	l := &Lease{
		locker: c.Holder, clock: clock, name: c.Name, id: c.ID, token: Token(c.Token), owner: c.Owner, slot: c.Slot,
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
	if err := validateTTL(ttl); err != nil {
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
