package driver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// tiny is a whole backend in a few lines: one map of locks, one counter per name.
// Its Acquire is one Engine call; all it writes is the one try.
type tiny struct {
	engine driver.Engine
	mu     sync.Mutex
	locks  map[string]*tinyLock
}

type tinyLock struct {
	counter fence.Token
	lease   string        // the holder's lease id, "" if free
	freed   chan struct{} // closed by the holder's Release: wakes the waiters
}

func newTiny() *tiny {
	t := &tiny{locks: map[string]*tinyLock{}}
	t.engine = driver.Engine{Backend: "tiny", Locker: t}
	return t
}

func (t *tiny) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	return t.engine.Acquire(ctx, name, ttl, opts, t.try)
}

// try grants the lock under r.ID if it is free, or says how to wait for it. (A real
// backend also expires the holder after r.TTL and reports the time left.)
func (t *tiny) try(_ context.Context, r *driver.Request) (driver.Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[r.Name]
	if l == nil {
		l = &tinyLock{freed: make(chan struct{})}
		t.locks[r.Name] = l
	}
	if l.lease != "" {
		return driver.Result{Wake: l.freed}, nil
	}
	l.counter++
	l.lease = r.ID
	return driver.Result{Token: l.counter}, nil
}

func (t *tiny) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	return errors.New("tiny: renew is not implemented")
}

func (t *tiny) Release(_ context.Context, name, leaseID string) error {
	if err := driver.ValidateLease(name, leaseID); err != nil {
		return fmt.Errorf("tiny: release: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[name]
	if l == nil || l.lease != leaseID {
		return fmt.Errorf("tiny: release %q: %w", name, fence.ErrNotHeld)
	}
	l.lease = ""
	close(l.freed)
	l.freed = make(chan struct{})
	return nil
}

// A backend writes one try; the Engine validates, waits, wakes, words the errors
// and makes the lease.
func ExampleEngine() {
	ctx := context.Background()
	var locker fence.Locker = newTiny()

	a, _ := locker.Acquire(ctx, "payments", time.Minute)
	fmt.Println("A holds token", a.Token())

	_, err := locker.Acquire(ctx, "payments", time.Minute)
	fmt.Println(err)

	time.AfterFunc(10*time.Millisecond, func() { a.Release(ctx) })
	b, err := locker.Acquire(ctx, "payments", time.Minute, fence.WithWait(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Release(ctx)
	fmt.Println("B, woken by A's release, holds token", b.Token())

	_, err = locker.Acquire(ctx, "payments", 0)
	fmt.Println(err)
	// Output:
	// A holds token 1
	// tiny: lock "payments" not acquired: held
	// B, woken by A's release, holds token 2
	// tiny: acquire "payments": fence: invalid ttl "0s": must be between 1ms and 24h0m0s
}
