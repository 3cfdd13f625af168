package service

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/fencelock/fence"
)

// Errors of the service that have no fence sentinel. A request's error is a
// *causeError of one of them (see Because), which carries the fact a user reads.
var (
	// ErrUnauthorized means the request's credential was refused: missing or
	// wrong ("unauthorized").
	ErrUnauthorized = errors.New("service: unauthorized")
	// ErrForbidden means the credential was accepted, but it lacks the right the
	// request needs on its lock or key ("forbidden").
	ErrForbidden = errors.New("service: forbidden")
	// ErrNotImplemented means the server's store lacks the feature: no KV, Guard,
	// Purger, Inspector, Healer, Revoker or Watcher ("not_implemented"). It
	// matches fence.ErrNotImplemented.
	ErrNotImplemented = fmt.Errorf("%w by the server's store", fence.ErrNotImplemented)
	// ErrTooLarge means a request or a value is over the server's limit
	// ("too_large").
	ErrTooLarge = errors.New("service: request body too large")
	// ErrNoRoute means the request names no operation of the service
	// ("not_found").
	ErrNoRoute = errors.New("service: no such route")
	// ErrMethod means the operation does not take the request's method
	// ("method_not_allowed"; HTTP only).
	ErrMethod = errors.New("service: method not allowed")
	// ErrInternal is the error of a panic or of a bug ("internal").
	ErrInternal = errors.New("service: internal error")
	// ErrNothingToRevoke is a revoke of a lock that no unexpired lease holds
	// ("not_held"; over HTTP 404, where a renew or release of a lease that is
	// gone is 410).
	ErrNothingToRevoke = errors.New("service: nothing to revoke")
	// ErrBusy is the kind of the refusal of a request that would wait while
	// Config.MaxWaiters requests wait already ("unavailable": it matches
	// fence.ErrUnavailable; over HTTP it comes with Retry-After).
	// Its text is fence.ErrUnavailable's: the refusal's fact says the rest.
	ErrBusy = fmt.Errorf("%w", fence.ErrUnavailable)
	// ErrShuttingDown ends the waits of a draining service ("unavailable").
	ErrShuttingDown error = &causeError{kind: fence.ErrUnavailable, fact: "the server is shutting down"}
)

// causeError is a service-side cause: kind decides the code (codeTable), fact is
// what the user reads after "<op> <name>:". Error, for logs, has both.
type causeError struct {
	kind error
	fact string
}

func (e *causeError) Error() string { return e.kind.Error() + ": " + e.fact }
func (e *causeError) Unwrap() error { return e.kind }

// Because returns an error of kind (one of the sentinels above or of package
// fence) whose message, as Message words it, is the fact formatted.
func Because(kind error, format string, args ...any) error {
	return &causeError{kind: kind, fact: fmt.Sprintf(format, args...)}
}

// codeTable maps causes to the contract's error codes: the one place the service
// decides a code; each wire maps a code to its status or error word. The first
// entry that errors.Is matches wins, so order matters where an error matches
// several (ErrNotAcquired joined with a context error is "held").
//
// A *fence.LimitError matches ErrInvalid, but it is "limit_mismatch", not
// "invalid": the request is well formed and refused only because of the live
// leases of other acquirers (all must agree on a semaphore's limit); the same
// request succeeds once those leases end.
var codeTable = []struct {
	err  error
	code string
}{
	{errLimitMismatch, "limit_mismatch"},
	{fence.ErrInvalid, "invalid"},
	{ErrUnauthorized, "unauthorized"},
	{ErrForbidden, "forbidden"},
	{ErrNoRoute, "not_found"},
	{ErrNothingToRevoke, "not_held"},
	{fence.ErrNotFound, "not_found"},
	{ErrMethod, "method_not_allowed"},
	{fence.ErrNotAcquired, "held"},
	{fence.ErrUnissuedToken, "unissued_token"},
	{fence.ErrLeaseRequired, "lease_required"},
	{fence.ErrStaleToken, "stale_token"},
	{fence.ErrNamespace, "wrong_lock"},
	{fence.ErrTokenExhausted, "token_exhausted"},
	{fence.ErrNotHeld, "not_held"},
	{ErrTooLarge, "too_large"},
	{fence.ErrNotImplemented, "not_implemented"},
	{fence.ErrUnavailable, "unavailable"},
	{fence.ErrClosed, "unavailable"},
	{context.DeadlineExceeded, "unavailable"},
	{context.Canceled, "unavailable"},
}

