package driver_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// scripted is a store for Engine.Watch: its state, the subscriptions it hands out
// and the failures it injects are set by the test.
type scripted struct {
	mu       sync.Mutex
	info     fence.LockInfo
	inspects int
	failNext []error         // errors the next inspects return, in order
	subs     []chan struct{} // every subscription handed out
	subErr   error           // the next subscribe's error, once
}

func (s *scripted) subscribe(context.Context, string) (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.subErr; err != nil {
		s.subErr = nil
		return nil, err
	}
	c := make(chan struct{}, 1)
	s.subs = append(s.subs, c)
	return c, nil
}

func (s *scripted) inspect(_ context.Context, name string) (fence.LockInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inspects++
	if len(s.failNext) > 0 {
		err := s.failNext[0]
		s.failNext = s.failNext[1:]
		return fence.LockInfo{}, err
	}
	info := s.info
	info.Name = name
	return info, nil
}

// set changes the state and signals the latest subscription.
func (s *scripted) set(info fence.LockInfo) {
	s.mu.Lock()
	s.info = info
	c := s.subs[len(s.subs)-1]
	s.mu.Unlock()
	select {
	case c <- struct{}{}:
	default:
	}
}

// collect runs the watch in a goroutine and returns its yields.
func collect(t *testing.T, e *driver.Engine, s *scripted) (<-chan watchYield, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan watchYield, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for info, err := range e.Watch(ctx, "job", s.subscribe, s.inspect) {
			out <- watchYield{info, err}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("watch still running 5s after its context was cancelled")
		}
	})
	return out, cancel
}

type watchYield struct {
	info fence.LockInfo
	err  error
}

func nextYield(t *testing.T, c <-chan watchYield) watchYield {
	t.Helper()
	select {
	case y, ok := <-c:
		if !ok {
			t.Fatal("watch ended; want another yield")
		}
		return y
	case <-time.After(5 * time.Second):
		t.Fatal("nothing yielded within 5s")
	}
	return watchYield{}
}

func quiet(t *testing.T, c <-chan watchYield, d time.Duration) {
	t.Helper()
	select {
	case y, ok := <-c:
		if ok {
			t.Fatalf("watch yielded %+v, %v; want nothing (no change)", y.info, y.err)
		}
	case <-time.After(d):
	}
}

func TestWatch_YieldsOnIndexChangeOnly(t *testing.T) {
	s := &scripted{}
	c, _ := collect(t, engine(), s)
	if y := nextYield(t, c); y.err != nil || y.info.Held || y.info.Index() != 1 || y.info.Name != "job" {
		t.Fatalf("first yield = %+v, %v; want job free, index 1", y.info, y.err)
	}
	s.set(fence.LockInfo{Held: true, Token: 3, LastToken: 3, ExpiresIn: time.Minute})
	if y := nextYield(t, c); !y.info.Held || y.info.Token != 3 {
		t.Fatalf("after the grant = %+v; want held by 3", y.info)
	}
	// A renewal moves only the time left: the same index, nothing yielded.
	s.set(fence.LockInfo{Held: true, Token: 3, LastToken: 3, ExpiresIn: 2 * time.Minute})
	quiet(t, c, 100*time.Millisecond)
	s.set(fence.LockInfo{LastToken: 3})
	if y := nextYield(t, c); y.info.Held || y.info.Index() != 7 {
		t.Fatalf("after the release = %+v (index %d); want free, index 7", y.info, y.info.Index())
	}
}

func TestWatch_ExpiryReadWithoutASignal(t *testing.T) {
	s := &scripted{info: fence.LockInfo{Held: true, Token: 1, LastToken: 1, ExpiresIn: 50 * time.Millisecond}}
	c, _ := collect(t, engine(), s)
	nextYield(t, c)
	// The store now reports the lease expired, but nothing signals it: the watch
	// must read again at the holder's expiry.
	s.mu.Lock()
	s.info = fence.LockInfo{LastToken: 1}
	s.mu.Unlock()
	start := time.Now()
	if y := nextYield(t, c); y.info.Held {
		t.Fatalf("after the expiry = %+v; want free", y.info)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("expiry seen after %v; want soon after the 50ms the holder had left", d)
	}
}

func TestWatch_LostSubscriptionIsRenewed(t *testing.T) {
	s := &scripted{}
	c, _ := collect(t, engine(), s)
	nextYield(t, c)
	s.mu.Lock()
	close(s.subs[0]) // the connection behind it dropped
	s.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.subs)
		s.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions 5s after the first was lost; want a new one", n)
		}
		time.Sleep(time.Millisecond)
	}
	s.set(fence.LockInfo{Held: true, Token: 2, LastToken: 2, ExpiresIn: time.Minute})
	if y := nextYield(t, c); !y.info.Held || y.info.Token != 2 {
		t.Fatalf("after re-subscribing = %+v; want held by 2", y.info)
	}
}

