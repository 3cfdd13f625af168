package inmem

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// MaxValueLen is the largest value Guard.Put stores, in bytes (1 MiB).
const MaxValueLen = 1 << 20

// Guard is the in-process reference fence.Guard and fence.KV. For each resource
// (key) it keeps the highest fence it accepted and, for Put, the value, and it
// decides with fence.Admit. The check and the update happen under the resource's
// lock, so a rejected write changes nothing and accepted writes are ordered by
// their fences.
//
// Do fences an arbitrary in-process write, for a Go service that is itself the
// resource. Resources are independent: each has its own lock and highest fence.
type Guard struct {
	mu  sync.Mutex
	res map[string]*record
}

var (
	_ fence.Guard  = (*Guard)(nil)
	_ fence.KV     = (*Guard)(nil)
	_ fence.Purger = (*Guard)(nil)
)

type record struct {
	mu      sync.Mutex  // held across check and write
	highest fence.Fence // zero Token: never fenced
	value   []byte
	written bool // a Put stored value
	// attempts are the attempt ids of the puts and deletes applied under highest
	// (see fence.RememberAttempt).
	attempts []string
}

// NewGuard returns an empty Guard.
func NewGuard() *Guard {
	return &Guard{res: make(map[string]*record)}
}

// recordFor returns key's record, creating it.
func (g *Guard) recordFor(key string) *record {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.res[key]
	if r == nil {
		r = &record{}
		g.res[key] = r
	}
	return r
}

// Fence advances resource's fence to f without writing data, fencing off holders
// of lower tokens before the new holder's first write. It returns nil if f was
// admitted (see fence.Admit), a *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if not, in which case nothing changed,
// and fence.ErrInvalid for a bad resource or fence.
func (g *Guard) Fence(ctx context.Context, resource string, f fence.Fence) error {
	return g.do(ctx, "fence", resource, f, "", nil)
}

// Do runs write under resource's lock if f is admitted, and records f as
// resource's fence only if write returns nil. So writes made through Do for one
// resource never overlap, and a write carrying a stale fence never runs.
//
// write must not call back into the Guard for the same resource (it would
// deadlock). If write panics, the panic propagates and f is not recorded.
//
// It returns write's error (wrapped) if write failed, a *fence.StaleTokenError
// (fence.ErrStaleToken) or *fence.NamespaceError (fence.ErrNamespace) if f was
// refused, fence.ErrInvalid for a bad resource or fence or a nil write, and ctx's
// error if ctx is done before the check.
func (g *Guard) Do(ctx context.Context, resource string, f fence.Fence, write func() error) error {
	if write == nil {
		return fmt.Errorf("inmem: do %q: nil write function: %w", resource, fence.ErrInvalid)
	}
	return g.do(ctx, "do", resource, f, "", func(*record) error { return write() })
}

// Put stores a copy of value under key if f is admitted, and records f as key's
// fence, in one step. It returns a *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if f is refused, in which case nothing
// changed, and fence.ErrInvalid for a bad key or fence or a value longer than
// MaxValueLen. A Put whose context names its write by an attempt id
// (fence.WithWriteAttempt) claims the id for key; a later attempt with the same
// id and f, while f is still key's fence, returns nil and changes nothing (P3).
func (g *Guard) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("inmem: put %q: value is %d bytes, more than %d: %w", key, len(value), MaxValueLen, fence.ErrInvalid)
	}
	v := append([]byte{}, value...) // never alias the caller's buffer
	attempt, err := fence.AttemptKey(ctx, "put", v)
	if err != nil {
		return fmt.Errorf("inmem: put %q: %w", key, err)
	}
	return g.do(ctx, "put", key, f, attempt, func(r *record) error {
		r.value, r.written = v, true
		return nil
	})
}

// Delete removes the value stored under key if f is admitted, and records f as
// key's fence, in one step: the fence stays, so a stale writer is still refused.
// It returns fence.ErrNotFound if key holds no value (never written, only fenced,
// or already deleted), a *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if f is refused, and
// fence.ErrInvalid for a bad key or fence; in each of those cases nothing changed.
// An attempt id claims and replays as in Put.
func (g *Guard) Delete(ctx context.Context, key string, f fence.Fence) error {
	attempt, err := fence.AttemptKey(ctx, "delete", nil)
	if err != nil {
		return fmt.Errorf("inmem: delete %q: %w", key, err)
	}
	return g.do(ctx, "delete", key, f, attempt, func(r *record) error {
		if !r.written {
			return errNoValue
		}
		r.value, r.written = nil, false
		return nil
	})
}

