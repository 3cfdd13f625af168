package fence

import (
	"context"
	"errors"
	"iter"
	"slices"
	"time"
)

// Locker grants leases on named locks, each carrying a fencing token.
//
// Every implementation passes fencetest.TestLocker, which is the precise contract.
// In short:
//
//   - P1: for one name, each grant's token is greater than every earlier grant's,
//     across restarts of durable backends.
//   - P5: only the holder of a lease (its lease id) can renew or release it.
//   - P6: a lock is never granted while an earlier lease on it is unexpired by the
//     backend's clock.
//
// A lease is never proof of exclusivity at the moment of a write: a holder can pause
// past its TTL. Protect the resource with a Guard and the lease's Fence.
type Locker interface {
	// Acquire grants a lease on name for ttl. By default it tries once; WithWait
	// makes it wait for the lock to be released or to expire.
	//
	// It returns an error matching ErrNotAcquired (usually a *HeldError) if the lock
	// stayed held; when ctx ended the wait, the error also matches ctx.Err(). It
	// returns ErrInvalid for a bad name or TTL, ErrTokenExhausted when the name's
	// counter is at MaxToken, ErrUnavailable when the store cannot be reached, and
	// ErrClosed after Close.
	Acquire(ctx context.Context, name string, ttl time.Duration, opts ...AcquireOption) (*Lease, error)

	// Renew extends the lease identified by name and leaseID to ttl from now by the
	// backend's clock. It returns ErrNotHeld if that lease expired, was released or
	// never existed (never touching another holder's lease), and ErrInvalid for bad
	// arguments.
	Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error

	// Release ends the lease identified by name and leaseID and wakes waiters. It
	// returns ErrNotHeld if that lease is no longer held (a retried release is
	// harmless: it can never release a newer holder's lease).
	Release(ctx context.Context, name, leaseID string) error
}

// Healer is implemented by lockers whose counter can go backwards (Redis after a
// failover that lost increments). P4: when a guard rejects a write with a
// *StaleTokenError, report its Highest here; the backend raises name's counter so the
// next grant's token is above seen. Heal never lowers a counter, so it is safe to
// call with any value a guard reported.
//
// A heal raises only name's tokens, never another name's (P9), and seen may be at
// most MaxHealAhead above name's last token: the highest token the backend may
// have issued for name, or healed it to (each backend's Heal says what it counts;
// 0 for a name never used). Heal returns nil once the next grant on name is above
// seen (durably, on a durable store); a *HealBoundError (matching ErrInvalid) for a
// seen beyond the bound, having changed nothing; ErrInvalid for a bad name or a
// seen outside [1, MaxToken]; ErrUnavailable when the store cannot be reached or
// written; ErrClosed after the locker was closed. See the package doc for a
// regression larger than the bound.
type Healer interface {
	Heal(ctx context.Context, name string, seen Token) error
}

// Revoker is implemented by lockers that can end a lease without its lease id: a
// safe force-release for an operator (`fence revoke`). The revoked holder's Renew
// and Release then return ErrNotHeld, and, because the next grant's token is
// higher, any guard refuses the revoked holder's writes once the new holder has
// written or fenced (P1, P3). Until then a paused revoked holder can still write
// with its token: revoke is safe only where the resource is fenced.
type Revoker interface {
	// Revoke ends the current lease on name now, whoever holds it, and wakes
	// waiters. It returns ErrNotHeld if no unexpired lease is held, and
	// ErrInvalid for a bad name.
	Revoke(ctx context.Context, name string) error
}

// Inspector is implemented by lockers that can report lock state, for `fence status`.
type Inspector interface {
	// Inspect returns the state of one lock; a lock never acquired is reported with
	// Held false and LastToken 0, not an error.
	Inspect(ctx context.Context, name string) (LockInfo, error)
	// List returns the locks opts selects, in name order: by default those with
	// at least one lease unexpired by the backend's clock, with opts.All every
	// name the store knows (acquired or healed at least once), held or not; only
	// names starting with opts.Prefix, at most opts.Limit of them
	// (DefaultListLimit if it is <= 0). The limit counts the locks returned, so
	// a held-only listing returns up to Limit held locks however many free names
	// sort before them. It returns ErrInvalid for a prefix the backend cannot
	// search for (on some backends, one that is not a valid name),
	// ErrUnavailable when the store cannot be reached and ErrClosed after Close.
	List(ctx context.Context, opts ListOptions) ([]LockInfo, error)
}