// Codes returns every code Code can return, "internal" last.
func Codes() []string {
	var codes []string
	seen := map[string]bool{}
	for _, e := range codeTable {
		if !seen[e.code] {
			seen[e.code] = true
			codes = append(codes, e.code)
		}
	}
	return append(codes, "internal")
}

// errLimitMismatch stands in codeTable for every *fence.LimitError, which no
// sentinel of its own matches (see Code).
var errLimitMismatch = errors.New("service: limit mismatch")

// Code returns the contract's error code of err ("held", "stale_token",
// "invalid", ...): "internal" for an error it does not know.
func Code(err error) string {
	var lim *fence.LimitError
	for _, e := range codeTable {
		if errors.Is(err, e.err) || e.err == errLimitMismatch && errors.As(err, &lim) {
			return e.code
		}
	}
	return "internal"
}

// Message is the one line a user reads for err, which op (acquire, renew,
// release, revoke, heal, inspect, watch, list, put, get, fence, delete, purge;
// "" outside those) met on name (a lock name, key or list prefix; "" if unknown
// or invalid): the "error" of every error answer, and the message of the
// clients' errors. It names the operation and the lock or key once, then the
// fact, with no package prefixes or internal wrapping:
//
//	release "job1": lease not held (expired, released, or never granted)
//	put "ledger": stale token 1, highest seen 2
//	acquire "job1": invalid ttl_ms "0": must be between 1 and 86400000
//	lock "job1" is held (expires in 1.2s)
//
// A held lock is the one exception to "<op> <name>: <fact>": the name is the subject.
// Without op the fact stands alone; without name (an invalid one, say) only the op
// precedes it.
func Message(op, name string, err error) string {
	var (
		held  *fence.HeldError
		stale *fence.StaleTokenError
		ns    *fence.NamespaceError
		inv   *fence.InvalidError
		cause *causeError
		lim   *fence.LimitError
		bound *fence.HealBoundError
		unis  *fence.UnissuedTokenError
		unav  *fence.UnavailableError
		lreq  *fence.LeaseRequiredError
	)
	code := Code(err)
	var fact string
	switch {
	case code == "internal":
		fact = "internal error"
	case errors.As(err, &lreq):
		fact = fmt.Sprintf("token %d of lock %q belongs to a live lease: the write must carry its lease id (%s)", lreq.Token, lreq.Lock, leaseHeader)
	case errors.As(err, &bound):
		fact = invalidFact(HealBoundInvalid(bound))
	case errors.As(err, &lim):
		fact = fmt.Sprintf("held with %s, not %s: every acquirer of a name must use the same limit", limitText(lim.Held), limitText(lim.Limit))
	case code == "held":
		if errors.As(err, &held) {
			if name == "" {
				name = held.Name
			}
			if held.Limit > 1 {
				return permitsHeld(name, held)
			}
			if held.ExpiresIn > 0 {
				return fmt.Sprintf("lock %q is held (expires in %v)", name, roundLeft(held.ExpiresIn))
			}
		}
		if name == "" {
			return "lock is held"
		}
		return fmt.Sprintf("lock %q is held", name)
	case errors.As(err, &unis):
		switch {
		case unis.OtherLease:
			fact = fmt.Sprintf("token %d of lock %q was issued to another lease", unis.Token, unis.Lock)
		case unis.Last == 0:
			fact = fmt.Sprintf("token %d of lock %q was never issued: the lock was never granted", unis.Token, unis.Lock)
		default:
			fact = fmt.Sprintf("token %d of lock %q was never issued: the last token issued is %d", unis.Token, unis.Lock, unis.Last)
		}
	case errors.As(err, &stale):
		fact = fmt.Sprintf("stale token %d, highest seen %d", stale.Token, stale.Highest)
		if stale.SameToken {
			fact += " (accepted under another lease)"
		}
	case errors.As(err, &ns):
		fact = fmt.Sprintf("token of lock %q, but %q is fenced by lock %q", ns.Got, ns.Resource, ns.Want)
		if name == ns.Resource {
			fact = fmt.Sprintf("token of lock %q, but the key is fenced by lock %q", ns.Got, ns.Want)
		}
	case errors.As(err, &inv):
		fact = invalidFact(inv)
	case errors.As(err, &cause):
		fact = cause.fact
	case code == "not_held":
		fact = "lease not held (expired, released, or never granted)"
	case code == "not_found":
		fact = "not found"
	case code == "token_exhausted":
		fact = "token counter exhausted: the lock grants no more leases"
	case code == "unauthorized":
		fact = "unauthorized"
	case errors.Is(err, fence.ErrClosed):
		fact = "store closed"
	case code == "unavailable" && errors.As(err, &unav):
		fact = "store unavailable: " + unav.Reason
	case errors.Is(err, context.DeadlineExceeded):
		fact = "store unavailable (timed out)"
	case errors.Is(err, context.Canceled):
		fact = "cancelled"
	case code == "unavailable" && errors.Is(err, syscall.ENOSPC):
		// The store's disk is full: its operator frees space, and the store
		// (the embedded one does) writes again without a restart.
		fact = "store unavailable: disk full (no space left on device)"
	case code == "unavailable":
		fact = "store unavailable"
	default:
		fact = code
	}
	switch {
	case op == "":
		return fact
	case name == "":
		return op + ": " + fact
	}
	return fmt.Sprintf("%s %q: %s", op, name, fact)
}

// leaseHeader is what the lease id of a fenced write is called in a message:
// the HTTP header, which is also what the clients call it.
const leaseHeader = "Fence-Lease"

// permitsHeld is the message of a semaphore whose permits are all held:
// `all 3 permits of "pool" are held (the first expires in 1.2s)`.
func permitsHeld(name string, held *fence.HeldError) string {
	msg := fmt.Sprintf("all %d permits of %q are held", held.Limit, name)
	if held.ExpiresIn > 0 {
		msg += fmt.Sprintf(" (the first expires in %v)", roundLeft(held.ExpiresIn))
	}
	return msg
}

// invalidFact is the fact of an InvalidError: the field, its value (never a lease
// id's) and the reason.
func invalidFact(inv *fence.InvalidError) string {
	if inv.Value == "" || SecretField(inv.Field) {
		return fmt.Sprintf("invalid %s: %s", inv.Field, inv.Reason)
	}
	v := inv.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("invalid %s %q: %s", inv.Field, v, inv.Reason)
}

// HealBoundInvalid returns a heal beyond the bound worded as the invalid field
// seen, as the error answer and message of every other invalid field are worded.
func HealBoundInvalid(e *fence.HealBoundError) *fence.InvalidError {
	return &fence.InvalidError{Field: "seen", Value: e.Seen.String(),
		Reason: fmt.Sprintf("more than %d above the last token %d; heal in steps of at most that", uint64(fence.MaxHealAhead), e.Last)}
}

// limitText names a limit for a message: "limit 3", or "limit 1 (a lock)", which
// is also what a shared lock counts as.
func limitText(n int) string {
	if n == 1 {
		return "limit 1 (a lock)"
	}
	return fmt.Sprintf("limit %d", n)
}

// SecretField reports whether an invalid field's value is a credential (a lease
// id), which an answer never echoes.
func SecretField(field string) bool { return field == "lease" || field == leaseHeader }

// roundLeft rounds a time left for a message: to 100ms from a second up (1.2s), to
// the millisecond below, never to zero.
func roundLeft(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Truncate(100 * time.Millisecond)
	}
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}
