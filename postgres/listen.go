package postgres

import (
	"context"
	"time"
)

// maxReadyWait bounds how long a waiter waits for the Locker's LISTEN connection
// before its first try; without it, it still wakes by polling.
const maxReadyWait = 2 * time.Second

// addWaiter registers a wake-up channel for name.
func (l *Locker) addWaiter(name string) chan struct{} {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.waiters[name]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		l.waiters[name] = set
	}
	set[ch] = struct{}{}
	return ch
}

func (l *Locker) removeWaiter(name string, ch chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiters[name], ch)
	if len(l.waiters[name]) == 0 {
		delete(l.waiters, name)
	}
}

// wake wakes every waiter of name; wakeAll wakes all waiters (after the LISTEN
// connection was re-established, notifications may have been lost).
func (l *Locker) wake(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.waiters[name] {
		signal(ch)
	}
}

func (l *Locker) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.waiters {
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
// Locker's channel and dispatches each notification (its payload is a lock
// name) to that name's waiters. When the connection fails it reconnects with
// backoff; meanwhile waiters poll.
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
// LISTEN succeeded.
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
	if _, err := conn.Exec(ctx, l.listen); err != nil {
		return false
	}
	l.readyOnce.Do(func() { close(l.ready) })
	// Releases may have happened while we were not listening.
	l.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		l.wake(n.Payload)
	}
}