// Watcher is implemented by lockers that can follow one lock's state as it
// changes: leader election's Observe, `fence leader --watch` and the HTTP API's
// blocking queries are built on it. How a backend learns of a change is its own (a
// watch, pub/sub, LISTEN/NOTIFY, a ZooKeeper watch, in process); the expiry of a
// lease is noticed at its expiry by the backend's clock.
type Watcher interface {
	// Watch yields the state of name as Inspect reports it, then the state after
	// each change, in order, until ctx is done or the loop stops. A change is an
	// acquire, a release, an expiry, a revoke or a heal; a renewal is not.
	//
	// Each state yielded has another Index than the one before (a greater one,
	// unless the store's counter went back, as after a Redis failover). States are
	// read when a change is signalled, not queued: a receiver that falls behind
	// skips states but gets the latest one, never an older one after a newer.
	//
	// It yields an error matching ErrInvalid for a bad name, or ErrClosed after
	// Close, and ends. While the store cannot be reached it yields an error
	// matching ErrUnavailable and goes on trying, backing off, so the receiver
	// decides whether to stop.
	Watch(ctx context.Context, name string) iter.Seq2[LockInfo, error]
}

// Features are the kinds of grant beyond an exclusive lock that a Locker makes.
// An acquire asking for one a Locker lacks returns an error matching
// ErrNotImplemented and changes nothing.
type Features struct {
	Semaphores bool // WithLimit: at most N leases at once, each with a slot
	Shared     bool // WithShared: any number of shared holders, or one exclusive
	// RequestIDs says the Locker keeps WithRequestID's id with a grant, so that a
	// retried acquire returns the grant it made instead of making another. A
	// Locker without it validates the id and otherwise ignores it (it is no
	// error: a retry may then make a second grant, which ends at its TTL).
	RequestIDs bool
}

// FeatureLocker is implemented by lockers that make more than exclusive locks;
// Features says which kinds. A Locker that does not implement it makes locks only.
type FeatureLocker interface {
	Locker
	Features() Features
}

// FeaturesOf returns the Features l declares, or none if l is not a FeatureLocker.
// For a client of a remote server it says what the client can ask for; the
// server's store may still answer ErrNotImplemented.
func FeaturesOf(l Locker) Features {
	if f, ok := l.(FeatureLocker); ok {
		return f.Features()
	}
	return Features{}
}

// DefaultListLimit is how many locks Inspector.List returns when
// ListOptions.Limit is <= 0.
const DefaultListLimit = 1000

// LockInfo describes a lock as a backend sees it. It never contains a lease id.
type LockInfo struct {
	Name      string        `json:"name"`
	Held      bool          `json:"held"`
	Token     Token         `json:"token,omitempty"`      // the current holder's token, if held
	Owner     string        `json:"owner,omitempty"`      // the current holder's owner (WithOwner), if held
	LastToken Token         `json:"last_token,omitempty"` // the highest token issued for name
	ExpiresIn time.Duration `json:"-"`                    // time left on the current lease, if held

	// Limit is the semaphore's limit (WithLimit) while it has live leases; 0 for
	// a lock.
	Limit int `json:"limit,omitempty"`
	// Shared says the live leases are shared ones (WithShared).
	Shared bool `json:"shared,omitempty"`
	// Holders lists every live lease of a semaphore or of a shared lock, in slot
	// order for a semaphore and token order for shared holders; it is nil for a
	// lock held exclusively (Token, Owner and ExpiresIn describe that holder).
	// With Holders set, Token, Owner and ExpiresIn describe the holder with the
	// highest token.
	Holders []Holder `json:"holders,omitempty"`
}

// Equal reports whether i and j describe the same state, Holders included
// (LockInfo holds a slice, so it cannot be compared with ==).
func (i LockInfo) Equal(j LockInfo) bool {
	return i.Name == j.Name && i.Held == j.Held && i.Token == j.Token && i.Owner == j.Owner &&
		i.LastToken == j.LastToken && i.ExpiresIn == j.ExpiresIn && i.Limit == j.Limit &&
		i.Shared == j.Shared && slices.Equal(i.Holders, j.Holders)
}

