package postgres

import (
	"context"
	"sync"
	"time"
)

// maxReadyWait bounds how long a waiter or watcher waits for the Locker's LISTEN
// connection before its first look; without it, it still wakes by polling, and
// the listener signals everyone once it listens.
const maxReadyWait = 2 * time.Second

// subscribers is a set of wake-up channels by lock name: a Locker's waiters, and
// its watchers. It is driver.Watchers plus notifyAll, which the listener needs
// when it (re)connects, since notifications sent while nobody listened are lost.
// Each channel has a buffer of one: several signals before a read fold into one.
type subscribers struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
}

// add registers and returns a new wake-up channel for name.
func (s *subscribers) add(name string) chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]map[chan struct{}]struct{})
	}
	set := s.m[name]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		s.m[name] = set
	}
	set[ch] = struct{}{}
	return ch
}

// remove unregisters ch, a channel add returned for name.
func (s *subscribers) remove(name string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m[name], ch)
	if len(s.m[name]) == 0 {
		delete(s.m, name)
	}
}

// notify signals every channel of name; notifyAll every channel. Neither blocks.
func (s *subscribers) notify(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.m[name] {
		signal(ch)
	}
}

func (s *subscribers) notifyAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range s.m {
		for ch := range set {
			signal(ch)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default: // already signalled
	}
}

// subscribe is Watch's driver.SubscribeFunc: it registers a watcher of name
// until ctx is done and makes sure the listener runs, waiting (bounded by ctx and
// maxReadyWait) until it first listens, so that a change after subscribe returns
// is signalled. It returns the Locker's option error, or fence.ErrClosed after
// Close.
func (l *Locker) subscribe(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	ch := l.watchers.add(name)
	context.AfterFunc(ctx, func() { l.watchers.remove(name, ch) })
	l.startListener(ctx)
	return ch, nil
}

// startListener starts the listener goroutine if it is not running, and waits
// (bounded by ctx and maxReadyWait) until it listens.
func (l *Locker) startListener(ctx context.Context) {
	l.mu.Lock()
	if l.stop == nil && l.usable() == nil {
		lctx, cancel := context.WithCancel(context.Background())
		l.stop = cancel
		go l.listenLoop(lctx)
	}
	l.mu.Unlock()
	t := time.NewTimer(maxReadyWait)
	defer t.Stop()
	select {
	case <-l.ready:
	case <-t.C:
	case <-ctx.Done():
	case <-l.closing:
	}
}

// listenLoop holds one connection, taken out of the pool, that LISTENs on the
// Locker's two channels and dispatches each notification (its payload is a lock
// name) to that name's waiters and watchers. When the connection fails it
// reconnects with backoff; meanwhile waiters and watchers poll.
func (l *Locker) listenLoop(ctx context.Context) {
	defer close(l.done)
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		if l.listenOnce(ctx) {
			backoff = 10 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, time.Second)
	}
}

// listenOnce runs one LISTEN connection until it fails; it reports whether
// LISTEN succeeded. A notification on the release channel (release, revoke)
// wakes waiters and watchers of its lock; one on the watch channel (grant) only
// watchers, since a waiter has nothing to gain from a grant.
func (l *Locker) listenOnce(ctx context.Context) bool {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return false
	}
	conn := pc.Hijack() // ours alone: the pool never hands it out again
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for _, sql := range l.listen {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return false
		}
	}
	l.readyOnce.Do(func() { close(l.ready) })
	// Locks may have changed while we were not listening: everyone looks again.
	l.waiters.notifyAll()
	l.watchers.notifyAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		if n.Channel == l.channel {
			l.waiters.notify(n.Payload)
		}
		l.watchers.notify(n.Payload)
	}
}
