package service

import (
	"context"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Abandon: a release with a request id instead of a lease id (over HTTP, POST
// /v1/locks/{name}/release with "request_id" instead of "lease")
// ends the grant of an acquire whose client gave up before it learned the
// lease id (its wait ended, its context was cancelled, every server it tried
// timed out), if that acquire was granted after all.
//
// A server never releases unconditionally a grant that carries a request id
// when its client goes away before the answer (see wentAway): the client may
// be retrying elsewhere, and the retry returns that very grant. It releases
// one that no retry claimed, on a store that records claims
// (driver.UnclaimedReleaser); on any other, only the client knows when it has
// given up, and the abandon it then sends frees the lock at once instead of at
// the grant's expiry, which would otherwise cost every waiter behind it a full
// TTL. It is best effort: an attempt still in flight, granted after the
// abandon was served, is released by its server if nobody claimed it, and
// otherwise ends at its expiry.
//
// The abandon itself is a plain release of the grant it finds, not a
// conditional one: it comes from the acquire's own client, which has given up,
// so no other retry can hold that grant for it. Finding the grant claims it
// (FindRetried), so a conditional release would always refuse.
//
// The server finds the grant as a retry of the acquire would (a store that
// keeps request ids, a driver.RetryFinder), extended to the acquire's ttl_ms as
// a retry is, and releases it by its lease id, so it never ends another
// acquire's grant. "ttl_ms", "limit" and "shared" are the acquire's. The answer
// is 200 {"name","released":true} when a grant was found and released, 410
// not_held when there is none (never granted, expired, or released), and 501
// when the store keeps no request ids (the grant, if any, expires).

// checkRelease validates a release's body: a lease id, or a request id with
// the acquire's ttl_ms, limit and shared.
func (s *Service) checkRelease(req ReleaseRequest) error {
	if req.RequestID == "" {
		switch {
		case req.TTLms != nil:
			return &fence.InvalidError{Field: "ttl_ms", Value: "set", Reason: "goes only with request_id: a release by lease id has no TTL"}
		case req.Limit != nil:
			return &fence.InvalidError{Field: "limit", Value: "set", Reason: "goes only with request_id: a release by lease id has no limit"}
		case req.Shared:
			return &fence.InvalidError{Field: "shared", Value: "true", Reason: "goes only with request_id: a release by lease id has no kind"}
		}
		return fence.ValidateLeaseID(req.Lease)
	}
	if req.Lease != "" {
		return &fence.InvalidError{Field: "request_id", Value: req.RequestID, Reason: "cannot be combined with lease: a release names its lease or abandons its acquire"}
	}
	if err := fence.ValidateRequestID(req.RequestID); err != nil {
		return err
	}
	if _, err := s.ttlFromMs(req.TTLms); err != nil {
		return err
	}
	return s.checkKind(AcquireRequest{Limit: req.Limit, Shared: req.Shared})
}

// abandon ends the grant of the acquire of req.RequestID (see above).
func (s *Service) abandon(ctx context.Context, name string, req ReleaseRequest) error {
	rf, ok := s.cfg.Locker.(driver.RetryFinder)
	if !ok {
		return Because(ErrNotImplemented, "abandoning an acquire by request_id is not supported by this server's store (it keeps no request ids): its grant, if any, expires")
	}
	ttl, _ := s.ttlFromMs(req.TTLms) // checked by checkRelease
	opts := []fence.AcquireOption{fence.WithRequestID(req.RequestID)}
	switch {
	case req.Limit != nil && *req.Limit > 1:
		opts = append(opts, fence.WithLimit(*req.Limit))
	case req.Shared:
		opts = append(opts, fence.WithShared())
	}
	g, found, err := rf.FindRetried(ctx, name, ttl, opts...)
	switch {
	case err != nil:
		return err
	case !found:
		return Because(fence.ErrNotHeld, "no live grant of request_id %q", req.RequestID)
	}
	if err := s.cfg.Locker.Release(ctx, name, g.ID); err != nil {
		return err
	}
	s.held.remove(name, g.ID)
	s.log.Info("released the grant of an abandoned acquire", "lock", name, "token", uint64(g.Token))
	return nil
}
