package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fencelock/fence"
)

// Errors of this package that have no fence sentinel.
var (
	// ErrUnauthorized means the server refused the request's bearer token (401).
	ErrUnauthorized = errors.New("fencehttp: unauthorized")
	// ErrNotImplemented means the server's store lacks the feature (501): no KV,
	// Guard or Inspector.
	ErrNotImplemented = errors.New("fencehttp: not implemented by the server's store")
)

// Server-side causes without a fence sentinel (errShuttingDown matches
// fence.ErrUnavailable, so a client sees 503 "unavailable").
var (
	errTooLarge      = errors.New("fencehttp: request body too large")
	errNoRoute       = errors.New("fencehttp: no such route")
	errMethod        = errors.New("fencehttp: method not allowed")
	errShuttingDown  = fmt.Errorf("fencehttp: server shutting down: %w", fence.ErrUnavailable)
	errInternalError = errors.New("fencehttp: internal error")
)

// statusTable maps causes to statuses and codes: the one place the server decides a
// status. The first entry that errors.Is matches wins, so order matters where an
// error matches several (ErrNotAcquired joined with a context error is "held").
var statusTable = []struct {
	err    error
	status int
	code   string
}{
	{fence.ErrInvalid, http.StatusBadRequest, "invalid"},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{errNoRoute, http.StatusNotFound, "not_found"},
	{fence.ErrNotFound, http.StatusNotFound, "not_found"},
	{errMethod, http.StatusMethodNotAllowed, "method_not_allowed"},
	{fence.ErrNotAcquired, http.StatusConflict, "held"},
	{fence.ErrStaleToken, http.StatusConflict, "stale_token"},
	{fence.ErrNamespace, http.StatusConflict, "wrong_lock"},
	{fence.ErrTokenExhausted, http.StatusConflict, "token_exhausted"},
	{fence.ErrNotHeld, http.StatusGone, "not_held"},
	{errTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{ErrNotImplemented, http.StatusNotImplemented, "not_implemented"},
	{fence.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{fence.ErrClosed, http.StatusServiceUnavailable, "unavailable"},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "unavailable"},
	{context.Canceled, http.StatusServiceUnavailable, "unavailable"},
}

// errorBody returns the status and JSON body that answer err. Typed fence errors add
// their detail. Unknown errors are 500 with a generic message (the caller logs err).
func errorBody(err error) (int, errorResponse) {
	status, code := http.StatusInternalServerError, "internal"
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			status, code = e.status, e.code
			break
		}
	}
	body := errorResponse{Error: err.Error(), Code: code}
	if status == http.StatusInternalServerError {
		body.Error = errInternalError.Error()
	}
	var (
		held  *fence.HeldError
		stale *fence.StaleTokenError
		ns    *fence.NamespaceError
		inv   *fence.InvalidError
	)
	switch {
	case errors.As(err, &stale):
		body.Key, body.Token, body.Highest, body.SameToken = stale.Resource, stale.Token, stale.Highest, stale.SameToken
	case errors.As(err, &ns):
		body.Key, body.Lock, body.Got = ns.Resource, ns.Want, ns.Got
	case errors.As(err, &held):
		body.Name, body.ExpiresInMs = held.Name, held.ExpiresIn.Milliseconds()
	case errors.As(err, &inv):
		body.Field, body.Value, body.Reason = inv.Field, inv.Value, inv.Reason
		if inv.Field == "lease" {
			body.Value = "" // a lease id is a credential: never echo it
			body.Error = (&fence.InvalidError{Field: inv.Field, Reason: inv.Reason}).Error()
		}
	}
	return status, body
}

// ServerError is an error answer of the server that has no richer fence type. It
// matches (errors.Is) the fence sentinel of its code: ErrNotHeld for 410,
// ErrUnavailable for 503, ErrInvalid for 400 and 413, and so on.
type ServerError struct {
	Status  int    // HTTP status
	Code    string // the "code" of the JSON body
	Message string // the "error" of the JSON body
}

// Error returns the server's message, or the status and code if it sent none.
func (e *ServerError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("fencehttp: server answered %d %s", e.Status, e.Code)
	}
	return e.Message
}

// Unwrap returns the fence sentinel for the code, or nil.
func (e *ServerError) Unwrap() error {
	switch e.Code {
	case "invalid", "too_large":
		return fence.ErrInvalid
	case "unauthorized":
		return ErrUnauthorized
	case "not_found":
		return fence.ErrNotFound
	case "held":
		return fence.ErrNotAcquired
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
	}
	return nil
}

// decodeError turns an error answer back into the error the server's store returned:
// the typed fence errors where the body carries their detail, else a *ServerError.
func decodeError(status int, body errorResponse) error {
	switch body.Code {
	case "held":
		return &fence.HeldError{Name: body.Name, ExpiresIn: time.Duration(body.ExpiresInMs) * time.Millisecond}
	case "stale_token":
		return &fence.StaleTokenError{Resource: body.Key, Token: body.Token, Highest: body.Highest, SameToken: body.SameToken}
	case "wrong_lock":
		return &fence.NamespaceError{Resource: body.Key, Want: body.Lock, Got: body.Got}
	case "invalid":
		if body.Field != "" {
			return &fence.InvalidError{Field: body.Field, Value: body.Value, Reason: body.Reason}
		}
	}
	return &ServerError{Status: status, Code: body.Code, Message: body.Error}
}
