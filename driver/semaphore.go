package driver

import (
	"cmp"
	"slices"
	"time"

	"github.com/fencelock/fence"
)

// Semaphores and shared locks, for a backend's TryFunc.
//
// A name has live leases of one kind at a time: one exclusive lease (a lock), up
// to Limit semaphore leases each with its own slot, or up to fence.MaxLimit
// shared leases. Every grant of every kind takes the next token of the name's one
// counter. A backend that decides grants in Go keeps its live leases as Holdings
// and calls Decide; one that decides in the store (a Lua script, SQL) follows the
// same rules, which the fencetest suites check:
//
//   - A semaphore acquire with another limit than the live leases' (an exclusive
//     or shared lease counts as limit 1) fails with a *fence.LimitError.
//   - A semaphore grant takes the lowest slot in [0, Limit) that no live lease
//     has; with Limit leases live the name is held until the first expires.
//   - An exclusive acquire is held while any lease is live. If shared leases hold
//     it and the acquire waits, the backend records that an exclusive acquire is
//     waiting, until the try's time plus the smaller of Request.TTL and
//     Request.WaitLeft (each try extends it; Decision.MarkWaiter says when), and
//     clears the record when it grants an exclusive lease. The waiter tries again
//     before its record lapses (Decision.Retry). A waiter that gives up so holds
//     off shared acquires for at most its TTL.
//   - A shared acquire is held while an exclusive lease is live, while an
//     exclusive acquire is recorded waiting (writer preference), and while
//     fence.MaxLimit shared leases are live.

// Holding is one lease on a name as a backend that decides grants in Go keeps it.
type Holding struct {
	ID    string      // lease id
	Token fence.Token // its fencing token
	Owner string      // fence.WithOwner, "" if none
	// RequestID is the request id it was granted under (fence.WithRequestID),
	// "" if none.
	RequestID string
	Slot      int       // the semaphore slot; 0 for a lock or shared lease
	Limit     int       // the semaphore limit; 0 for a lock or shared lease
	Shared    bool      // a shared lease
	Expires   time.Time // its expiry by the backend's clock
}

// Decision is what Decide concluded for one try.
type Decision struct {
	// Grant says the try may be granted, with Slot (for a semaphore).
	Grant bool
	Slot  int
	// ExpiresIn, when the name is held, is how long until a live lease whose end
	// could free the name for this acquire expires (for an exclusive acquire held
	// by shared leases, the last of them), or until the exclusive waiter's record
	// holding off a shared acquire ends: the Result's ExpiresIn.
	ExpiresIn time.Duration
	// MarkWaiter says the try is an exclusive acquire that waits for shared
	// holders: record the waiter until now plus WaiterFor(r).
	MarkWaiter bool
	// Retry, with MarkWaiter, is how soon the waiter must try again to renew its
	// record before it lapses (half its life, or ExpiresIn if sooner): the
	// Result's Retry. A waiter whose TTL is shorter than the shared holders'
	// time left so stays preferred for as long as it waits.
	Retry time.Duration
}

// WaiterFor is how long after a try an exclusive waiter's record holds off
// shared acquires: the smaller of the request's TTL and the wait left (for a
// try at the very end of a wait, nothing).
func WaiterFor(r *Request) time.Duration {
	if r.Waiting {
		return max(min(r.TTL, r.WaitLeft), 0)
	}
	return r.TTL
}

// Decide applies the rules above to a try: live is the name's leases (expired
// ones, with Expires not after now, are skipped), and waiterUntil is the end of
// the recorded exclusive waiter (zero if none). It returns a *fence.LimitError if
// the try's limit disagrees with the live leases'.
func Decide(r *Request, live []Holding, now, waiterUntil time.Time) (Decision, error) {
	var (
		n                 int
		heldLimit         = 0
		exclusive, shared bool
		soonest, latest   time.Time
		used              []bool
	)
	limit := r.Options.Limit
	if limit > 0 {
		used = make([]bool, limit)
	}
	for _, h := range live {
		if !now.Before(h.Expires) {
			continue
		}
		n++
		heldLimit = max(h.Limit, 1)
		if h.Shared {
			shared = true
		} else if h.Limit == 0 {
			exclusive = true
		}
		if soonest.IsZero() || h.Expires.Before(soonest) {
			soonest = h.Expires
		}
		if h.Expires.After(latest) {
			latest = h.Expires
		}
		if h.Limit > 0 && h.Slot >= 0 && h.Slot < len(used) {
			used[h.Slot] = true
		}
	}
	if n > 0 && heldLimit != max(limit, 1) {
		return Decision{}, &fence.LimitError{Name: r.Name, Limit: max(limit, 1), Held: heldLimit}
	}
	switch {
	case limit > 0:
		if n < limit {
			return Decision{Grant: true, Slot: slices.Index(used, false)}, nil
		}
		return Decision{ExpiresIn: soonest.Sub(now)}, nil
	case r.Options.Shared:
		switch {
		case exclusive:
			return Decision{ExpiresIn: soonest.Sub(now)}, nil
		case now.Before(waiterUntil):
			return Decision{ExpiresIn: waiterUntil.Sub(now)}, nil
		case n >= fence.MaxLimit:
			return Decision{ExpiresIn: soonest.Sub(now)}, nil
		}
		return Decision{Grant: true}, nil
	default:
		if n == 0 {
			return Decision{Grant: true}, nil
		}
		d := Decision{ExpiresIn: latest.Sub(now)}
		if shared && r.Waiting {
			d.MarkWaiter, d.Retry = true, min(d.ExpiresIn, WaiterFor(r)/2)
		}
		return d, nil
	}
}

// Info returns the fence.LockInfo of a name from its leases (expired ones, with
// Expires not after now, are skipped) and its counter, as Inspect reports it:
// an exclusive lease as Token, Owner and ExpiresIn; semaphore and shared leases
// also as Holders, in slot order (semaphore) or token order (shared), with
// Token, Owner and ExpiresIn of the highest token.
func Info(name string, live []Holding, lastToken fence.Token, now time.Time) fence.LockInfo {
	info := fence.LockInfo{Name: name, LastToken: lastToken}
	var hs []fence.Holder
	for _, h := range live {
		if !now.Before(h.Expires) {
			continue
		}
		if !info.Held || h.Token > info.Token {
			info.Held, info.Token, info.Owner, info.ExpiresIn = true, h.Token, h.Owner, h.Expires.Sub(now)
		}
		if h.Limit > 0 || h.Shared {
			info.Limit, info.Shared = h.Limit, h.Shared
			hs = append(hs, fence.Holder{Slot: h.Slot, Token: h.Token, Owner: h.Owner, ExpiresIn: h.Expires.Sub(now)})
		}
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int {
		if a.Slot != b.Slot {
			return a.Slot - b.Slot
		}
		return cmp.Compare(a.Token, b.Token)
	})
	info.Holders = hs
	info.LastToken = max(info.LastToken, info.Token)
	return info
}
