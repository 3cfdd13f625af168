package fencehttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/service"
)

// Errors of this package that have no fence sentinel.
var (
	// ErrUnauthorized means the server refused the request's bearer token (401).
	ErrUnauthorized = errors.New("fencehttp: unauthorized")
	// ErrNotImplemented means the server's store lacks the feature (501): no KV,
	// Guard, Inspector, Healer, Revoker or Watcher. It matches
	// fence.ErrNotImplemented.
	ErrNotImplemented = service.ErrNotImplemented
)

// The service's causes the server meets itself, by their old names here.
var (
	errTooLarge      = service.ErrTooLarge
	errNoRoute       = service.ErrNoRoute
	errMethod        = service.ErrMethod
	errInternalError = service.ErrInternal
)

// because returns an error of kind whose message is the fact formatted (see
// service.Because).
func because(kind error, format string, args ...any) error {
	return service.Because(kind, format, args...)
}

// statusOfCode maps the service's error codes (service.Code) to statuses: the
// one place the server decides a status. A code it does not list is 500.
var statusOfCode = map[string]int{
	"limit_mismatch":     http.StatusConflict,
	"invalid":            http.StatusBadRequest,
	"unauthorized":       http.StatusUnauthorized,
	"forbidden":          http.StatusForbidden,
	"not_found":          http.StatusNotFound,
	"method_not_allowed": http.StatusMethodNotAllowed,
	"held":               http.StatusConflict,
	"unissued_token":     http.StatusConflict,
	"lease_required":     http.StatusConflict,
	"stale_token":        http.StatusConflict,
	"wrong_lock":         http.StatusConflict,
	"token_exhausted":    http.StatusConflict,
	"not_held":           http.StatusGone,
	"too_large":          http.StatusRequestEntityTooLarge,
	"not_implemented":    http.StatusNotImplemented,
	"unavailable":        http.StatusServiceUnavailable,
}

// statusOf returns the status and code of err: the code is the service's, the
// status statusOfCode's, but for a revoke of a lock nobody holds, which is 404
// "not_held" (a renew or release of a lease that is gone is 410).
func statusOf(err error) (int, string) {
	code := service.Code(err)
	status, ok := statusOfCode[code]
	switch {
	case !ok:
		return http.StatusInternalServerError, "internal"
	case code == "not_held" && errors.Is(err, service.ErrNothingToRevoke):
		return http.StatusNotFound, code
	}
	return status, code
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
		inv := service.HealBoundInvalid(bound)
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
		if service.SecretField(inv.Field) {
			body.Value = "" // a lease id is a credential: never echo it
		}
	case code == "not_held" && isLockOp(op):
		body.Name = name
	}
	return status, body
}

// userMessage is the one line a user reads for err, which op met on name: the
// "error" of every error answer, and the message of the Client's errors (see
// service.Message).
func userMessage(op, name string, err error) string { return service.Message(op, name, err) }

// isLockOp reports whether op works on a lock (rather than a key).
func isLockOp(op string) bool {
	switch op {
	case "acquire", "renew", "release", "revoke", "heal", "inspect", "watch":
		return true
	}
	return false
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
