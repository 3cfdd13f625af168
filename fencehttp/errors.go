package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/fencelock/fence"
)

// Errors of this package that have no fence sentinel.
var (
	// ErrUnauthorized means the server refused the request's bearer token (401).
	ErrUnauthorized = errors.New("fencehttp: unauthorized")
	// ErrNotImplemented means the server's store lacks the feature (501): no KV,
	// Guard, Inspector, Healer, Revoker or Watcher. It matches
	// fence.ErrNotImplemented.
	ErrNotImplemented = fmt.Errorf("%w by the server's store", fence.ErrNotImplemented)
)

// Server-side causes without a fence sentinel. They are kinds: a request's error is
// a *causeError of one of them, which carries the fact a user reads
// (errShuttingDown matches fence.ErrUnavailable, so a client sees 503 "unavailable").
var (
	errTooLarge      = errors.New("fencehttp: request body too large")
	errNoRoute       = errors.New("fencehttp: no such route")
	errMethod        = errors.New("fencehttp: method not allowed")
	errShuttingDown  = &causeError{kind: fence.ErrUnavailable, fact: "the server is shutting down"}
	errInternalError = errors.New("fencehttp: internal error")
	// errNothingToRevoke is a revoke of a lock that no unexpired lease holds: 404
	// "not_held" (a renew or release of a lease that is gone is 410).
	errNothingToRevoke = errors.New("fencehttp: nothing to revoke")
)

// causeError is a server-side cause: kind decides the status (statusTable), fact is
// what the user reads after "<op> <name>:". Error, for logs, has both.
type causeError struct {
	kind error
	fact string
}

func (e *causeError) Error() string { return e.kind.Error() + ": " + e.fact }
func (e *causeError) Unwrap() error { return e.kind }

// because returns a *causeError of kind with the fact formatted.
func because(kind error, format string, args ...any) error {
	return &causeError{kind: kind, fact: fmt.Sprintf(format, args...)}
}

