// Package watchtest follows a fence.Watcher for the tests and benchmarks of its
// implementations: the states a watch yields, each stamped with when it arrived,
// and its errors, read from a goroutine of its own.
package watchtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// Seen is one state a watch yielded and when the Follower received it.
type Seen struct {
	Info fence.LockInfo
	At   time.Time
}

// Follower reads one watch in a goroutine of its own until the watch ends or
// its context is done.
type Follower struct {
	states chan Seen
	errs   chan error
	done   chan struct{}
}

// errsKept is how many errors a Follower keeps for Errs; later ones are dropped.
const errsKept = 64

// Follow starts reading w.Watch(ctx, name) and returns the Follower. A state
// waits for Until to take it (the watch falls behind meanwhile, as a slow
// receiver does); the first errors are kept for Errs.
func Follow(ctx context.Context, w fence.Watcher, name string) *Follower {
	f := &Follower{states: make(chan Seen), errs: make(chan error, errsKept), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for info, err := range w.Watch(ctx, name) {
			if err != nil {
				select {
				case f.errs <- err:
				default:
				}
				continue
			}
			select {
			case f.states <- Seen{info, time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return f
}

// Until returns the next state that satisfies ok, skipping the others. It
// returns an error naming what (what the state was to show) if none came within
// the bound.
func (f *Follower) Until(within time.Duration, what string, ok func(fence.LockInfo) bool) (Seen, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		select {
		case s := <-f.states:
			if ok(s.Info) {
				return s, nil
			}
		case <-t.C:
			return Seen{}, fmt.Errorf("the watch yielded no state with %s within %v", what, within)
		}
	}
}

// MustUntil is Until that stops tb's test or benchmark (Fatal) instead of
// returning the error. Call it from the goroutine running tb only.
func (f *Follower) MustUntil(tb testing.TB, within time.Duration, what string, ok func(fence.LockInfo) bool) Seen {
	tb.Helper()
	s, err := f.Until(within, what, ok)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Any is an Until condition that every state satisfies.
func Any(fence.LockInfo) bool { return true }

// Held returns an Until condition: the lock is held (held true) or free.
func Held(held bool) func(fence.LockInfo) bool {
	return func(i fence.LockInfo) bool { return i.Held == held }
}

// Errs returns the first errors the watch yielded.
func (f *Follower) Errs() <-chan error { return f.errs }

// Done is closed once the watch has ended and the Follower's goroutine with it.
func (f *Follower) Done() <-chan struct{} { return f.done }
