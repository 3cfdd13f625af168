package driver

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/fencelock/fence"
)

// SubscribeFunc starts listening for changes of one lock and returns a channel
// that is ready (sent a value, or closed) whenever the lock may have changed: a
// release message, a watch event, a state change in memory. Spurious wake-ups are
// harmless; a missed one is not, so the subscription must be in place when
// SubscribeFunc returns. It lasts until ctx is done (Watch ends each
// subscription's ctx when the watch ends or the subscription is lost). A channel that closes for
// good says the subscription was lost (a dropped connection): Watch then
// subscribes again. Errors are treated as for InspectFunc.
type SubscribeFunc func(ctx context.Context, name string) (<-chan struct{}, error)

// InspectFunc reads one lock's state, as fence.Inspector.Inspect does. Errors
// matching fence.ErrInvalid or fence.ErrClosed end a watch; any other error is
// yielded to the watcher and the read is tried again, backing off from 50ms to 1s.
type InspectFunc func(ctx context.Context, name string) (fence.LockInfo, error)

// DefaultWatchPoll is how often Watch reads a lock's state when nothing signalled
// a change: the fallback for a change message that was lost.
const DefaultWatchPoll = 5 * time.Second

// Watch is fence.Watcher's Watch for any backend that can subscribe to a lock's
// changes and inspect it; a backend's Watch method is one call of it. It
// validates name, subscribes, then reads and yields the state; it reads again
// each time the subscription signals, when the holder's time left runs out (so an
// expiry is seen without a message), and every Engine.WatchPoll (DefaultWatchPoll
// if zero) in case a message was lost. It yields a state only if its Index differs
// from the last one yielded. It ends when ctx is done, the loop stops, the
// backend is closed (yielding an error matching fence.ErrClosed) or the name is
// bad (an error matching fence.ErrInvalid). Every error it yields reads
// "BACKEND: watch NAME: ERR".
func (e *Engine) Watch(ctx context.Context, name string, subscribe SubscribeFunc, inspect InspectFunc) iter.Seq2[fence.LockInfo, error] {
	return func(yield func(fence.LockInfo, error) bool) {
		if err := fence.ValidateName(name); err != nil {
			yield(fence.LockInfo{}, fmt.Errorf("%s: watch: %w", e.Backend, err))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		clock := e.Clock
		if clock == nil {
			clock = SystemClock
		}
		poll := e.WatchPoll
		if poll <= 0 {
			poll = DefaultWatchPoll
		}
		var (
			changed <-chan struct{} // nil until subscribed
			sent    bool            // whether a state was yielded
			last    uint64          // Index of the last state yielded
			backoff time.Duration   // after a failure
			losses  int             // subscriptions lost in a row, without a signal between
			endSub  = func() {}     // ends the current subscription's context
		)
		defer func() { endSub() }()
		// fail yields err (unless ctx ended, which ends the watch quietly) and
		// reports whether to go on after a backoff.
		fail := func(err error) bool {
			if ctx.Err() != nil {
				return false
			}
			err = fmt.Errorf("%s: watch %q: %w", e.Backend, name, err)
			if errors.Is(err, fence.ErrInvalid) || errors.Is(err, fence.ErrClosed) {
				yield(fence.LockInfo{}, err)
				return false
			}
			if !yield(fence.LockInfo{}, err) {
				return false
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			if err := e.sleep(ctx, clock, backoff, nil, nil); err != nil {
				if errors.Is(err, fence.ErrClosed) {
					yield(fence.LockInfo{}, fmt.Errorf("%s: watch %q: %w", e.Backend, name, err))
				}
				return false
			}
			return true
		}
		for {
			if e.closed() {
				fail(fence.ErrClosed)
				return
			}
			if changed == nil {
				if losses > 1 {
					// A subscription that keeps being lost at once must not
					// spin: the first loss is renewed at once, later ones back
					// off as after a failure.
					d := min(minBackoff<<min(losses-2, 5), maxBackoff)
					if err := e.sleep(ctx, clock, d, nil, nil); err != nil {
						if errors.Is(err, fence.ErrClosed) {
							fail(err)
						}
						return
					}
				}
				// Each subscription has its own context, ended when it is lost,
				// so that a backend tying its cleanup to the context frees it.
				sctx, scancel := context.WithCancel(ctx)
				c, err := subscribe(sctx, name)
				if err != nil {
					scancel()
					if !fail(err) {
						return
					}
					continue
				}
				changed, endSub = c, scancel
			}
			info, err := inspect(ctx, name)
			if err != nil {
				if !fail(err) {
					return
				}
				continue
			}
			backoff = 0
			if idx := info.Index(); !sent || idx != last {
				sent, last = true, idx
				if !yield(info, nil) {
					return
				}
			}
			d := poll
			if info.Held && info.ExpiresIn > 0 && info.ExpiresIn < d {
				// Read again just after the holder's expiry: no message says it.
				// (ExpiresIn 0 means the store reports no expiry: only the poll.)
				d = info.ExpiresIn + time.Millisecond
			}
			t := e.after(clock, d)
			select {
			case _, ok := <-changed:
				if !ok {
					endSub()
					changed = nil // lost: subscribe again
					losses++
				} else {
					losses = 0 // the subscription works
				}
			case <-t.c:
				losses = 0 // it lasted a whole wait
			case <-ctx.Done():
				t.stop()
				return
			case <-e.Closed:
			}
			t.stop()
		}
	}
}

// Watchers is a set of watch subscriptions by lock name, for a backend that
// learns of changes in its own process: in memory (inmem, bolt), or from one
// connection that relays the store's messages (a pub/sub or LISTEN connection).
// Subscribe is a SubscribeFunc; the backend calls Notify after every change of a
// lock. The zero value is ready to use; a Watchers is safe for concurrent use.
type Watchers struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
}

// Subscribe registers a subscription to name until ctx is done and returns its
// channel, which receives a value after each Notify of name (several Notify calls
// before the receiver reads fold into one). It never fails.
func (w *Watchers) Subscribe(ctx context.Context, name string) (<-chan struct{}, error) {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]map[chan struct{}]struct{})
	}
	set := w.m[name]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		w.m[name] = set
	}
	set[c] = struct{}{}
	w.mu.Unlock()
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if set := w.m[name]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(w.m, name)
			}
		}
	})
	return c, nil
}

// Notify signals every subscription to name; it never blocks.
func (w *Watchers) Notify(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.m[name] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// NotifyAll signals every subscription to every name; it never blocks. A backend
// that relays changes from one connection calls it when that connection comes
// back after a loss: the messages sent meanwhile are gone, so everyone must look.
func (w *Watchers) NotifyAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, set := range w.m {
		for c := range set {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// Len returns how many subscriptions are registered, over all names: for
// metrics, and for tests that check a watch leaves nothing behind.
func (w *Watchers) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, set := range w.m {
		n += len(set)
	}
	return n
}

// Active reports whether anyone watches name, for a backend that can skip the
// work of signalling a change nobody waits for.
func (w *Watchers) Active(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m[name]) > 0
}
