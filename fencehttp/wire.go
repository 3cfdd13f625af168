package fencehttp

import (
	"net/url"
	"strings"
	"time"

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
	// HeaderIndex carries a lock's change index (fence.LockInfo.Index), in
	// decimal, on every answer of GET /v1/locks/{name}: the index a blocking
	// query sends back to wait for the next change.
	HeaderIndex = "Fence-Index"
	// HeaderAttempt names one fenced write (PUT or DELETE /v1/kv/{key}) across
	// its attempts (fence.WithWriteAttempt): the same id on each retry, so that
	// the attempt that lands first claims it and a late one writes nothing.
	// Optional; a write without it gets no protection against its own late
	// attempt.
	HeaderAttempt = "Fence-Attempt"
)

// acquireRequest is the body of POST /v1/locks/{name}/acquire.
type acquireRequest struct {
	TTLms  *int64 `json:"ttl_ms"`
	WaitMs int64  `json:"wait_ms"`
	Owner  string `json:"owner,omitempty"` // fence.WithOwner; omitted when "", so older servers take the request
	// Limit makes the name a semaphore of Limit permits (fence.WithLimit); absent
	// or 1 is a lock. The Client omits it for a lock, so older servers take the
	// request.
	Limit *int `json:"limit,omitempty"`
	// Shared asks for a shared lease (fence.WithShared); omitted when false.
	Shared bool `json:"shared,omitempty"`
	// RequestID names the acquire across its retries (fence.WithRequestID);
	// omitted when "", so older servers take the request.
	RequestID string `json:"request_id,omitempty"`
}

// renewRequest is the body of POST /v1/locks/{name}/renew.
type renewRequest struct {
	Lease string `json:"lease"`
	TTLms *int64 `json:"ttl_ms"`
}

// releaseRequest is the body of POST /v1/locks/{name}/release.
type releaseRequest struct {
	Lease string `json:"lease,omitempty"`
	// RequestID, instead of Lease, abandons the grant of an acquire whose client
	// gave up without learning its lease id (see abandon.go). TTLms, Limit and
	// Shared are that acquire's, to find its grant by; they go only with it.
	RequestID string `json:"request_id,omitempty"`
	TTLms     *int64 `json:"ttl_ms,omitempty"`
	Limit     *int   `json:"limit,omitempty"`
	Shared    bool   `json:"shared,omitempty"`
}

// revokeRequest is the body of POST /v1/locks/{name}/revoke: {} (or none). It
// has no fields; an unknown one is refused, as on every route.
type revokeRequest struct{}

// healRequest is the body of POST /v1/locks/{name}/heal, and of its 200 answer.
type healRequest struct {
	Seen fence.Token `json:"seen"`
}

// Lease is a lease as the API shows it, {"name","token","lease","ttl_ms"[,"slot"]}:
// the body of a 200 answer to acquire (which adds waited_ms), and what `fence
// acquire -o json` prints. ID is the lease id, a credential. Slot is set for a
// semaphore permit only (fence.Lease.Slot; 0 is a slot), and absent for a lock or
// a shared lease.
type Lease struct {
	Name  string      `json:"name"`
	Token fence.Token `json:"token"`
	ID    string      `json:"lease"`
	TTLms int64       `json:"ttl_ms"`
	Slot  *int        `json:"slot,omitempty"`
}

// LeaseOf returns l as the API shows a lock or shared lease, with the TTL of its
// last grant or renewal, and no slot.
func LeaseOf(l *fence.Lease) Lease {
	return Lease{Name: l.Name(), Token: l.Token(), ID: l.ID(), TTLms: l.TTL().Milliseconds()}
}

// PermitOf returns l, a semaphore permit (fence.WithLimit), as the API shows it:
// LeaseOf with its slot.
func PermitOf(l *fence.Lease) Lease {
	p := LeaseOf(l)
	slot := l.Slot()
	p.Slot = &slot
	return p
}

// leaseResponse is the body of a 200 answer to acquire.
type leaseResponse struct {
	Lease
	// WaitedMs is the time from when the server got the request to when it sent the
	// store the request that granted the lease (rounded down): when the store's TTL
	// started, not when the store answered, which may be later by the grant's
	// commit. A client adds it to the time it sent the request to date the grant, so
	// that its deadline is never later than the store's expiry and a lease granted at
	// the end of a long poll does not look as if it had started when the poll began.
	WaitedMs int64 `json:"waited_ms"`
}

// Renewed is the body of a 200 answer to renew, {"name","ttl_ms"}, and what
// `fence renew -o json` prints.
type Renewed struct {
	Name  string `json:"name"`
	TTLms int64  `json:"ttl_ms"`
}

// Released is the body of a 200 answer to release, {"name","released":true}, and
// what `fence release -o json` prints.
type Released struct {
	Name     string `json:"name"`
	Released bool   `json:"released"`
}

// Revoked is the body of a 200 answer to revoke, {"name","revoked":true}, and
// what `fence revoke -o json` prints.
type Revoked struct {
	Name    string `json:"name"`
	Revoked bool   `json:"revoked"`
}

