package fence

import "context"

// Guard makes a resource enforce fencing tokens. For each resource it stores the
// highest fence it accepted, with the resource itself and in the same transaction
// as the write it guards (P2), and it accepts a fence only as Admit allows: a greater
// token, or the same token under the same lease.
//
// Every implementation passes fencetest.TestGuard. Implementations also offer a way
// to fence a write (a conditional statement, a transaction hook, a callback) whose
// shape depends on the store; Fence is the part they all share.
type Guard interface {
	// Fence advances resource's fence to f without writing data, so a new holder can
	// fence off a paused predecessor before its first write.
	//
	// It returns nil if f was accepted (or was already the highest, under the same
	// lease), a *StaleTokenError matching ErrStaleToken if a higher token, or the
	// same token under another lease, was accepted before, a *NamespaceError
	// matching ErrNamespace if resource is fenced by another lock name, and
	// ErrInvalid for a malformed resource or fence.
	Fence(ctx context.Context, resource string, f Fence) error
}

// KV is a fenced key-value store: every Put carries a fence, and a Put is applied
// only if its fence is admitted for that key (see Admit); the check, the new fence
// and the value are stored in one step. The server's store (PUT /v1/kv/{key}) is a KV.
type KV interface {
	// Put stores value under key if f is admitted, and records f as the key's fence.
	// It returns a *StaleTokenError (ErrStaleToken) or *NamespaceError
	// (ErrNamespace) if f is refused, in which case nothing changed, and ErrInvalid
	// for a bad key, fence, or a value larger than the store's documented limit.
	//
	// A store that also grants the locks whose fences it checks (P9) refuses, in
	// Put, Delete and Guard.Fence alike and with nothing changed, a fence it never
	// issued: a token above the last one it issued for f.Name, a name it never
	// granted, or a non-empty f.LeaseID it can prove is not the lease issued that
	// token. The error is an *UnissuedTokenError (ErrUnissuedToken). Such a store
	// also refuses an f without a lease id whose token a live lease holds: stored
	// without a lease, it would refuse that lease's own writes. The error is a
	// *LeaseRequiredError (ErrLeaseRequired).
	Put(ctx context.Context, key string, value []byte, f Fence) error

	// Get returns the value stored under key and the fence that wrote it. It returns
	// ErrNotFound if key was never written; a key that was only fenced (Guard.Fence)
	// or whose value was deleted (Delete) has a nil value and its fence, and
	// ErrNotFound is not returned.
	Get(ctx context.Context, key string) (Item, error)

	// Delete removes the value stored under key if f is admitted, as Put would
	// admit it, and records f as the key's fence: the fence stays, so a stale
	// writer is still refused after the value is gone. It returns ErrNotFound if
	// key holds no value (never written, only fenced, or already deleted), a
	// *StaleTokenError (ErrStaleToken) or *NamespaceError (ErrNamespace) if f is
	// refused, and ErrInvalid for a bad key or fence; in each of those cases
	// nothing changed.
	Delete(ctx context.Context, key string, f Fence) error
}

// Item is a value in a KV with the fence of the write that stored it.
type Item struct {
	Value []byte
	Fence Fence
}

// Purger is implemented by KV stores whose keys an administrator can purge: Purge
// removes key's value and its fence, so the next write under any lock and token
// is admitted. It is the one way a key's fence goes back, meant for a key fenced
// by the wrong lock (squatted); a stale writer is no longer refused for that key
// until the next write fences it again. It returns ErrNotFound if key has neither
// a value nor a fence, and ErrInvalid for a bad key.
type Purger interface {
	Purge(ctx context.Context, key string) error
}
