package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fencelock/fence"
)

// State is what Store.Begin found for a key.
type State int

const (
	// Started means the caller now owns the key: no live record existed (or the
	// previous one expired, or its in-flight lock timed out and the caller took
	// over). Run the request, then Complete or Release with Claim.Owner.
	Started State = iota + 1
	// Completed means a first request with the same fingerprint completed:
	// Claim.Response is its stored response, to replay.
	Completed
	// InFlight means a first request with the same fingerprint is still running
	// (its lock has Claim.RetryAfter left).
	InFlight
	// Mismatch means the key was used for a request with another fingerprint.
	Mismatch
)

func (s State) String() string {
	switch s {
	case Started:
		return "started"
	case Completed:
		return "completed"
	case InFlight:
		return "in-flight"
	case Mismatch:
		return "mismatch"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Claim is the result of Store.Begin.
type Claim struct {
	State      State
	Owner      string        // Started: the owner id to pass to Complete or Release
	Response   *Response     // Completed: the stored response
	RetryAfter time.Duration // InFlight: time left on the first request's lock
}

// Response is a stored response: status, the selected headers, and the body.
type Response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

// Store keeps idempotency records. A record is created in flight by Begin, locked
// for a lock timeout, and then completed with the response (Complete) or removed
// (Release). Records live for a retention window after they are created or
// completed; an expired record counts as absent and Purge deletes it.
//
// Implementations: pgstore.Store (several servers share it; times by the
// database clock) and boltstore.Store (embedded, one process), in packages of
// their own so that this one links neither database driver. Every method is safe for
// concurrent use, and Begin is atomic: of concurrent Begins for one key at most one
// gets Started.
type Store interface {
	// Begin claims key for a request whose payload hashes to fingerprint. If it
	// returns Started, the record is in flight and locked for lockTimeout; a later
	// Begin may take it over after that (a crashed first request must not block
	// the key for the whole retention). The record expires retention after now.
	// It returns fence.ErrInvalid for an empty or over-long key or fingerprint or
	// non-positive durations, and fence.ErrUnavailable or fence.ErrClosed if the
	// store cannot be used.
	Begin(ctx context.Context, key, fingerprint string, lockTimeout, retention time.Duration) (Claim, error)

	// Complete stores resp for key and marks it completed, if owner still owns the
	// in-flight record; the record then expires retention after now. It returns
	// ErrNotOwner if the record was taken over, released, completed or expired.
	Complete(ctx context.Context, key, owner string, resp *Response, retention time.Duration) error

	// Release deletes key's in-flight record if owner owns it, so that a retry
	// runs the request again. It returns ErrNotOwner if owner does not own it.
	Release(ctx context.Context, key, owner string) error

	// Purge deletes expired records and returns how many.
	Purge(ctx context.Context) (int, error)
}

// ErrNotOwner means the caller no longer owns the in-flight record: its lock
// timed out and another request took the key over, or the record expired.
var ErrNotOwner = errors.New("idempotency: record not owned by this request")

// MaxKeyLen is the longest store key (client key plus identity scope), in bytes.
const MaxKeyLen = 512

// ValidateBegin checks the arguments of Store.Begin, for Store implementations:
// it returns an error matching fence.ErrInvalid, prefixed with store, for an empty
// or over-long key or fingerprint or non-positive durations, and nil otherwise.
func ValidateBegin(store, key, fingerprint string, lockTimeout, retention time.Duration) error {
	switch {
	case key == "" || len(key) > MaxKeyLen:
		return fmt.Errorf("idempotency: %s: %w", store, &fence.InvalidError{Field: "key", Value: key, Reason: fmt.Sprintf("must be 1 to %d bytes", MaxKeyLen)})
	case fingerprint == "" || len(fingerprint) > 128:
		return fmt.Errorf("idempotency: %s: %w", store, &fence.InvalidError{Field: "fingerprint", Value: fingerprint, Reason: "must be 1 to 128 bytes"})
	case lockTimeout <= 0 || retention <= 0:
		return fmt.Errorf("idempotency: %s: %w", store, &fence.InvalidError{Field: "duration", Value: fmt.Sprintf("lock %v, retention %v", lockTimeout, retention), Reason: "must be positive"})
	}
	return nil
}

// ValidateOwner checks the key and owner of Store.Complete and Store.Release, for
// Store implementations: it returns an error matching fence.ErrInvalid, prefixed
// with store, if either is empty.
func ValidateOwner(store, key, owner string) error {
	if key == "" || owner == "" {
		return fmt.Errorf("idempotency: %s: %w", store, &fence.InvalidError{Field: "owner", Value: owner, Reason: "key and owner must not be empty"})
	}
	return nil
}

// NewOwner returns a random owner id (128 bits, hex), for Store implementations
// to hand out with a Started claim.
func NewOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
