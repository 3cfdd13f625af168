package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
)

// fallbackPoll bounds how long a waiter trusts its watch alone: after it, the waiter
// tries again even without an event (a watch that silently stalled, say behind a
// partition, must not strand it).
const fallbackPoll = 5 * time.Second

// watch is a waiting acquire's watch on one lock key, registered at the server. A
// goroutine turns its events into the wake-ups of the Engine: the channel next
// returns closes at the lock key's next delete (a release, or the expiry of the
// holder's etcd lease), or when the watch ends (no leader: watches require one;
// compaction; cancel), after which the watch is broken and a new one is needed.
type watch struct {
	cancel context.CancelFunc // ends the watch and its goroutine

	mu     sync.Mutex
	wake   chan struct{} // closed at the next delete, or at the end of the watch
	broken bool          // the watch ended; wake is closed
}

// watch registers a watch on the lock key of name for deletes from the current
// revision on, and returns once etcd confirmed it. It returns nil and no error if
// ctx, the wait (waitLeft; fence.WaitForever: none) or Close ended the
// registration: the acquire is over. Its errors (the watch: fence.ErrUnavailable)
// have the prefix "watch:".
//
// It watches from "now" (no start revision), which puts it straight into etcd's
// group of synced watchers, notified as each write is applied. A watch from an
// older revision (concurrency.Mutex watches from its predecessor's revision; so does
// "the failed try's revision + 1" as soon as any other write happened since)
// lands in the unsynced group, which a background loop serves every 100 ms: that
// loop, not the network, is most of concurrency.Mutex's handoff time.
func (l *Locker) watch(ctx context.Context, name string, waitLeft time.Duration) (*watch, error) {
	var waitEnd <-chan time.Time
	if waitLeft != fence.WaitForever {
		t := time.NewTimer(waitLeft)
		defer t.Stop()
		waitEnd = t.C
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	ch := l.cli.Watch(wctx, l.keys.lock(name), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	select {
	case wr, ok := <-ch:
		if ok && wr.Err() == nil && wr.Created {
			w := &watch{cancel: cancel, wake: make(chan struct{})}
			go w.run(ch)
			return w, nil
		}
		cancel()
		if ctx.Err() != nil {
			return nil, nil
		}
		err := error(fence.ErrUnavailable)
		if ok && wr.Err() != nil {
			err = storeErr(wr.Err())
		}
		return nil, fmt.Errorf("watch: %w", err)
	case <-waitEnd:
	case <-ctx.Done():
	case <-l.done:
	}
	cancel()
	return nil, nil
}

// run wakes the waiter at each delete event of ch until the watch ends.
func (w *watch) run(ch clientv3.WatchChan) {
	for wr := range ch {
		if wr.Err() != nil || wr.Canceled {
			break
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				w.fire(false)
				break
			}
		}
	}
	w.fire(true)
}

// fire closes the current wake channel; unless the watch ended, a new one serves the
// next delete.
func (w *watch) fire(ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken {
		return
	}
	close(w.wake)
	if ended {
		w.broken = true
		return
	}
	w.wake = make(chan struct{})
}

// next returns the channel that closes at the next delete, and whether the watch
// still works. A try takes it before it looks at the lock, so that a delete after
// the look is never missed.
func (w *watch) next() (<-chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wake, !w.broken
}
