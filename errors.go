package fence

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error fence returns that means one of these matches it with
// [errors.Is]; backends wrap them with what they were doing, and typed errors
// ([StaleTokenError], [NamespaceError], [InvalidError], [HeldError],
// [UnissuedTokenError], [LeaseRequiredError]) carry detail for
// [errors.As].
var (
	// ErrNotAcquired means the lock is held by another lease and did not become free
	// within the wait. When the wait ended because the context was done, the error
	// also matches the context's error.
	ErrNotAcquired = errors.New("fence: lock not acquired")

	// ErrNotHeld means the lease is no longer held: it expired, was released, was
	// taken over after expiry, or never existed. Renew and Release return it; a
	// lease's Done channel closes with it when the holder can no longer be sure.
	ErrNotHeld = errors.New("fence: lease not held")

	// ErrStaleToken means a guard rejected a fence because it already accepted a
	// higher token, or the same token under another lease. The write changed nothing.
	// The error is a *StaleTokenError carrying the highest token seen.
	ErrStaleToken = errors.New("fence: stale token")

	// ErrNamespace means a guard rejected a fence whose lock name differs from the one
	// that fences the resource: tokens of different locks are not comparable.
	ErrNamespace = errors.New("fence: token from another lock")

	// ErrInvalid means an argument is malformed: a name, TTL, token, lease id, key or
	// value outside the documented limits. Nothing was changed.
	ErrInvalid = errors.New("fence: invalid argument")

	// ErrNotFound means a key or lock has no record.
	ErrNotFound = errors.New("fence: not found")

	// ErrTokenExhausted means a lock's counter reached MaxToken. The backend fails
	// closed: it grants no more leases on that name rather than reuse a token.
	ErrTokenExhausted = errors.New("fence: token counter exhausted")

	// ErrUnavailable means the backing store could not be reached or did not answer
	// in time. The operation may or may not have taken effect.
	ErrUnavailable = errors.New("fence: store unavailable")

	// ErrClosed means the Locker or store was closed.
	ErrClosed = errors.New("fence: closed")

	// ErrNotImplemented means the Locker (or the server's store behind it) lacks
	// an optional capability the call needs: Inspector, Watcher, Revoker, Healer,
	// a guard. Nothing was changed.
	ErrNotImplemented = errors.New("fence: not implemented")
)

// ErrReleased is the cause a lease's Context carries, and what Lease.Err returns,
// after the holder released it. It matches ErrNotHeld.
var ErrReleased = fmt.Errorf("%w: released", ErrNotHeld)

// StaleTokenError is the detail of ErrStaleToken: a guard refused Token because it
// already accepted Highest for Resource. A caller that holds a lease on a backend
// whose counter can go backwards (Redis after failover) can hand Highest to
// [Healer.Heal] so the next grant is above it.
type StaleTokenError struct {
	Resource  string // the guarded resource (key, row, table)
	Token     Token  // the token that was refused
	Highest   Token  // the highest token the resource has accepted
	SameToken bool   // Token == Highest but the lease differed
}