// errNoValue is what Delete's apply returns for a key holding no value.
var errNoValue = fmt.Errorf("key holds no value: %w", fence.ErrNotFound)

// Purge removes key's value and its fence, so the next write under any lock and
// token is admitted: the one way a key's fence goes back, for a key fenced by the
// wrong lock. It returns fence.ErrNotFound if key has neither a value nor a
// fence, and fence.ErrInvalid for a bad key.
func (g *Guard) Purge(ctx context.Context, key string) error {
	if err := precheck(ctx, "purge", key, fence.ValidateKey(key)); err != nil {
		return err
	}
	g.mu.Lock()
	r := g.res[key]
	g.mu.Unlock()
	if r == nil {
		return fmt.Errorf("inmem: purge %q: %w", key, fence.ErrNotFound)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.highest.Token == 0 && !r.written {
		return fmt.Errorf("inmem: purge %q: %w", key, fence.ErrNotFound)
	}
	r.highest, r.value, r.written, r.attempts = fence.Fence{}, nil, false, nil
	return nil
}

// Get returns a copy of the value stored under key and the key's current fence:
// the highest accepted, which is the value's writer unless a later Fence, Do or
// Delete advanced it without a Put. A key that was only fenced (Fence or Do) or
// whose value was deleted has a nil value. It returns
// fence.ErrNotFound if key was never fenced nor written, and fence.ErrInvalid for a
// bad key.
func (g *Guard) Get(ctx context.Context, key string) (fence.Item, error) {
	if err := precheck(ctx, "get", key, fence.ValidateKey(key)); err != nil {
		return fence.Item{}, err
	}
	g.mu.Lock()
	r := g.res[key]
	g.mu.Unlock()
	if r == nil {
		return fence.Item{}, fmt.Errorf("inmem: get %q: %w", key, fence.ErrNotFound)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.highest.Token == 0 {
		return fence.Item{}, fmt.Errorf("inmem: get %q: %w", key, fence.ErrNotFound)
	}
	it := fence.Item{Fence: r.highest}
	if r.written {
		it.Value = append([]byte{}, r.value...)
	}
	return it, nil
}

// Highest returns the highest fence resource has accepted, and false if it has
// accepted none. It returns fence.ErrInvalid for a bad resource.
func (g *Guard) Highest(resource string) (fence.Fence, bool, error) {
	if err := fence.ValidateKey(resource); err != nil {
		return fence.Fence{}, false, fmt.Errorf("inmem: highest: %w", err)
	}
	g.mu.Lock()
	r := g.res[resource]
	g.mu.Unlock()
	if r == nil {
		return fence.Fence{}, false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest, r.highest.Token != 0, nil
}

// do checks f against key's highest fence and, if admitted, runs apply (if any)
// and records f, all under the resource's lock. A put or delete whose attempt
// (fence.AttemptKey; "" for none) the key remembers under f is the write already
// applied: do returns nil and changes nothing (P3).
func (g *Guard) do(ctx context.Context, op, key string, f fence.Fence, attempt string, apply func(*record) error) error {
	if err := precheck(ctx, op, key, driver.ValidateFence(key, f)); err != nil {
		return err
	}
	r := g.recordFor(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence.Replayed(r.highest, r.attempts, f, attempt) {
		return nil // this write's earlier attempt was applied (P3)
	}
	if err := fence.Admit(key, r.highest, f); err != nil {
		return fmt.Errorf("inmem: %s %q: %w", op, key, err)
	}
	if apply != nil {
		if err := apply(r); err == errNoValue {
			return fmt.Errorf("inmem: %s %q: %w", op, key, err)
		} else if err != nil {
			return fmt.Errorf("inmem: %s %q: write failed, fence not recorded: %w", op, key, err)
		}
	}
	r.attempts = fence.RememberAttempt(r.highest, r.attempts, f, attempt)
	r.highest = f
	return nil
}
