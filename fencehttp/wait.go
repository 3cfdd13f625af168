package fencehttp

import (
	"net/http"
	"net/url"
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
// InspectRequest, which reads and checks them.
func blockingQueryOf(v url.Values) (service.InspectRequest, error) {
	var q service.InspectRequest
	for _, p := range []struct {
		field string
		to    **string
	}{{"index", &q.Index}, {"wait_ms", &q.WaitMs}} {
		switch vs := v[p.field]; len(vs) {
		case 0:
		case 1:
			*p.to = &vs[0]
		default:
			return q, &fence.InvalidError{Field: p.field, Value: strings.Join(vs, ","), Reason: "must be given at most once"}
		}
	}
	return q, nil
}
