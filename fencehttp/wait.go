package fencehttp

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/service"
)

// Long polls: a waiting acquire and a blocking query are ordinary handlers that
// wait in the service (package service: its fair queues, P10, are shared by
// every wire) with r.Context(), and answer through w.

func (s *Server) acquire(w http.ResponseWriter, r *http.Request, name string) {
	const op = "acquire"
	var req acquireRequest
	if !s.readBody(w, r, op, name, &req, func() error { return nil }) {
		return
	}
	g, err := s.svc.Acquire(r.Context(), name, service.AcquireRequest(req))
	if err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	s.ok(w, r, leaseResponse{Lease: Lease{Name: g.Name, Token: g.Token, ID: g.ID, TTLms: g.TTL.Milliseconds(), Slot: g.Slot},
		WaitedMs: g.Waited.Milliseconds()})
}

// blockingQueryOf reads index and wait_ms, each at most once, as the service's
// InspectRequest, which checks and cuts the wait. wait_ms without index is
// refused: it would be ignored.
func blockingQueryOf(v url.Values) (service.InspectRequest, error) {
	var q service.InspectRequest
	once := func(field string) (string, bool, error) {
		switch vs := v[field]; len(vs) {
		case 0:
			return "", false, nil
		case 1:
			return vs[0], true, nil
		default:
			return "", false, &fence.InvalidError{Field: field, Value: strings.Join(vs, ","), Reason: "must be given at most once"}
		}
	}
	idx, hasIndex, err := once("index")
	if err != nil {
		return q, err
	}
	if hasIndex {
		if q.Index, err = strconv.ParseUint(idx, 10, 64); err != nil {
			return q, &fence.InvalidError{Field: "index", Value: idx, Reason: "must be a Fence-Index: an integer from 0"}
		}
		q.Blocking = true
	}
	wait, hasWait, err := once("wait_ms")
	switch {
	case err != nil:
		return q, err
	case !hasWait:
		return q, nil
	case !hasIndex:
		return q, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "needs index: it bounds a blocking query"}
	}
	// Out of range, ParseInt returns the nearest int64, which the service
	// refuses (below 0) or cuts to its maximum wait (above).
	ms, err := strconv.ParseInt(wait, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return q, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "must be an integer"}
	}
	q.WaitMs = &ms
	return q, nil
}