// Holder is one live lease of a semaphore or shared lock, as LockInfo.Holders
// reports it. It never contains the lease id.
type Holder struct {
	Slot      int           `json:"slot"`
	Token     Token         `json:"token"`
	Owner     string        `json:"owner,omitempty"`
	ExpiresIn time.Duration `json:"-"`
}

// Index is the lock's change index, for blocking queries (the HTTP API's
// Fence-Index) and watchers: it is the same for two reads of an unchanged lock and
// greater after each acquire, release, expiry, revoke or heal. It is derived from
// the state: 2*LastToken (or 2*Token, if greater), plus 1 while the lock is free.
// A backend's bookkeeping may raise it without a change a user can see (on
// ZooKeeper, LastToken moves when a waiter joins), so a reader compares states,
// not only indexes, where that matters. It is at least 1. On a semaphore or a
// shared lock, the end of one of several live leases leaves it unchanged (the
// name is still held and no token was issued): a watcher sees every grant and the
// end of the last lease, not each release in between.
func (i LockInfo) Index() uint64 {
	n := 2 * uint64(max(i.LastToken, i.Token))
	switch {
	case !i.Held:
		n++
	case n == 0:
		n = 2 // held, but the store reports no token: still not the free index 1
	}
	return n
}

// WaitForever, given to WithWait, waits until the context is done.
const WaitForever time.Duration = 1<<63 - 1

// AcquireOption is a per-call option of Locker.Acquire: WithWait, WithAutoRenew,
// WithOwner, WithLimit, WithShared, WithRequestID.
type AcquireOption func(*AcquireOptions)

// AcquireOptions are the per-call options of an acquire, as its AcquireOption
// values set them. Backends read them (driver.ApplyOptions applies a call's
// options; the driver's Engine validates and normalises them); applications pass
// the With functions instead.
type AcquireOptions struct {
	// Wait is how long to wait for a held lock (WithWait): 0 tries once,
	// WaitForever waits until the context ends.
	Wait time.Duration
	// AutoRenew asks the lease to renew itself (WithAutoRenew).
	AutoRenew bool
	// Owner names the holder (WithOwner); "" is no owner.
	Owner string
	// Limit is the semaphore's number of permits (WithLimit); 0 (or 1) is a lock.
	Limit int
	// Shared asks for a shared lease (WithShared).
	Shared bool
	// LimitSet says WithLimit was given, so that WithLimit(0) is refused rather
	// than taken for a lock.
	LimitSet bool
	// RequestID identifies the acquire across its retries (WithRequestID); ""
	// is none.
	RequestID string
	// RequestIDSet says WithRequestID was given, so that WithRequestID("") is
	// refused rather than taken for none.
	RequestIDSet bool
}

// WithWait makes Acquire wait up to d for a held lock to be released or to expire.
// Waiting is woken by the release (how depends on the backend), not by polling
// alone. A negative d is treated as 0.
func WithWait(d time.Duration) AcquireOption {
	return func(o *AcquireOptions) {
		if d < 0 {
			d = 0
		}
		o.Wait = d
	}
}

// WithAutoRenew makes the lease renew itself at about a third of its TTL. When a
// renewal fails the lease keeps trying until it would have expired, then closes
// Done; when the backend says the lease is gone (ErrNotHeld) it closes Done at once.
//
// Auto-renewal is advisory: it narrows the window in which a paused holder acts on
// a lost lock, it never closes it. A holder can pause right after a successful
// renewal. Only a guard checking the fencing token makes writes safe.
func WithAutoRenew() AcquireOption { return func(o *AcquireOptions) { o.AutoRenew = true } }

// WithOwner names the holder: the backend stores owner with the lease and reports
// it in LockInfo.Owner (Inspect, List, `fence status`), so that people and
// programs can see who holds a lock; the lease id, a credential, is never shown.
// It is at most MaxOwnerLen bytes of printable UTF-8 ("host:pid command" is
// what `fence lock` uses); "" means no owner. A bad owner makes Acquire return
// ErrInvalid. An owner is a label, not a credential: anyone may claim any owner.
func WithOwner(owner string) AcquireOption {
	return func(o *AcquireOptions) { o.Owner = owner }
}