func (e *StaleTokenError) Error() string {
	if e.SameToken {
		return fmt.Sprintf("fence: stale token %d for %q: token %d already accepted under another lease", e.Token, e.Resource, e.Highest)
	}
	return fmt.Sprintf("fence: stale token %d for %q, highest seen %d", e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// NamespaceError is the detail of ErrNamespace: Resource is fenced by tokens of lock
// Want, and a fence of lock Got was presented.
type NamespaceError struct {
	Resource string
	Want     string
	Got      string
}

func (e *NamespaceError) Error() string {
	return fmt.Sprintf("fence: %q is fenced by lock %q, got a token of lock %q", e.Resource, e.Want, e.Got)
}

// Is reports whether target is ErrNamespace.
func (e *NamespaceError) Is(target error) bool { return target == ErrNamespace }

// InvalidError is the detail of ErrInvalid: which argument, its value (truncated for
// the message) and what is wrong with it.
type InvalidError struct {
	Field  string // "name", "ttl", "token", "lease", "key", ...
	Value  string // the offending value, quoted in the message
	Reason string // what is wrong, e.g. "is longer than 255 bytes"
}

func (e *InvalidError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("fence: invalid %s %q: %s", e.Field, v, e.Reason)
}

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(field, value, format string, args ...any) error {
	return &InvalidError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// HeldError is the detail of ErrNotAcquired when the backend knows about the
// current holder: the lock Name is held, and by its clock the lease has ExpiresIn
// left (zero if unknown). For a semaphore (WithLimit), Limit is its number of
// permits, all of them held, and ExpiresIn is the time left on the first to
// expire. Backends never disclose the holder's lease id.
type HeldError struct {
	Name      string
	ExpiresIn time.Duration
	Limit     int // the semaphore's permits, all held; 0 for a lock
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("fence: lock %q not acquired: %s", e.Name, e.Held())
}

// Held says how the lock is held, as the end of Error words it: "held, expires
// in 1.5s", or for a semaphore "all 3 permits held, the first expires in 1.5s".
func (e *HeldError) Held() string {
	h, left := "held", ", expires in "
	if e.Limit > 1 {
		h, left = fmt.Sprintf("all %d permits held", e.Limit), ", the first expires in "
	}
	if e.ExpiresIn > 0 {
		h += left + e.ExpiresIn.Round(time.Millisecond).String()
	}
	return h
}

// Is reports whether target is ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// UnavailableError is the detail of ErrUnavailable when the store knows why it
// cannot answer now: Reason says it in words a user reads ("the cluster has no
// leader"). As with ErrUnavailable, the operation may or may not have taken
// effect; a retry within the caller's wait is how to ride it out.
type UnavailableError struct {
	Reason string
}

func (e *UnavailableError) Error() string { return "fence: store unavailable: " + e.Reason }

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// LimitError is the detail of ErrInvalid when an acquire's limit (WithLimit; 1 for
// a lock or a shared lock) differs from the limit of the live leases on Name: all
// acquirers of a semaphore must agree on its number of permits. Nothing was
// changed.
type LimitError struct {
	Name  string
	Limit int // the limit the acquire asked for
	Held  int // the limit of the live leases
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("fence: %q is held with limit %d, not %d: every acquirer of a name must use the same limit", e.Name, e.Held, e.Limit)
}

// Is reports whether target is ErrInvalid.
func (e *LimitError) Is(target error) bool { return target == ErrInvalid }

// ErrUnissuedToken means a store that both grants a lock and keeps the fenced
// resource refused a fence it never issued (P9): a token above the last one it
// issued for the lock, a lock it never granted, or a lease that was not the one
// issued that token. Nothing was written. The error is an *UnissuedTokenError.
var ErrUnissuedToken = errors.New("fence: token not issued")

// UnissuedTokenError is the detail of ErrUnissuedToken: the store never issued
// Token for Lock (Last is the last token it issued for Lock, 0 if it never
// granted Lock), or, with OtherLease, it issued Token to another lease than the
// one presented.
type UnissuedTokenError struct {
	Lock       string
	Token      Token // the token presented
	Last       Token // the last token the store issued for Lock; 0 if never granted
	OtherLease bool  // Token was issued, but not to the lease presented
}

func (e *UnissuedTokenError) Error() string {
	switch {
	case e.OtherLease:
		return fmt.Sprintf("fence: token %d of lock %q was issued to another lease", e.Token, e.Lock)
	case e.Last == 0:
		return fmt.Sprintf("fence: token %d of lock %q was never issued: the lock was never granted", e.Token, e.Lock)
	}
	return fmt.Sprintf("fence: token %d of lock %q was never issued: the last token issued is %d", e.Token, e.Lock, e.Last)
}

// Is reports whether target is ErrUnissuedToken.
func (e *UnissuedTokenError) Is(target error) bool { return target == ErrUnissuedToken }

// ErrLeaseRequired means a store that both grants a lock and keeps the fenced
// resource refused a fence without a lease id whose token belongs to a lease that
// is still live (P9): stored without a lease, such a fence would refuse that
// lease's own writes under the same token, so anyone who read the token could
// fence its holder out. Nothing was written. The holder writes with its lease id
// (Fence.LeaseID, as Lease.Fence gives it); once the lease has ended, the token
// alone is admitted as before. The error is a *LeaseRequiredError.
var ErrLeaseRequired = errors.New("fence: lease required")

// LeaseRequiredError is the detail of ErrLeaseRequired: Token of Lock belongs to a
// live lease, and the fence presented with it had no lease id.
type LeaseRequiredError struct {
	Lock  string
	Token Token // the token presented, that of a live lease
}

func (e *LeaseRequiredError) Error() string {
	return fmt.Sprintf("fence: token %d of lock %q belongs to a live lease: a write with it must carry that lease's id", e.Token, e.Lock)
}

// Is reports whether target is ErrLeaseRequired.
func (e *LeaseRequiredError) Is(target error) bool { return target == ErrLeaseRequired }

// CheckLeaseGiven is P9's lease rule for a fence without a lease id, in one
// place: it returns a *LeaseRequiredError if f has no lease id and live, which
// says whether a live lease of f.Name holds f's token, is true; otherwise nil.
func CheckLeaseGiven(f Fence, live bool) error {
	if f.LeaseID == "" && live {
		return &LeaseRequiredError{Lock: f.Name, Token: f.Token}
	}
	return nil
}

// CheckIssued is P9's token rule in one place: it returns nil if f's token can
// have been issued for f.Name by a store whose last token issued for that name is
// last (0 if it never granted it), and otherwise an *UnissuedTokenError. Which
// lease a token was issued to is the store's to check.
func CheckIssued(f Fence, last Token) error {
	if last == 0 || f.Token > last {
		return &UnissuedTokenError{Lock: f.Name, Token: f.Token, Last: last}
	}
	return nil
}

// MaxHealAhead is how far above a name's last token a heal may raise that name's
// counter (P9): 2^32. A Healer refuses a larger seen with a *HealBoundError, so no
// client can burn a name's token space with one request. A regression larger than
// that (a store restored from a very old backup) is healed in steps of at most
// MaxHealAhead, each heal raising the name's last token, after an operator checked
// that the guards' highest tokens are real.
const MaxHealAhead Token = 1 << 32

// HealBoundError is the detail of ErrInvalid when a heal of Name asked for Seen,
// more than MaxHealAhead above Last, the name's last token. Nothing was changed.
type HealBoundError struct {
	Name string
	Seen Token // the token the heal asked to pass
	Last Token // the name's last token when the heal was refused
}

func (e *HealBoundError) Error() string {
	return fmt.Sprintf("fence: heal %q to %d: more than %d (MaxHealAhead) above its last token %d; heal in steps of at most that", e.Name, e.Seen, uint64(MaxHealAhead), e.Last)
}

// Is reports whether target is ErrInvalid.
func (e *HealBoundError) Is(target error) bool { return target == ErrInvalid }

// CheckHeal is the heal bound in one place: it returns nil if a heal of name to
// seen may be applied to a name whose last token is last, and otherwise a
// *HealBoundError.
func CheckHeal(name string, seen, last Token) error {
	if seen > last && seen-last > MaxHealAhead {
		return &HealBoundError{Name: name, Seen: seen, Last: last}
	}
	return nil
}
