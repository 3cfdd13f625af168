package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fence"
)

// Request is one try of an acquire, as the Engine hands it to a backend's TryFunc.
// One Request serves all the tries of a call: the Engine sets ID, Try and WaitLeft
// before each.
type Request struct {
	Name    string         // the lock name, validated
	TTL     time.Duration  // the lease's TTL, validated
	Options AcquireOptions // the call's options
	// ID is a fresh lease id for this try: the backend stores it with a grant. A try
	// whose outcome is unknown (a lost reply) leaves the backend's cleanup of that id
	// to the backend; the next try has another.
	ID string
	// Try counts the call's tries, from 1.
	Try int
	// Waiting says the call waits if this try finds the lock held. A backend whose
	// wake-up needs setting up (a subscription, a watch) sets it up before it looks
	// at the lock, so that a release between the look and the wait is not missed, or
	// returns Result.Again once it has set it up.
	Waiting bool
	// WaitLeft is how much of the wait is left (fence.WaitForever: until the
	// context ends), for a backend that waits at the store itself (a long poll).
	WaitLeft time.Duration
}

// Result is what one try found: a grant (Token set) or how the lock is held.
type Result struct {
	// Token is the fencing token of the grant, made under Request.ID; 0 means the
	// lock is held by another lease.
	Token fence.Token
	// Start is when the request that made the grant was sent, by the Engine's
	// clock; zero means when the Engine called the TryFunc. The lease's local
	// deadline is Start plus the TTL, so Start must not be later than the moment
	// the store started counting the TTL.
	Start time.Time
	// Slot is the semaphore permit's slot of a grant (Request.Options.Limit > 0):
	// the lowest slot in [0, Limit) that no unexpired lease on the name has.
	Slot int
	// ID, if not empty, is the grant's lease id in place of Request.ID, for a
	// store that chose it (a fence server makes its own) or whose lease ids carry
	// what it assigned to the grant (ZooKeeper appends its node's sequence number,
	// so that the id names the node).
	ID string

	// ExpiresIn is the holder's time left as the store saw it (0 if unknown). It is
	// reported in the *fence.HeldError, and by default the Engine tries again when
	// it has passed.
	ExpiresIn time.Duration
	// Wake, if not nil, is ready when the lock may be free (a release message, a
	// watch event, a released lease in memory): closed, or sent a value that the
	// Engine receives. The Engine then tries again at once.
	Wake <-chan struct{}
	// Retry, if positive, is how long the Engine sleeps at most before it tries
	// again when Wake did not close; otherwise it sleeps ExpiresIn. Either way at
	// most Engine.Poll.
	Retry time.Duration
	// Again makes the Engine try again at once, without sleeping: the backend has
	// set up its wake-up and must look at the lock once more.
	Again bool
}

// TryFunc tries once to grant Request.Name. It returns a Result with a Token for a
// grant, a Result without one if the lock is held, or an error. Errors are returned
// as they are (the Engine adds "BACKEND: acquire NAME:"); mark with Transient
// those that a waiting acquire should ride out.
type TryFunc func(ctx context.Context, r *Request) (Result, error)

// Engine is the one acquire loop that every backend's Acquire runs. Its zero value
// is not usable: Backend and Locker are required. An Engine is safe for concurrent
// use; its fields must not change after the first Acquire.
type Engine struct {
	// Backend names the backend at the start of every error: "redis".
	Backend string
	// Locker is what the leases renew and release through: the backend itself.
	Locker fence.Locker
	// Clock measures the wait and the leases' local deadlines; nil means
	// SystemClock. A virtual clock (the simulator's) bounds the wait too.
	Clock Clock
	// Poll is the longest a waiter sleeps between tries when nothing woke it: the
	// fallback for a wake-up that was lost. Zero means no cap: the waiter sleeps
	// until Wake, ExpiresIn or Retry (DefaultPoll if the try gave none of them).
	Poll time.Duration
	// WatchPoll is how often Watch reads a lock's state when nothing signalled a
	// change; zero means DefaultWatchPoll.
	WatchPoll time.Duration
	// Closed, if not nil, closes when the backend is closed: waiting acquires then
	// return fence.ErrClosed, and new ones do not try.
	Closed <-chan struct{}
	// Features are the kinds of grant the TryFunc makes beyond exclusive locks;
	// the Engine refuses the others with fence.ErrNotImplemented before any try.
	Features fence.Features
}

