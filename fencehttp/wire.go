package fencehttp

import (
	"net/url"
	"strings"

	"github.com/fencelock/fence"
)

// Header names of fenced writes.
const (
	// HeaderToken carries the fencing token of a write, in decimal.
	HeaderToken = "Fence-Token"
	// HeaderLease carries the lease id of a write (optional).
	HeaderLease = "Fence-Lease"
	// HeaderLock carries the lock name whose counter issued the token (required on
	// every fenced write), URL-escaped as a path segment.
	HeaderLock = "Fence-Lock"
)

// acquireRequest is the body of POST /v1/locks/{name}/acquire.
type acquireRequest struct {
	TTLms  *int64 `json:"ttl_ms"`
	WaitMs int64  `json:"wait_ms"`
}

// renewRequest is the body of POST /v1/locks/{name}/renew.
type renewRequest struct {
	Lease string `json:"lease"`
	TTLms *int64 `json:"ttl_ms"`
}

// releaseRequest is the body of POST /v1/locks/{name}/release.
type releaseRequest struct {
	Lease string `json:"lease"`
}

// healRequest is the body of POST /v1/locks/{name}/heal, and of its 200 answer.
type healRequest struct {
	Seen fence.Token `json:"seen"`
}

// leaseResponse is the body of a 200 answer to acquire.
type leaseResponse struct {
	Name  string      `json:"name"`
	Token fence.Token `json:"token"`
	Lease string      `json:"lease"`
	TTLms int64       `json:"ttl_ms"`
	// WaitedMs is the time from when the server got the request to when it sent the
	// store the request that granted the lease (rounded down): when the store's TTL
	// started, not when the store answered, which may be later by the grant's
	// commit. A client adds it to the time it sent the request to date the grant, so
	// that its deadline is never later than the store's expiry and a lease granted at
	// the end of a long poll does not look as if it had started when the poll began.
	WaitedMs int64 `json:"waited_ms"`
}

// renewResponse is the body of a 200 answer to renew.
type renewResponse struct {
	Name  string `json:"name"`
	TTLms int64  `json:"ttl_ms"`
}

// releaseResponse is the body of a 200 answer to release.
type releaseResponse struct {
	Name     string `json:"name"`
	Released bool   `json:"released"`
}

// lockInfo is fence.LockInfo on the wire.
type lockInfo struct {
	Name        string      `json:"name"`
	Held        bool        `json:"held"`
	Token       fence.Token `json:"token,omitempty"`
	LastToken   fence.Token `json:"last_token,omitempty"`
	ExpiresInMs int64       `json:"expires_in_ms,omitempty"`
}

type listResponse struct {
	Locks []lockInfo `json:"locks"`
}

// kvResponse is the body of a 200 answer to PUT /v1/kv/{key} and POST /v1/fences/{key}.
type kvResponse struct {
	Key   string      `json:"key"`
	Lock  string      `json:"lock"`
	Token fence.Token `json:"token"`
}

// errorResponse is the body of every error answer.
type errorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code"`

	// held
	ExpiresInMs int64 `json:"expires_in_ms,omitempty"`
	// stale_token, wrong_lock
	Key       string      `json:"key,omitempty"`
	Highest   fence.Token `json:"highest,omitempty"`
	Token     fence.Token `json:"token,omitempty"`
	SameToken bool        `json:"same_token,omitempty"`
	Lock      string      `json:"lock,omitempty"` // wrong_lock: the lock that fences Key
	Got       string      `json:"got,omitempty"`  // wrong_lock: the lock presented
	// invalid
	Field  string `json:"field,omitempty"`
	Value  string `json:"value,omitempty"`
	Reason string `json:"reason,omitempty"`
	// held, not_held, ...: the lock concerned
	Name string `json:"name,omitempty"`
}

func toLockInfo(i fence.LockInfo) lockInfo {
	return lockInfo{Name: i.Name, Held: i.Held, Token: i.Token, LastToken: i.LastToken, ExpiresInMs: i.ExpiresIn.Milliseconds()}
}

// EscapeName returns name escaped as one URL path segment: url.PathEscape, with '.'
// escaped as well, so that the names "." and ".." are not dot segments (the server
// refuses those, see the package doc). The server unescapes it back to name exactly.
func EscapeName(name string) string {
	return strings.ReplaceAll(url.PathEscape(name), ".", "%2E")
}