// WithLimit makes the name a counting semaphore of n permits: Acquire grants at
// most n unexpired leases on it at once, each with a slot in [0, n) (Lease.Slot)
// and a token from the name's one counter, so tokens of all slots are comparable
// and a resource per slot is fenced as a resource is by a lock: a holder of slot 3
// that paused past its TTL is refused once the next holder of slot 3 writes or
// fences. A resource shared by several slots cannot be fenced per holder: each
// holder's write raises its highest token and refuses the others'.
//
// Every acquirer of a name must agree on n: an acquire with another limit than the
// name's live leases have (a lock counts as 1) returns a *LimitError, matching
// ErrInvalid. Once no lease is live, any limit may be used. WithLimit(1) is a
// lock. n outside [1, MaxLimit] makes Acquire return ErrInvalid, as does
// combining it with WithShared. A Locker without Features.Semaphores returns
// ErrNotImplemented.
func WithLimit(n int) AcquireOption {
	return func(o *AcquireOptions) { o.Limit, o.LimitSet = n, true }
}

// WithShared asks for a shared lease: any number of shared holders (at most
// MaxLimit) may hold the name at once, or one exclusive holder (an acquire without
// WithShared). Every grant's token, shared or exclusive, is above every earlier
// grant's on the name.
//
// Exclusive waiters are preferred: while an exclusive acquire is waiting for
// shared holders to leave, new shared acquires find the lock held, so a stream of
// readers cannot starve a writer. An exclusive waiter that gives up stops
// holding off shared acquires within its TTL at the latest. A Locker without
// Features.Shared returns ErrNotImplemented.
//
// Shared holders write concurrently, so a guard cannot order their writes
// against each other; what a shared lease's token fences is an exclusive
// holder's resource against a stale shared holder, once the exclusive holder
// has written or fenced.
func WithShared() AcquireOption { return func(o *AcquireOptions) { o.Shared = true } }

// WithRequestID names one acquire across its retries, so that a retry whose first
// attempt's answer was lost (a timeout, a dropped connection, a failover to
// another server of a cluster) cannot leave a second, orphaned grant: while the
// name has a live lease granted under the same request id, of the same kind
// (lock, semaphore of the same limit, or shared), Acquire returns that grant (its
// lease id, token and slot) instead of granting again, renewed to ttl from now as
// Renew would. Nothing else changes, so an equal retry is a no-op. Once that lease
// has ended (released, expired or revoked), the id grants anew, with a new token.
//
// id is 1 to MaxRequestIDLen bytes of printable ASCII without spaces; anything
// else makes Acquire return ErrInvalid. Whoever knows a live grant's request id
// gets its lease id from a retry, so a request id is a credential as a lease id
// is: make it unguessable (128 random bits, as the HTTP clients do) and use it for
// one acquire only. A Locker whose Features lack RequestIDs ignores the id.
func WithRequestID(id string) AcquireOption {
	return func(o *AcquireOptions) { o.RequestID, o.RequestIDSet = id, true }
}

// TryAcquire is Acquire without waiting: it returns an error matching
// ErrNotAcquired at once if name is held.
func TryAcquire(ctx context.Context, l Locker, name string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	return l.Acquire(ctx, name, ttl, append(opts, WithWait(0))...)
}

// Heal reports to l the highest token in err if err is a *StaleTokenError and l is a
// Healer, so that the next grant on name is above it (P4). It returns nil if there
// was nothing to heal, or the Healer's error.
func Heal(ctx context.Context, l Locker, name string, err error) error {
	var st *StaleTokenError
	if !errors.As(err, &st) {
		return nil
	}
	h, ok := l.(Healer)
	if !ok {
		return nil
	}
	return h.Heal(ctx, name, st.Highest)
}

// ListOptions select the locks Inspector.List returns, in name order.
type ListOptions struct {
	Prefix string // only names starting with Prefix ("" for every name)
	Limit  int    // at most Limit of them; DefaultListLimit if <= 0
	// All asks for every name the store knows, held or not (a free name is
	// reported with Held false and its LastToken). By default only names with at
	// least one unexpired lease are listed.
	All bool
}
