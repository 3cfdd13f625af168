package driver

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