// DefaultPoll is how long a waiter sleeps when a try that found the lock held gave
// neither a wake-up, nor the holder's time left, nor a retry delay.
const DefaultPoll = time.Second

// Backoff of a waiter whose tries fail with a Transient error.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// Acquire validates name and ttl, tries once with try, and, with fence.WithWait,
// tries again each time the lock may have become free, until a grant, the end of
// the wait, the end of ctx or Close. It returns the lease of the grant, made with
// the Engine's Locker and Clock.
//
// Its errors read the same for every backend:
//
//   - "BACKEND: lock NAME not acquired: held, expires in D" when the lock stayed
//     held ("... not acquired after waiting W: held ..." after a wait), matching
//     fence.ErrNotAcquired and a *fence.HeldError;
//   - "BACKEND: lock NAME not acquired after waiting W: context canceled; held ..."
//     when ctx ended the wait (or a try), matching fence.ErrNotAcquired and
//     ctx.Err() (and a *fence.HeldError if a try saw the holder); if the last try
//     had failed ("...: context deadline exceeded; last try: fence: store
//     unavailable ..."), its error too;
//   - "BACKEND: acquire: fence: invalid name ..." for a bad name, and
//     "BACKEND: acquire NAME: ERR" for everything else: a bad TTL (fence.ErrInvalid),
//     Close (fence.ErrClosed), and the TryFunc's errors, such as
//     fence.ErrTokenExhausted and fence.ErrUnavailable.
func (e *Engine) Acquire(ctx context.Context, name string, ttl time.Duration, opts []fence.AcquireOption, try TryFunc) (*fence.Lease, error) {
	g, err := e.Grant(ctx, name, ttl, opts, try)
	if err != nil {
		return nil, err
	}
	o := ApplyOptions(opts...)
	return NewLease(LeaseConfig{
		Locker: e.Locker, Name: name, Token: g.Token, ID: g.ID, TTL: ttl,
		Start: g.Start, Clock: e.Clock, AutoRenew: o.AutoRenew, Owner: o.Owner, Slot: g.Slot,
	}), nil
}

// Grant is a grant without its lease handle: the fencing token, the lease id and
// when the granting request was sent (by the Engine's clock; the store's expiry is
// no earlier than Start plus the TTL).
type Grant struct {
	Token fence.Token
	ID    string
	Start time.Time
	Slot  int // the semaphore permit's slot; 0 for a lock
}