// statusTable maps causes to statuses and codes: the one place the server decides a
// status. The first entry that errors.Is matches wins, so order matters where an
// error matches several (ErrNotAcquired joined with a context error is "held").
//
// A *fence.LimitError matches ErrInvalid, but it is 409 "limit_mismatch", not 400:
// the request is well formed and refused only because of the live leases of other
// acquirers (all must agree on a semaphore's limit); the same request succeeds once
// those leases end, which is what 409 Conflict says and 400 (fix the request) does
// not.
var statusTable = []struct {
	err    error
	status int
	code   string
}{
	{errLimitMismatch, http.StatusConflict, "limit_mismatch"},
	{fence.ErrInvalid, http.StatusBadRequest, "invalid"},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{ErrForbidden, http.StatusForbidden, "forbidden"},
	{errNoRoute, http.StatusNotFound, "not_found"},
	{errNothingToRevoke, http.StatusNotFound, "not_held"},
	{fence.ErrNotFound, http.StatusNotFound, "not_found"},
	{errMethod, http.StatusMethodNotAllowed, "method_not_allowed"},
	{fence.ErrNotAcquired, http.StatusConflict, "held"},
	{fence.ErrUnissuedToken, http.StatusConflict, "unissued_token"},
	{fence.ErrLeaseRequired, http.StatusConflict, "lease_required"},
	{fence.ErrStaleToken, http.StatusConflict, "stale_token"},
	{fence.ErrNamespace, http.StatusConflict, "wrong_lock"},
	{fence.ErrTokenExhausted, http.StatusConflict, "token_exhausted"},
	{fence.ErrNotHeld, http.StatusGone, "not_held"},
	{errTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{fence.ErrNotImplemented, http.StatusNotImplemented, "not_implemented"},
	{fence.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{fence.ErrClosed, http.StatusServiceUnavailable, "unavailable"},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "unavailable"},
	{context.Canceled, http.StatusServiceUnavailable, "unavailable"},
}

// errLimitMismatch stands in statusTable for every *fence.LimitError, which no
// sentinel of its own matches (see statusOf).
var errLimitMismatch = errors.New("fencehttp: limit mismatch")

// statusOf returns the status and code of err from statusTable: 500 "internal" for
// an error it does not know.
func statusOf(err error) (int, string) {
	var lim *fence.LimitError
	for _, e := range statusTable {
		if errors.Is(err, e.err) || e.err == errLimitMismatch && errors.As(err, &lim) {
			return e.status, e.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// errorBody returns the status and JSON body that answer err, which op (acquire,
// renew, release, revoke, heal, inspect, watch, list, put, get, fence, delete,
// purge; "" outside those) met on
// name (a lock name, key or list prefix; "" if unknown or invalid). Typed fence errors
// add their detail. Unknown errors are 500 with a generic message (the caller logs
// err).
func errorBody(op, name string, err error) (int, errorResponse) {
	status, code := statusOf(err)
	body := errorResponse{Error: userMessage(op, name, err), Code: code}
	var (
		held  *fence.HeldError
		stale *fence.StaleTokenError
		ns    *fence.NamespaceError
		inv   *fence.InvalidError
		lim   *fence.LimitError
		bound *fence.HealBoundError
		unis  *fence.UnissuedTokenError
		lreq  *fence.LeaseRequiredError
	)
	switch {
	case status == http.StatusInternalServerError:
	case errors.As(err, &lreq):
		body.Key, body.Lock, body.Token = name, lreq.Lock, lreq.Token
	case errors.As(err, &bound):
		inv := healBoundInvalid(bound)
		last := bound.Last
		body.Field, body.Value, body.Reason = inv.Field, inv.Value, inv.Reason
		body.Name, body.Last, body.Bound = bound.Name, &last, fence.MaxHealAhead
	case errors.As(err, &lim):
		body.Name, body.Limit, body.HeldLimit = lim.Name, lim.Limit, lim.Held
		if body.Name == "" {
			body.Name = name
		}
	case errors.As(err, &unis):
		last := unis.Last
		body.Key, body.Lock, body.Token, body.Last, body.OtherLease = name, unis.Lock, unis.Token, &last, unis.OtherLease
	case errors.As(err, &stale):
		body.Key, body.Token, body.Highest, body.SameToken = stale.Resource, stale.Token, stale.Highest, stale.SameToken
	case errors.As(err, &ns):
		body.Key, body.Lock, body.Got = ns.Resource, ns.Want, ns.Got
	case errors.As(err, &held):
		body.Name, body.ExpiresInMs, body.Limit = held.Name, held.ExpiresIn.Milliseconds(), held.Limit
		if body.Name == "" {
			body.Name = name
		}
	case errors.As(err, &inv):
		body.Field, body.Value, body.Reason = inv.Field, inv.Value, inv.Reason
		if secretField(inv.Field) {
			body.Value = "" // a lease id is a credential: never echo it
		}
	case code == "not_held" && isLockOp(op):
		body.Name = name
	}
	return status, body
}

// userMessage is the one line a user reads for err, which op met on name: the
// "error" of every error answer, and the message of the Client's errors. It names the
// operation and the lock or key once, then the fact, with no package prefixes or
// internal wrapping:
//
//	release "job1": lease not held (expired, released, or never granted)
//	put "ledger": stale token 1, highest seen 2
//	acquire "job1": invalid ttl_ms "0": must be between 1 and 86400000
//	lock "job1" is held (expires in 1.2s)
//
// A held lock is the one exception to "<op> <name>: <fact>": the name is the subject.
// Without op the fact stands alone; without name (an invalid one, say) only the op
// precedes it.
func userMessage(op, name string, err error) string {
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
	status, code := statusOf(err)
	var fact string
	switch {
	case status == http.StatusInternalServerError:
		fact = "internal error"
	case errors.As(err, &lreq):
		fact = fmt.Sprintf("token %d of lock %q belongs to a live lease: the write must carry its lease id (%s)", lreq.Token, lreq.Lock, HeaderLease)
	case errors.As(err, &bound):
		fact = invalidFact(healBoundInvalid(bound))
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
	if inv.Value == "" || secretField(inv.Field) {
		return fmt.Sprintf("invalid %s: %s", inv.Field, inv.Reason)
	}
	v := inv.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("invalid %s %q: %s", inv.Field, v, inv.Reason)
}

// healBoundInvalid words a heal beyond the bound as the invalid field seen, as
// the error body and message of every other invalid field are worded.
func healBoundInvalid(e *fence.HealBoundError) *fence.InvalidError {
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

// secretField reports whether an invalid field's value is a credential.
func secretField(field string) bool { return field == "lease" || field == HeaderLease }

// isLockOp reports whether op works on a lock (rather than a key).
func isLockOp(op string) bool {
	switch op {
	case "acquire", "renew", "release", "revoke", "heal", "inspect", "watch":
		return true
	}
	return false
}

// roundLeft rounds a time left for a message: to 100ms from a second up (1.2s), to
// the millisecond below, never to zero.
func roundLeft(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Truncate(100 * time.Millisecond)
	}
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}

// ServerError is an error answer of the server. Its Error is the server's message
// verbatim (the "error" of the JSON body: it names the operation and the lock or key
// already). It matches (errors.Is) the fence sentinel of its code: ErrNotAcquired for
// "held", ErrNotHeld for 410, ErrUnavailable for 503, ErrInvalid for 400, 413 and
// "limit_mismatch", and so on; where the body carries detail it unwraps to the typed
// error, so errors.As finds a *fence.HeldError, *fence.StaleTokenError,
// *fence.UnissuedTokenError, *fence.LeaseRequiredError, *fence.NamespaceError,
// *fence.InvalidError, *fence.LimitError or (a heal beyond the bound)
// *fence.HealBoundError.
type ServerError struct {
	Status  int    // HTTP status
	Code    string // the "code" of the JSON body ("" if the answer was not fence's JSON)
	Message string // the "error" of the JSON body, or a description of a foreign answer

	detail error // the typed fence error the body describes, or nil
}

// Error returns the server's message, or the status and code if it sent none.
func (e *ServerError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("server answered %d %s", e.Status, e.Code)
	}
	return e.Message
}

// Unwrap returns the typed fence error the body describes if there is one, else the
// sentinel for the code (or, for an answer without a code, for the status), or nil.
func (e *ServerError) Unwrap() error {
	if e.detail != nil {
		return e.detail
	}
	switch e.Code {
	case "invalid", "too_large", "limit_mismatch":
		return fence.ErrInvalid
	case "unauthorized":
		return ErrUnauthorized
	case "forbidden":
		return ErrForbidden
	case "not_found":
		return fence.ErrNotFound
	case "held":
		return fence.ErrNotAcquired
	case "unissued_token":
		return fence.ErrUnissuedToken
	case "lease_required":
		return fence.ErrLeaseRequired
	case "stale_token":
		return fence.ErrStaleToken
	case "wrong_lock":
		return fence.ErrNamespace
	case "token_exhausted":
		return fence.ErrTokenExhausted
	case "not_held":
		return fence.ErrNotHeld
	case "not_implemented":
		return ErrNotImplemented
	case "unavailable":
		return fence.ErrUnavailable
	}
	switch {
	case e.Status == http.StatusServiceUnavailable || e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout:
		return fence.ErrUnavailable
	case e.Status == http.StatusUnauthorized:
		return ErrUnauthorized
	case e.Status == http.StatusForbidden:
		return ErrForbidden
	}
	return nil
}

// decodeError turns an error answer back into an error: a *ServerError with the
// server's message, unwrapping to the typed fence error where the body carries its
// detail.
func decodeError(status int, body errorResponse) error {
	e := &ServerError{Status: status, Code: body.Code, Message: body.Error}
	switch body.Code {
	case "held":
		e.detail = &fence.HeldError{Name: body.Name, ExpiresIn: time.Duration(body.ExpiresInMs) * time.Millisecond, Limit: body.Limit}
	case "unissued_token":
		if body.Last != nil {
			e.detail = &fence.UnissuedTokenError{Lock: body.Lock, Token: body.Token, Last: *body.Last, OtherLease: body.OtherLease}
		}
	case "lease_required":
		if body.Lock != "" && body.Token != 0 {
			e.detail = &fence.LeaseRequiredError{Lock: body.Lock, Token: body.Token}
		}
	case "stale_token":
		e.detail = &fence.StaleTokenError{Resource: body.Key, Token: body.Token, Highest: body.Highest, SameToken: body.SameToken}
	case "wrong_lock":
		e.detail = &fence.NamespaceError{Resource: body.Key, Want: body.Lock, Got: body.Got}
	case "limit_mismatch":
		if body.Limit > 0 && body.HeldLimit > 0 {
			e.detail = &fence.LimitError{Name: body.Name, Limit: body.Limit, Held: body.HeldLimit}
		}
	case "invalid":
		if seen, err := strconv.ParseUint(body.Value, 10, 64); err == nil && body.Field == "seen" && body.Bound != 0 && body.Last != nil {
			e.detail = &fence.HealBoundError{Name: body.Name, Seen: fence.Token(seen), Last: *body.Last}
		} else if body.Field != "" {
			e.detail = &fence.InvalidError{Field: body.Field, Value: body.Value, Reason: body.Reason}
		}
	}
	return e
}

// clientError is an error the Client makes itself (bad arguments, an unreachable
// server, a cancelled context): Error is msg, worded as the server's messages are,
// and errors.Is and errors.As see every cause.
type clientError struct {
	msg    string
	causes []error
}

func (e *clientError) Error() string   { return e.msg }
func (e *clientError) Unwrap() []error { return e.causes }

// invalidArg is a Client's validation error for op on name: the server's wording,
// matching fence.ErrInvalid and the *fence.InvalidError.
func invalidArg(op, name string, err error) error {
	return &clientError{msg: userMessage(op, name, err), causes: []error{err}}
}
