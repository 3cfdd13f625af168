// Package election runs leader elections on any fence.Locker, with fenced terms.
//
// A candidate campaigns for a name; the one that acquires the name's lock leads
// until its lease ends. Every term has an epoch: the fencing token of the term's
// lease, from the lock name's one counter, so a later term's epoch is always
// greater. The leader sends its epoch with every write (Term.Fence), and a
// resource guarded by a fence.Guard refuses the writes of a leader that paused
// past its term once a newer leader has written or fenced. That is what makes a
// second leader harmless; nothing else can (etcd's, Curator's and client-go's
// elections say the same of themselves, and none of them fences).
//
// Stepping down is judged by the leader's local deadline, measured from when the
// grant was requested (Term.Done), and renewed in the background at about a third
// of the TTL. It is advisory: a leader can pause right after a renewal. Only the
// epoch at the resource is safe.
//
// Leader needs a locker that is a fence.Inspector, and Observe (and
// Callbacks.OnNewLeader) one that is a fence.Watcher; every backend in this module
// is both, and so is fencehttp.Client.
package election

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"time"

	"github.com/fencelock/fence"
)

// DefaultTTL is the term's lease TTL when WithTTL is not given: how long a
// leader that stops renewing (a crash, a partition, a pause) keeps the others
// waiting.
const DefaultTTL = 30 * time.Second

// Election is one election, on one lock name of one Locker. It is safe for
// concurrent use; a process that campaigns and observes shares one.
type Election struct {
	locker fence.Locker
	name   string
	ttl    time.Duration
	owner  string
}

// Option configures an Election.
type Option func(*Election)

// WithTTL sets the TTL of each term's lease (DefaultTTL if not given).
func WithTTL(ttl time.Duration) Option { return func(e *Election) { e.ttl = ttl } }

// WithOwner names this candidate (fence.WithOwner): it is what Leader and
// Observe report while this candidate leads.
func WithOwner(owner string) Option { return func(e *Election) { e.owner = owner } }

// New returns the election on name held through l. The name, TTL and owner are
// checked by the locker at the first Campaign, which returns an error matching
// fence.ErrInvalid if one is bad; New itself returns an error only for a nil
// locker, or a nil pointer of a locker type (fence.ErrInvalid).
func New(l fence.Locker, name string, opts ...Option) (*Election, error) {
	if isNil(l) {
		return nil, fmt.Errorf("election %q: new: %w", name, &fence.InvalidError{Field: "locker", Value: fmt.Sprintf("%T", l), Reason: "is nil"})
	}
	e := &Election{locker: l, name: name, ttl: DefaultTTL}
	for _, o := range opts {
		if o != nil {
			o(e)
		}
	}
	return e, nil
}

// isNil reports whether l is nil or a nil pointer, map, func or channel in an
// interface: a locker whose methods would panic on first use.
func isNil(l fence.Locker) bool {
	if l == nil {
		return true
	}
	switch v := reflect.ValueOf(l); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.Slice:
		return v.IsNil()
	}
	return false
}

// Name returns the election's lock name.
func (e *Election) Name() string { return e.name }

// Campaign blocks until this candidate leads, and returns its term. The term's
// lease renews itself until Resign or until a renewal fails past its deadline.
//
// It returns an error matching ctx.Err() and fence.ErrNotAcquired if ctx ends
// first (nothing is left behind: a campaign is a waiting acquire), fence.ErrInvalid
// for a bad name, TTL or owner, fence.ErrTokenExhausted when the name's counter is
// at fence.MaxToken, and fence.ErrClosed if the locker is closed. Transient store
// failures are ridden out while it waits.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	lease, err := e.locker.Acquire(ctx, e.name, e.ttl,
		fence.WithWait(fence.WaitForever), fence.WithAutoRenew(), fence.WithOwner(e.owner))
	if err != nil {
		return nil, fmt.Errorf("election %q: campaign: %w", e.name, err)
	}
	return &Term{lease: lease}, nil
}

// Term is one leader's term: the lease that makes it leader, and its epoch.
type Term struct {
	lease *fence.Lease
}

// Epoch returns the term's epoch: its lease's fencing token. A later term of the
// same election has a greater epoch.
func (t *Term) Epoch() fence.Token { return t.lease.Token() }

// Fence returns what the leader sends with each write so that a guard refuses it
// once a newer term has written or fenced.
func (t *Term) Fence() fence.Fence { return t.lease.Fence() }

// Lease returns the term's lease (for its ID, TTL and Deadline).
func (t *Term) Lease() *fence.Lease { return t.lease }

// Owner returns the owner this term was campaigned with.
func (t *Term) Owner() string { return t.lease.Owner() }

// Done closes when the leader can no longer be sure it leads: at the lease's local
// deadline, when the store says the lease is gone, or at Resign. Stop leading
// then; Err says why.
func (t *Term) Done() <-chan struct{} { return t.lease.Done() }

// Context returns a context that is cancelled when Done closes, for work done
// as leader.
func (t *Term) Context() context.Context { return t.lease.Context() }

// Err returns nil while the term lasts, then why it ended: an error matching
// fence.ErrNotHeld (fence.ErrReleased after Resign, fence.ErrExpired past the
// deadline).
func (t *Term) Err() error { return t.lease.Err() }

// Resign ends the term now and hands leadership to a waiting candidate at once
// (it does not wait out the TTL). It returns nil, or an error matching
// fence.ErrNotHeld if the term had already ended (the candidate no longer leads
// either way), or the locker's error if the store could not be told (the term
// then ends at its deadline).
func (t *Term) Resign(ctx context.Context) error {
	if err := t.lease.Release(ctx); err != nil {
		return fmt.Errorf("election %q: resign: %w", t.lease.Name(), err)
	}
	return nil
}

// Leader is the election's state as the store sees it: who leads and in which
// epoch. Epoch 0 means nobody leads.
type Leader struct {
	Name      string        // the election's lock name
	Owner     string        // the leader's owner (WithOwner), "" if none or no leader
	Epoch     fence.Token   // the leader's term epoch; 0 if nobody leads
	ExpiresIn time.Duration // time left on the leader's lease as of the read
}

// Leading reports whether somebody leads.
func (l Leader) Leading() bool { return l.Epoch != 0 }

func leaderOf(info fence.LockInfo) Leader {
	if !info.Held {
		return Leader{Name: info.Name}
	}
	return Leader{Name: info.Name, Owner: info.Owner, Epoch: info.Token, ExpiresIn: info.ExpiresIn}
}

// Leader returns the current leader. It returns an error matching
// fence.ErrNotHeld if nobody leads, fence.ErrNotImplemented if the locker is not
// a fence.Inspector, and the locker's errors (fence.ErrInvalid for a bad name,
// fence.ErrUnavailable).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	in, ok := e.locker.(fence.Inspector)
	if !ok {
		return Leader{}, fmt.Errorf("election %q: leader: %T is not a fence.Inspector: %w", e.name, e.locker, fence.ErrNotImplemented)
	}
	info, err := in.Inspect(ctx, e.name)
	if err != nil {
		return Leader{}, fmt.Errorf("election %q: leader: %w", e.name, err)
	}
	ld := leaderOf(info)
	if !ld.Leading() {
		return ld, fmt.Errorf("election %q: no leader: %w", e.name, fence.ErrNotHeld)
	}
	return ld, nil
}

// Observe yields the current leader (Epoch 0 if nobody leads), then every change
// of leader, in order, until ctx is done or the loop stops: a new term, or the
// end of one (a vacancy, Epoch 0). A renewal is not a change. An observer that
// falls behind skips terms but always gets the latest leader, never an older one
// after a newer. It is built on the locker's fence.Watcher, whose errors it
// yields: an error matching fence.ErrUnavailable while the store cannot be
// reached (Observe goes on), fence.ErrInvalid or fence.ErrClosed (it ends). A
// locker that is not a fence.Watcher yields one error matching
// fence.ErrNotImplemented.
func (e *Election) Observe(ctx context.Context) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		w, ok := e.locker.(fence.Watcher)
		if !ok {
			yield(Leader{}, fmt.Errorf("election %q: observe: %T is not a fence.Watcher: %w", e.name, e.locker, fence.ErrNotImplemented))
			return
		}
		first := true
		var last Leader
		for info, err := range w.Watch(ctx, e.name) {
			if err != nil {
				if !yield(Leader{}, fmt.Errorf("election %q: observe: %w", e.name, err)) {
					return
				}
				continue
			}
			ld := leaderOf(info)
			if !first && ld.Epoch == last.Epoch {
				continue // the same term (a store's bookkeeping moved the index)
			}
			first, last = false, ld
			if !yield(ld, nil) {
				return
			}
		}
	}
}

// Callbacks are what Run calls as leadership comes and goes.
type Callbacks struct {
	// OnStartedLeading is called, in its own goroutine, when this candidate
	// becomes leader, with the term and a context cancelled when the term ends
	// or Run's context ends. It must return once ctx is cancelled: Run resigns
	// only after it returned, so the leader's work has stopped before another
	// candidate leads. If it returns while the term lasts, the work is done: Run
	// resigns and returns nil. Required.
	OnStartedLeading func(ctx context.Context, term *Term)
	// OnStoppedLeading, if set, is called after each term, once
	// OnStartedLeading has returned and the term was resigned (or had ended).
	OnStoppedLeading func()
	// OnNewLeader, if set, is called with every change of leader Run observes
	// (this candidate's terms too, and vacancies with Epoch 0), from one
	// goroutine, in order, starting with the leader when Run starts. It needs a
	// locker that is a fence.Watcher. Changes are read as they come, not
	// queued: a slow OnNewLeader skips terms but is always called with the
	// latest leader, never an older one after a newer.
	OnNewLeader func(Leader)
}

// Run campaigns, leads through cb.OnStartedLeading, and campaigns again after
// each lost term, until ctx ends or the work is done. When ctx ends it cancels
// the leader's context, waits for OnStartedLeading to return, resigns the term
// (handing over at once, not after the TTL) and returns ctx's error after
// OnStoppedLeading.
//
// It returns nil when OnStartedLeading returned while its term lasted (having
// resigned); an error matching fence.ErrInvalid for a missing OnStartedLeading
// or a bad name, TTL or owner; fence.ErrNotImplemented, before campaigning, if
// cb.OnNewLeader is set and the locker is not a fence.Watcher; and Campaign's
// other errors that are not about ctx (fence.ErrTokenExhausted,
// fence.ErrClosed).
func (e *Election) Run(ctx context.Context, cb Callbacks) error {
	if cb.OnStartedLeading == nil {
		return fmt.Errorf("election %q: run: %w", e.name, &fence.InvalidError{Field: "OnStartedLeading", Reason: "is nil"})
	}
	if cb.OnNewLeader != nil {
		if _, ok := e.locker.(fence.Watcher); !ok {
			return fmt.Errorf("election %q: run: OnNewLeader needs a fence.Watcher, %T is not one: %w", e.name, e.locker, fence.ErrNotImplemented)
		}
		octx, stop := context.WithCancel(ctx)
		observed := make(chan struct{})
		defer func() { stop(); <-observed }()
		go func() {
			defer close(observed)
			for ld, err := range e.Observe(octx) {
				if err == nil {
					cb.OnNewLeader(ld)
				}
			}
		}()
	}
	for {
		term, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if lead(ctx, term, cb) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// lead runs one term for Run: OnStartedLeading until it returns, then the
// resign (unless the term already ended) and OnStoppedLeading. It reports
// whether the work is done: OnStartedLeading returned before its context was
// cancelled.
func lead(ctx context.Context, term *Term, cb Callbacks) (workDone bool) {
	lctx, cancel := context.WithCancelCause(term.Context())
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		cb.OnStartedLeading(lctx, term)
	}()
	<-finished
	workDone = lctx.Err() == nil
	if term.Err() == nil {
		stepDown(ctx, term)
	}
	if cb.OnStoppedLeading != nil {
		cb.OnStoppedLeading()
	}
	return workDone
}

// stepDown resigns term for Run, trying again while the store cannot be told
// (backing off from 50ms to 1s), until the resign is done or the term ends by
// itself: a lease that cannot be released keeps renewing, and Run must never
// leave a term renewing after it stopped leading. If the store stays unreachable,
// renewals fail too and the term ends at its deadline.
func stepDown(ctx context.Context, term *Term) {
	const resignTimeout = 5 * time.Second // each try
	ctx = context.WithoutCancel(ctx)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		rctx, cancel := context.WithTimeout(ctx, resignTimeout)
		err := term.Resign(rctx)
		cancel()
		if err == nil || errors.Is(err, fence.ErrNotHeld) || term.Err() != nil {
			return
		}
		select {
		case <-term.Done():
			return
		case <-time.After(backoff):
		}
	}
}