// Granter is a fence.Locker that can also grant a lease without making a
// *fence.Lease, for a caller that passes the grant on to a holder elsewhere (a fence
// server answering a remote client) and so needs no local expiry timer or renewal.
// Grant takes the arguments of Acquire (fence.WithAutoRenew is ignored) and returns
// its errors.
type Granter interface {
	fence.Locker
	Grant(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (Grant, error)
}

// Grant is Acquire without the lease: it returns the grant that Acquire would make
// a lease of, with the same errors. A backend's Granter method is one call of it.
func (e *Engine) Grant(ctx context.Context, name string, ttl time.Duration, opts []fence.AcquireOption, try TryFunc) (Grant, error) {
	if err := fence.ValidateName(name); err != nil {
		return Grant{}, fmt.Errorf("%s: acquire: %w", e.Backend, err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return Grant{}, e.wrap(name, err)
	}
	o := ApplyOptions(opts...)
	if err := fence.ValidateOwner(o.Owner); err != nil {
		return Grant{}, e.wrap(name, err)
	}
	if err := e.kind(&o); err != nil {
		return Grant{}, e.wrap(name, err)
	}
	if o.RequestIDSet {
		if err := fence.ValidateRequestID(o.RequestID); err != nil {
			return Grant{}, e.wrap(name, err)
		}
	}
	o.RequestIDSet = false
	if !e.Features.RequestIDs {
		o.RequestID = "" // documented: ignored where it cannot be kept
	}
	clock := e.Clock
	if clock == nil {
		clock = SystemClock
	}
	begin := clock.Now()
	waitOver := e.after(clock, o.Wait)
	if waitOver.stop != nil {
		defer waitOver.stop()
	}
	r := &Request{Name: name, TTL: ttl, Options: o, Waiting: o.Wait > 0}
	var (
		held    *fence.HeldError // what the last try that looked saw
		lastErr error            // the last try's failure, if it failed
		backoff time.Duration
	)
	for {
		if e.closed() {
			return Grant{}, e.wrap(name, fence.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return Grant{}, e.notAcquired(name, clock.Now().Sub(begin), held, err, lastErr)
		}
		r.Try++
		r.ID = NewLeaseID()
		if r.Waiting {
			r.WaitLeft = fence.WaitForever
			if o.Wait != fence.WaitForever {
				r.WaitLeft = max(o.Wait-clock.Now().Sub(begin), 0)
			}
		}
		start := clock.Now()
		res, err := try(ctx, r)
		if err != nil {
			var tr *transientError
			if errors.As(err, &tr) {
				err = tr.err
			}
			if ctx.Err() != nil && !definitive(err) {
				return Grant{}, e.notAcquired(name, clock.Now().Sub(begin), held, ctx.Err(), err)
			}
			if tr == nil {
				return Grant{}, e.wrap(name, err)
			}
			if !r.Waiting {
				return Grant{}, e.wrap(name, err)
			}
			lastErr = err
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			if err := e.sleep(ctx, clock, backoff, nil, waitOver.c); err != nil {
				if errors.Is(err, errWaitOver) {
					return Grant{}, e.wrap(name, lastErr)
				}
				return Grant{}, e.ended(name, clock.Now().Sub(begin), held, err, lastErr)
			}
			continue
		}
		backoff, lastErr = 0, nil
		if res.Token != 0 {
			if res.Start.IsZero() {
				res.Start = start
			}
			if res.ID == "" {
				res.ID = r.ID
			}
			return Grant{Token: res.Token, ID: res.ID, Start: res.Start, Slot: res.Slot}, nil
		}
		held = &fence.HeldError{Name: name, ExpiresIn: max(res.ExpiresIn, 0), Limit: o.Limit}
		if !r.Waiting {
			return Grant{}, e.notAcquired(name, 0, held, nil, nil)
		}
		if res.Again {
			continue
		}
		d := res.Retry
		if d <= 0 {
			d = res.ExpiresIn
		}
		if e.Poll > 0 && (d <= 0 || d > e.Poll) {
			d = e.Poll
		}
		if d <= 0 {
			d = DefaultPoll
		}
		if err := e.sleep(ctx, clock, d, res.Wake, waitOver.c); err != nil {
			if errors.Is(err, errWaitOver) {
				return Grant{}, e.notAcquired(name, o.Wait, held, nil, nil)
			}
			return Grant{}, e.ended(name, clock.Now().Sub(begin), held, err, nil)
		}
	}
}

// kind validates and normalises the semaphore limit and the shared flag of o, and
// refuses the kinds of grant the backend does not make.
func (e *Engine) kind(o *AcquireOptions) error {
	if o.LimitSet {
		if err := fence.ValidateLimit(o.Limit); err != nil {
			return err
		}
		if o.Shared && o.Limit > 1 {
			return &fence.InvalidError{Field: "limit", Value: fmt.Sprint(o.Limit), Reason: "a semaphore cannot be shared (WithLimit with WithShared)"}
		}
	}
	o.LimitSet = false
	if o.Limit == 1 {
		o.Limit = 0
	}
	switch {
	case o.Limit > 1 && !e.Features.Semaphores:
		return fmt.Errorf("semaphores (WithLimit): %w", fence.ErrNotImplemented)
	case o.Shared && !e.Features.Shared:
		return fmt.Errorf("shared locks (WithShared): %w", fence.ErrNotImplemented)
	}
	return nil
}

// errWaitOver is what sleep returns when the acquire's wait ended.
var errWaitOver = errors.New("wait over")

// sleep waits d, or until wake closes, and returns nil; or returns errWaitOver,
// ctx.Err() or fence.ErrClosed if the wait, ctx or the backend ends first.
func (e *Engine) sleep(ctx context.Context, clock Clock, d time.Duration, wake <-chan struct{}, waitOver <-chan struct{}) error {
	t := e.after(clock, d)
	defer t.stop()
	select {
	case <-t.c:
		return nil
	case <-wake:
		return nil
	case <-waitOver:
		return errWaitOver
	case <-ctx.Done():
		return ctx.Err()
	case <-e.Closed:
		return fence.ErrClosed
	}
}

// ended is the error of an acquire whose sleep ended by ctx or Close.
func (e *Engine) ended(name string, waited time.Duration, held *fence.HeldError, err, lastErr error) error {
	if errors.Is(err, fence.ErrClosed) {
		return e.wrap(name, err)
	}
	return e.notAcquired(name, waited, held, err, lastErr)
}

// timer is a clock timer as a channel; c is nil (never ready) for no timer.
type timer struct {
	c    <-chan struct{}
	stop func()
}

// after returns a timer that fires after d, or none if d is 0 or fence.WaitForever.
func (e *Engine) after(clock Clock, d time.Duration) timer {
	if d <= 0 || d == fence.WaitForever {
		return timer{stop: func() {}}
	}
	c := make(chan struct{})
	t := clock.AfterFunc(d, func() { close(c) })
	return timer{c: c, stop: func() { t.Stop() }}
}

func (e *Engine) closed() bool {
	select {
	case <-e.Closed:
		return true
	default:
		return false
	}
}

// definitive reports whether a try's error stands even when the context ended
// meanwhile: an argument, an exhausted counter or a closed backend is not about
// the wait.
func definitive(err error) bool {
	return errors.Is(err, fence.ErrInvalid) || errors.Is(err, fence.ErrTokenExhausted) || errors.Is(err, fence.ErrClosed)
}

func (e *Engine) wrap(name string, err error) error {
	return fmt.Errorf("%s: acquire %q: %w", e.Backend, name, err)
}

// notAcquired is the error of an acquire that did not get the lock: the holder as
// the last try saw it (if any), the time waited (if any), what ended the wait
// (cause, if not the wait's own end), and the last try's failure (lastErr, if it
// failed for another reason than the context's end).
func (e *Engine) notAcquired(name string, waited time.Duration, held *fence.HeldError, cause, lastErr error) error {
	msg := fmt.Sprintf("%s: lock %q not acquired", e.Backend, name)
	if waited > 0 {
		msg += " after waiting " + waited.Round(time.Millisecond).String()
	}
	var parts []string
	errs := make([]error, 0, 2)
	if cause != nil {
		parts = append(parts, cause.Error())
		errs = append(errs, cause)
	}
	if lastErr != nil && !errors.Is(lastErr, context.Canceled) && !errors.Is(lastErr, context.DeadlineExceeded) {
		parts = append(parts, "last try: "+lastErr.Error())
		errs = append(errs, lastErr)
	}
	if held != nil {
		parts = append(parts, held.Held())
		errs = append(errs, held)
	} else {
		errs = append(errs, fence.ErrNotAcquired)
	}
	for i, p := range parts {
		if i == 0 {
			msg += ": " + p
		} else {
			msg += "; " + p
		}
	}
	return &acquireError{msg: msg, errs: errs}
}

// acquireError is an acquire's failure to get the lock: one message, and the
// errors it matches (a *fence.HeldError or fence.ErrNotAcquired, the context's,
// and the last try's).
type acquireError struct {
	msg  string
	errs []error
}

func (e *acquireError) Error() string   { return e.msg }
func (e *acquireError) Unwrap() []error { return e.errs }

// Transient marks err as a failure that a waiting acquire rides out: the Engine
// tries again, backing off from 50ms to 1s, until the wait ends, and then returns
// err. An acquire that does not wait returns err at once. Transient(nil) is nil.
// The returned error matches whatever err matches.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err}
}

type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }
