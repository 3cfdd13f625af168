package driver

import (
	"context"
	"time"

	"github.com/fencelock/fence"
)

// Retried returns the holding of hs that an earlier attempt of r granted: one
// with r's request id (fence.WithRequestID) and of r's kind (a lock, a semaphore
// of r's limit, or a shared lease), and whether there is one. It finds none when
// r has no request id. hs are the name's live leases; a backend that finds one
// returns that grant (its token, lease id and slot) instead of granting again,
// after extending it to r.TTL from now as Renew does.
func Retried(r *Request, hs []Holding) (Holding, bool) {
	id := r.Options.RequestID
	if id == "" {
		return Holding{}, false
	}
	for _, h := range hs {
		if h.RequestID == id && h.Limit == r.Options.Limit && h.Shared == r.Options.Shared {
			return h, true
		}
	}
	return Holding{}, false
}

// RetryFinder is a Locker that keeps request ids (fence.Features.RequestIDs) and
// can look up the grant of one without granting anything. A fence server calls it
// for an acquire that carries a request id and arrives while other acquires of
// the name wait at the server: its fair queue lets no new acquire try the store
// ahead of the waiters, but a retry whose first answer was lost must get its
// grant at once, or the waiters ahead of it would wait for that grant to expire.
type RetryFinder interface {
	// FindRetried returns the live grant of name made under the request id of
	// opts (fence.WithRequestID) and of their kind, extended to ttl from now as
	// Renew does, and true; or false if there is none (or no request id). It
	// grants nothing. A store that is an UnclaimedReleaser claims the grant it
	// returns, in the same store operation. Errors are those of Renew: fence.ErrUnavailable, ...
	FindRetried(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (Grant, bool, error)
}

// RetryRequest returns the Request of a FindRetried: name, ttl and the options of
// opts normalised as the Engine normalises them for a TryFunc (a limit of 1 is a
// lock).
func RetryRequest(name string, ttl time.Duration, opts []fence.AcquireOption) *Request {
	o := ApplyOptions(opts...)
	if o.Limit == 1 {
		o.Limit = 0
	}
	o.LimitSet, o.RequestIDSet = false, false
	return &Request{Name: name, TTL: ttl, Options: o}
}

// UnclaimedReleaser is a Locker that keeps request ids and records which of their
// grants a retry has claimed: a retry of an acquire (an Acquire that returns an
// earlier attempt's grant, or FindRetried) claims the grant in the same store
// operation that finds it. The attempt that lost its answer (its client went
// away, its transaction's outcome is unknown) may then end the grant only while
// nobody claimed it, so that a grant nobody will ever learn of frees its name at
// once, and one a retry returned is never ended under its holder. The store
// serializes the claim and the release: either the release ran first and the
// retry finds no grant (it grants afresh), or the claim ran first and the
// release touches nothing.
type UnclaimedReleaser interface {
	// ReleaseUnclaimed releases the lease leaseID of name, granted under
	// requestID, in one store operation, and returns true, if no retry of its
	// acquire has claimed it. It returns false and touches nothing if a retry
	// claimed it, if the lease is no longer held, or if it was not granted under
	// requestID. Errors: fence.ErrInvalid for bad arguments,
	// fence.ErrUnavailable if the store could not be reached (the lease may or
	// may not have been released; if not, it expires), fence.ErrClosed.
	ReleaseUnclaimed(ctx context.Context, name, leaseID, requestID string) (bool, error)
}