func TestWatch_TransientErrorsYieldedThenRecovered(t *testing.T) {
	s := &scripted{subErr: fence.ErrUnavailable, failNext: []error{fence.ErrUnavailable}}
	c, _ := collect(t, engine(), s)
	for i := 0; i < 2; i++ { // the subscribe's failure, then the inspect's
		y := nextYield(t, c)
		if !errors.Is(y.err, fence.ErrUnavailable) || !strings.HasPrefix(y.err.Error(), `test: watch "job": `) {
			t.Fatalf("yield %d = %+v, %v; want `test: watch \"job\": ...` matching ErrUnavailable", i, y.info, y.err)
		}
	}
	if y := nextYield(t, c); y.err != nil || y.info.Index() != 1 {
		t.Fatalf("after the store came back = %+v, %v; want the state", y.info, y.err)
	}
}

func TestWatch_DefinitiveErrorsEnd(t *testing.T) {
	for _, target := range []error{fence.ErrInvalid, fence.ErrClosed} {
		s := &scripted{failNext: []error{target}}
		c, _ := collect(t, engine(), s)
		if y := nextYield(t, c); !errors.Is(y.err, target) {
			t.Fatalf("yield = %v; want %v", y.err, target)
		}
		if y, ok := <-c; ok {
			t.Fatalf("after %v the watch yielded %+v, %v; want the end", target, y.info, y.err)
		}
	}
	s := &scripted{}
	for _, err := range engine().Watch(context.Background(), "", s.subscribe, s.inspect) {
		if !errors.Is(err, fence.ErrInvalid) || s.inspects != 0 {
			t.Fatalf("watch of an empty name = %v after %d inspects; want ErrInvalid before any", err, s.inspects)
		}
	}
}

func TestWatch_CloseEndsWithErrClosed(t *testing.T) {
	closed := make(chan struct{})
	e := &driver.Engine{Backend: "test", Locker: nopLocker{}, Closed: closed}
	s := &scripted{}
	c, _ := collect(t, e, s)
	nextYield(t, c)
	close(closed)
	if y := nextYield(t, c); !errors.Is(y.err, fence.ErrClosed) {
		t.Fatalf("after Close = %+v, %v; want ErrClosed", y.info, y.err)
	}
	if _, ok := <-c; ok {
		t.Fatal("watch went on after ErrClosed")
	}
}

func TestWatch_PollsWhenNothingSignals(t *testing.T) {
	e := &driver.Engine{Backend: "test", Locker: nopLocker{}, WatchPoll: 20 * time.Millisecond}
	s := &scripted{}
	c, _ := collect(t, e, s)
	nextYield(t, c)
	s.mu.Lock()
	s.info = fence.LockInfo{Held: true, Token: 1, LastToken: 1, ExpiresIn: time.Minute} // a lost message
	s.mu.Unlock()
	if y := nextYield(t, c); !y.info.Held {
		t.Fatalf("after a poll = %+v; want held", y.info)
	}
}

func TestWatch_SubscriptionLostAtOnceDoesNotSpin(t *testing.T) {
	var (
		mu   sync.Mutex
		subs int
	)
	lost := func(context.Context, string) (<-chan struct{}, error) {
		mu.Lock()
		subs++
		mu.Unlock()
		c := make(chan struct{})
		close(c) // lost as soon as it is made
		return c, nil
	}
	s := &scripted{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range engine().Watch(ctx, "job", lost, s.inspect) {
		}
	}()
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// At once, then after 50, 100, 200ms: a handful, not thousands.
	if subs < 2 || subs > 8 {
		t.Fatalf("%d subscriptions in 500ms when each is lost at once; want a few (renewed, backing off)", subs)
	}
}

func TestWatchers_NotifyNotifyAllLen(t *testing.T) {
	var w driver.Watchers
	ctx, cancel := context.WithCancel(context.Background())
	a, _ := w.Subscribe(ctx, "a")
	b, _ := w.Subscribe(context.Background(), "b")
	if n := w.Len(); n != 2 || !w.Active("a") || w.Active("c") {
		t.Fatalf("Len = %d, Active(a) = %v, Active(c) = %v; want 2, true, false", n, w.Active("a"), w.Active("c"))
	}
	ready := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	w.Notify("a")
	w.Notify("a") // folds into one
	if !ready(a) || ready(a) || ready(b) {
		t.Fatal("Notify(a): want a signalled once, b not")
	}
	w.NotifyAll()
	if !ready(a) || !ready(b) {
		t.Fatal("NotifyAll: want both signalled")
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for w.Len() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Len = %d 5s after a's context ended; want 1", w.Len())
		}
		time.Sleep(time.Millisecond)
	}
}
