package fencetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// watchPromptly bounds how soon a watcher must see a change. It is well under
// driver.DefaultWatchPoll, so that a backend whose changes are only found by the
// fallback poll fails: a watch must be woken by the store.
const watchPromptly = 2 * time.Second

// watched is one state or error a watch yielded, as the test's reader saw it.
type watched struct {
	info fence.LockInfo
	err  error
}

// startWatch runs w.Watch(name) in a goroutine until cleanup and returns what it
// yields. If gate is not nil, the reader blocks after the first state until gate
// closes, as a receiver that falls behind does. done closes when the sequence has
// ended.
func startWatch(t *testing.T, w fence.Watcher, name string, gate <-chan struct{}) (states <-chan watched, done <-chan struct{}, stop context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	out := make(chan watched, 1024)
	fin := make(chan struct{})
	go func() {
		defer close(fin)
		first := true
		for info, err := range w.Watch(ctx, name) {
			if !first && gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return
				}
			}
			first = false
			select {
			case out <- watched{info, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-fin:
		case <-time.After(promptly):
			t.Errorf("Watch(%q) still running %v after its context was cancelled", name, promptly)
		}
	})
	return out, fin, cancel
}

// watchReader checks a watch's states as they come: each has another (here,
// in a healthy store, a greater) Index than the one before.
type watchReader struct {
	t      *testing.T
	name   string
	states <-chan watched
	last   fence.LockInfo
	seen   int
}

// next returns the next state, failing the test after within or on an error.
func (r *watchReader) next(within time.Duration, waitingFor string) fence.LockInfo {
	r.t.Helper()
	select {
	case s := <-r.states:
		if s.err != nil {
			r.t.Fatalf("Watch(%q) yielded %v while waiting for %s", r.name, s.err, waitingFor)
		}
		if s.info.Name != r.name {
			r.t.Fatalf("Watch(%q) yielded a state named %q", r.name, s.info.Name)
		}
		if r.seen > 0 && s.info.Index() <= r.last.Index() {
			r.t.Fatalf("Watch(%q) yielded %+v (index %d) after %+v (index %d); want each index greater than the last",
				r.name, s.info, s.info.Index(), r.last, r.last.Index())
		}
		r.last = s.info
		r.seen++
		return s.info
	case <-time.After(within):
		r.t.Fatalf("Watch(%q): nothing yielded within %v while waiting for %s (last state %+v)", r.name, within, waitingFor, r.last)
		return fence.LockInfo{}
	}
}

// until reads states until one satisfies ok, within the bound; states in between
// (a backend's bookkeeping may move the index) must still be in order.
func (r *watchReader) until(within time.Duration, waitingFor string, ok func(fence.LockInfo) bool) fence.LockInfo {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			r.t.Fatalf("Watch(%q): no state with %s within %v (last state %+v)", r.name, waitingFor, within, r.last)
		}
		if info := r.next(left, waitingFor); ok(info) {
			return info
		}
	}
}