// LockInfo is fence.LockInfo as the API shows it: the body of a 200 answer to
// GET /v1/locks/{name}, and what `fence status NAME -o json` prints. Token, Owner
// and ExpiresInMs are absent when the lock is not held (Owner also when the holder
// named none), LastToken when none was granted. A semaphore's live permits add
// Limit and Holders, a shared lock's live shared leases Shared and Holders; Token,
// Owner and ExpiresInMs then describe the holder with the highest token, as in
// fence.LockInfo. The lease id is never in it.
type LockInfo struct {
	Name        string      `json:"name"`
	Held        bool        `json:"held"`
	Token       fence.Token `json:"token,omitempty"`
	Owner       string      `json:"owner,omitempty"`
	LastToken   fence.Token `json:"last_token,omitempty"`
	ExpiresInMs int64       `json:"expires_in_ms,omitempty"`
	Limit       int         `json:"limit,omitempty"`
	Shared      bool        `json:"shared,omitempty"`
	Holders     []Holder    `json:"holders,omitempty"`
}

// Holder is fence.Holder as the API shows it: one live lease of a semaphore
// (its slot) or of a shared lock (slot 0), never its lease id.
type Holder struct {
	Slot        int         `json:"slot"`
	Token       fence.Token `json:"token"`
	Owner       string      `json:"owner,omitempty"`
	ExpiresInMs int64       `json:"expires_in_ms"`
}

// LockInfoOf returns i as the API shows it.
func LockInfoOf(i fence.LockInfo) LockInfo {
	li := LockInfo{Name: i.Name, Held: i.Held, Token: i.Token, Owner: i.Owner, LastToken: i.LastToken,
		ExpiresInMs: i.ExpiresIn.Milliseconds(), Limit: i.Limit, Shared: i.Shared}
	for _, h := range i.Holders {
		li.Holders = append(li.Holders, Holder{Slot: h.Slot, Token: h.Token, Owner: h.Owner, ExpiresInMs: h.ExpiresIn.Milliseconds()})
	}
	return li
}

// toFence returns li as a fence.LockInfo.
func (li LockInfo) toFence() fence.LockInfo {
	i := fence.LockInfo{Name: li.Name, Held: li.Held, Token: li.Token, Owner: li.Owner, LastToken: li.LastToken,
		ExpiresIn: msDuration(li.ExpiresInMs), Limit: li.Limit, Shared: li.Shared}
	for _, h := range li.Holders {
		i.Holders = append(i.Holders, fence.Holder{Slot: h.Slot, Token: h.Token, Owner: h.Owner, ExpiresIn: msDuration(h.ExpiresInMs)})
	}
	return i
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// LockList is the body of a 200 answer to GET /v1/locks, {"locks":[...]}, and what
// `fence status -o json` prints.
type LockList struct {
	Locks []LockInfo `json:"locks"`
}

// LockListOf returns infos as the API shows them; never a nil list ("locks":[]).
func LockListOf(infos []fence.LockInfo) LockList {
	l := LockList{Locks: make([]LockInfo, 0, len(infos))}
	for _, i := range infos {
		l.Locks = append(l.Locks, LockInfoOf(i))
	}
	return l
}

// kvResponse is the body of a 200 answer to PUT /v1/kv/{key} and POST /v1/fences/{key}.
type kvResponse struct {
	Key   string      `json:"key"`
	Lock  string      `json:"lock"`
	Token fence.Token `json:"token"`
}

// purgeResponse answers DELETE /v1/kv/{key}?purge=true.
type purgeResponse struct {
	Key    string `json:"key"`
	Purged bool   `json:"purged"`
}

// errorResponse is the body of every error answer.
type errorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code"`

	// held
	ExpiresInMs int64 `json:"expires_in_ms,omitempty"`
	// stale_token, wrong_lock; lease_required: Key, Lock and Token
	Key       string      `json:"key,omitempty"`
	Highest   fence.Token `json:"highest,omitempty"`
	Token     fence.Token `json:"token,omitempty"`
	SameToken bool        `json:"same_token,omitempty"`
	Lock      string      `json:"lock,omitempty"` // wrong_lock: the lock that fences Key; unissued_token, lease_required: the lock presented
	Got       string      `json:"got,omitempty"`  // wrong_lock: the lock presented
	// unissued_token: whether Token was issued to another lease (Last, below, is
	// the last token issued for Lock)
	OtherLease bool `json:"other_lease,omitempty"`
	// limit_mismatch: the limit asked for and the limit of the live leases;
	// held: the semaphore's limit, all its permits held
	Limit     int `json:"limit,omitempty"`
	HeldLimit int `json:"held_limit,omitempty"`
	// invalid
	Field  string `json:"field,omitempty"`
	Value  string `json:"value,omitempty"`
	Reason string `json:"reason,omitempty"`
	// unissued_token: the last token issued for Lock; invalid, a heal beyond the
	// bound (*fence.HealBoundError): the name's last token, and
	// fence.MaxHealAhead. Sent with 0 too, hence a pointer.
	Last  *fence.Token `json:"last,omitempty"`
	Bound fence.Token  `json:"bound,omitempty"`
	// held, not_held, ...: the lock concerned
	Name string `json:"name,omitempty"`
}

// EscapeName returns name escaped as one URL path segment: url.PathEscape, with '.'
// escaped as well, so that the names "." and ".." are not dot segments (the server
// refuses those, see the package doc). The server unescapes it back to name exactly.
func EscapeName(name string) string {
	return strings.ReplaceAll(url.PathEscape(name), ".", "%2E")
}
