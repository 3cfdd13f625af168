package bolt

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Request ids (fence.WithRequestID) are kept with a lease in memory only: they
// serve a client's retry after a lost answer (a timeout), which comes within
// seconds, and a restart, which forgets them, ends such a client's request too.

var _ driver.RetryFinder = (*Store)(nil)

// retried returns the live lease of r.Name granted under r's request id and of
// r's kind, claimed (in memory, under the lock that found it: see
// driver.UnclaimedReleaser) and renewed to r.TTL from now (Renew: on disk when it
// returns), and true; or false if there is none, or it ended before its renewal.
func (s *Store) retried(ctx context.Context, r *driver.Request) (driver.Result, bool, error) {
	rid := r.Options.RequestID
	if rid == "" {
		return driver.Result{}, false, nil
	}
	if !s.lockOpen() {
		return driver.Result{}, false, fence.ErrClosed
	}
	var found *hold
	var res driver.Result
	if e := s.locks[r.Name]; e != nil && int(e.limit) == r.Options.Limit && e.shared == r.Options.Shared {
		now := s.readLocked(s.clock.Now())
		var hbuf [8]*hold
		for _, h := range e.leases(hbuf[:0]) {
			if h.expires > now && h.requestID() == rid {
				found = h
				h.meta.claimed = true
				res = driver.Result{Token: h.token, ID: hex.EncodeToString(h.id[:])}
				if r.Options.Limit > 0 {
					res.Slot = int(h.slot)
				}
				break
			}
		}
	}
	s.mu.Unlock()
	if found == nil {
		return driver.Result{}, false, nil
	}
	res.Start = s.clock.Now()
	if err := s.Renew(ctx, r.Name, res.ID, r.TTL); err != nil {
		if errors.Is(err, fence.ErrNotHeld) {
			return driver.Result{}, false, nil // it ended meanwhile: grant as usual
		}
		return driver.Result{}, true, err
	}
	return res, true, nil
}

// FindRetried returns the live lease of name granted under the request id of
// opts, claimed and renewed to ttl from now, and true, or false if there is none (see
// driver.RetryFinder); it grants nothing. It returns fence.ErrInvalid for a bad
// name, TTL or request id, fence.ErrClosed after Close, and Renew's errors.
func (s *Store) FindRetried(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, bool, error) {
	r := driver.RetryRequest(name, ttl, opts)
	if err := checkArgs(ctx, "acquire", name, fence.ValidateName(name), fence.ValidateTTL(ttl)); err != nil {
		return driver.Grant{}, false, err
	}
	if rid := r.Options.RequestID; rid != "" {
		if err := fence.ValidateRequestID(rid); err != nil {
			return driver.Grant{}, false, fmt.Errorf("bolt: acquire %q: %w", name, err)
		}
	}
	res, found, err := s.retried(ctx, r)
	if err != nil || !found {
		return driver.Grant{}, false, err
	}
	return driver.Grant{Token: res.Token, ID: res.ID, Start: res.Start, Slot: res.Slot}, true, nil
}

var _ driver.UnclaimedReleaser = (*Store)(nil)

// ReleaseUnclaimed releases the live lease leaseID of name, granted under
// requestID, and wakes the waiters on name, if no retry of its acquire claimed
// it (Acquire or FindRetried returned it): true, once the release is on disk. The
// check and the end are one step under the store's lock, as the claim is. It
// returns false and changes nothing if a retry claimed it, if it is no longer
// held, or if it was granted under another request id (see
// driver.UnclaimedReleaser); fence.ErrInvalid for bad arguments;
// fence.ErrUnavailable if the release could not be written (it took effect in
// memory; after a crash the lease would be honoured until its expiry);
// fence.ErrClosed after Close.
func (s *Store) ReleaseUnclaimed(ctx context.Context, name, leaseID, requestID string) (bool, error) {
	if err := checkArgs(ctx, "release", name, driver.ValidateLease(name, leaseID), fence.ValidateRequestID(requestID)); err != nil {
		return false, err
	}
	id, ok := parseLeaseID(leaseID)
	now := s.now()
	if !s.lockOpen() {
		return false, opError("release", name, fence.ErrClosed)
	}
	h := s.locks[name].find(id)
	if !ok || h == nil || h.expires <= now || h.requestID() != requestID || h.meta.claimed {
		s.mu.Unlock()
		return false, nil
	}
	s.endLeaseLocked(h)
	g := s.syncLocked()
	s.mu.Unlock()
	if err := g.wait(); err != nil {
		return false, opError("release", name, err)
	}
	return true, nil
}
