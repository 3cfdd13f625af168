package postgres

import (
	"context"
	"time"
)

// maxReadyWait bounds how long a waiter or watcher waits for the Locker's LISTEN
// connection before its first look; without it, it still wakes by polling, and
// the listener signals everyone once it listens.
const maxReadyWait = 2 * time.Second

// subscribe is Watch's driver.SubscribeFunc: it registers a watcher of name
// until ctx is done and makes sure the listener runs, waiting (bounded by ctx and
// maxReadyWait) until it first listens, so that a change after subscribe returns
// is signalled. It returns the Locker's option error, or fence.ErrClosed after
// Close.
func (l *Locker) subscribe(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	ch, err := l.watchers.Subscribe(ctx, name)
	if err != nil {
		return nil, err
	}
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
	l.waiters.NotifyAll()
	l.watchers.NotifyAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		if n.Channel == l.channel {
			l.waiters.Notify(n.Payload)
		}
		l.watchers.Notify(n.Payload)
	}
}