// watcherChanges checks that a Watcher yields the current state first, then the
// state after every acquire, release, expiry, revoke and heal, each soon after it
// happens and with a greater index than the one before.
func (s *lockerSuite) watcherChanges(t *testing.T, l fence.Locker) {
	w := probe[fence.Watcher](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	states, _, _ := startWatch(t, w, name, nil)
	r := &watchReader{t: t, name: name, states: states}

	first := r.next(watchPromptly, "the first state")
	if first.Held || first.LastToken != 0 || first.Index() != 1 {
		t.Fatalf("first state of a lock never acquired = %+v (index %d); want not held, LastToken 0, index 1", first, first.Index())
	}

	a := acquire(t, l, name, longTTL, fence.WithOwner("watch-a"))
	r.until(watchPromptly, "the acquire", func(i fence.LockInfo) bool {
		return i.Held && i.Token == a.Token() && i.Owner == "watch-a"
	})
	if err := a.Renew(ctx, longTTL); err != nil {
		t.Fatalf("Renew = %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	released := r.until(watchPromptly, "the release", func(i fence.LockInfo) bool { return !i.Held })
	if released.LastToken < a.Token() {
		t.Fatalf("state after release = %+v; want LastToken >= %d", released, a.Token())
	}

	b := acquire(t, l, name, s.cfg.shortTTL)
	r.until(watchPromptly, "the second acquire", func(i fence.LockInfo) bool { return i.Held && i.Token == b.Token() })
	r.until(s.cfg.shortTTL+watchPromptly, "the expiry (no message says it)", func(i fence.LockInfo) bool { return !i.Held })

	if rv, ok := l.(fence.Revoker); ok {
		c := acquire(t, l, name, longTTL)
		r.until(watchPromptly, "the third acquire", func(i fence.LockInfo) bool { return i.Held && i.Token == c.Token() })
		if err := rv.Revoke(ctx, name); err != nil {
			t.Fatalf("Revoke = %v", err)
		}
		r.until(watchPromptly, "the revoke", func(i fence.LockInfo) bool { return !i.Held })
	}
	if h, ok := l.(fence.Healer); ok {
		seen := r.last.LastToken + 1000
		if err := h.Heal(ctx, name, seen); err != nil {
			t.Fatalf("Heal = %v", err)
		}
		r.until(watchPromptly, "the heal", func(i fence.LockInfo) bool { return !i.Held && i.LastToken >= seen })
	}

	// A handoff to a waiter: the lock may never be seen free, but the new holder
	// must be seen.
	d := acquire(t, l, name, longTTL)
	r.until(watchPromptly, "the acquire before the handoff", func(i fence.LockInfo) bool { return i.Held && i.Token == d.Token() })
	ch := goAcquire(ctx, l, name, longTTL, fence.WithWait(longWait))
	s.settle(t, ch, "waiting on a held lock")
	if err := d.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	var next *fence.Lease
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("waiter after Release = %v; want the lock", res.err)
		}
		next = res.lease
		releaseAtCleanup(t, next)
	case <-time.After(promptly):
		t.Fatalf("waiter not woken %v after Release", promptly)
	}
	r.until(watchPromptly, "the waiter's grant", func(i fence.LockInfo) bool { return i.Held && i.Token == next.Token() })
}

// watcherFallsBehind checks that a receiver that stops reading while the lock
// changes many times then gets the latest state, and nothing older after it.
func (s *lockerSuite) watcherFallsBehind(t *testing.T, l fence.Locker) {
	w := probe[fence.Watcher](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	gate := make(chan struct{})
	states, _, _ := startWatch(t, w, name, gate)
	r := &watchReader{t: t, name: name, states: states}
	r.next(watchPromptly, "the first state")

	var last *fence.Lease
	for i := 0; i < 5; i++ {
		lease := acquire(t, l, name, longTTL)
		if i < 4 {
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release = %v", err)
			}
		}
		last = lease
	}
	close(gate)
	r.until(watchPromptly, "the latest state", func(i fence.LockInfo) bool { return i.Held && i.Token == last.Token() })
	// Nothing older may come after it: any state still yielded is in order (next
	// checks the index) and is the latest again.
	select {
	case st := <-states:
		if st.err != nil || !st.info.Held || st.info.Token != last.Token() || st.info.Index() <= r.last.Index() {
			t.Fatalf("after the latest state %+v the watch yielded %+v, %v; want nothing older", r.last, st.info, st.err)
		}
	case <-time.After(200 * time.Millisecond):
	}
}

// watcherEnds checks that a bad name is an error matching ErrInvalid that ends
// the watch, and that cancelling the context ends it promptly.
func (s *lockerSuite) watcherEnds(t *testing.T, l fence.Locker) {
	w := probe[fence.Watcher](t, l)
	ctx := testContext(t)
	n := 0
	for _, err := range w.Watch(ctx, "") {
		n++
		wantInvalid(t, "Watch of an empty name", err, "name")
	}
	if n != 1 {
		t.Fatalf("Watch of an empty name yielded %d times; want one error, then the end", n)
	}

	name := uniqueName(t, "")
	states, done, stop := startWatch(t, w, name, nil)
	r := &watchReader{t: t, name: name, states: states}
	r.next(watchPromptly, "the first state")
	stopped := time.Now()
	stop()
	select {
	case <-done:
	case <-time.After(promptly):
		t.Fatalf("Watch still running %v after its context was cancelled", time.Since(stopped).Round(time.Millisecond))
	}
	for _, st := range drain(states) {
		if st.err != nil && !errors.Is(st.err, context.Canceled) {
			t.Fatalf("Watch yielded %v as its context was cancelled; want it to end quietly", st.err)
		}
	}
}

// drain returns what is buffered in c without waiting.
func drain(c <-chan watched) []watched {
	var out []watched
	for {
		select {
		case s := <-c:
			out = append(out, s)
		default:
			return out
		}
	}
}
