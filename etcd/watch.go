package etcd

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// fallbackPoll bounds how long a waiter trusts its watch alone: after it, the waiter
// tries again even without an event (a watch that silently stalled, say behind a
// partition, must not strand it).
const fallbackPoll = 5 * time.Second

// watch is a waiting acquire's watch on the keys of one name (the lock key, its
// holder keys and waiter records), registered at the server. A goroutine turns its
// events into the wake-ups of the Engine: the channel next returns closes at the
// next delete of one (a release, or the expiry of a holder's etcd lease), or when
// the watch ends (no leader: watches require one;
// compaction; cancel), after which the watch is broken and a new one is needed.
type watch struct {
	cancel context.CancelFunc // ends the watch and its goroutine

	mu     sync.Mutex
	wake   chan struct{} // closed at the next delete, or at the end of the watch
	broken bool          // the watch ended; wake is closed
	freedK []string      // the keys deleted since the last freed, for freed
}

// watch registers a watch on the keys of name for deletes from the current
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
//
// With FastExpiry it also watches the name's beat keys and notes each renewal in
// beats as it arrives, so that a waiter's wait for a silent holder starts at its
// last renewal, not at the waiter's next try.
func (l *Locker) watch(ctx context.Context, name string, waitLeft time.Duration, beats *beatLog) (*watch, error) {
	var waitEnd <-chan time.Time
	if waitLeft != fence.WaitForever {
		t := time.NewTimer(waitLeft)
		defer t.Stop()
		waitEnd = t.C
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	from, to := l.keys.name(name)
	ch := l.cli.Watch(wctx, from, clientv3.WithRange(to), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	var bch clientv3.WatchChan
	if l.fast {
		bFrom, bTo := l.keys.beats(name)
		bch = l.cli.Watch(wctx, bFrom, clientv3.WithRange(bTo), clientv3.WithFilterDelete(), clientv3.WithCreatedNotify())
	}
	select {
	case wr, ok := <-ch:
		created, over := l.beatsCreated(ctx, bch, waitEnd)
		if over {
			break
		}
		if ok && wr.Err() == nil && wr.Created && created {
			w := &watch{cancel: cancel, wake: make(chan struct{})}
			go w.run(ch)
			if bch != nil {
				go l.noteBeats(bch, beats, cancel)
			}
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

// beatsCreated waits for etcd to confirm the beat watch bch (nil: none) and reports
// whether it did, or whether the acquire is over (ctx, its wait, Close).
func (l *Locker) beatsCreated(ctx context.Context, bch clientv3.WatchChan, waitEnd <-chan time.Time) (created, over bool) {
	if bch == nil {
		return true, false
	}
	select {
	case wr, ok := <-bch:
		return ok && wr.Err() == nil && wr.Created, false
	case <-waitEnd:
	case <-ctx.Done():
	case <-l.done:
	}
	return false, true
}

// noteBeats notes in beats each beat written, as its event arrives, until the
// watch ends; a beat watch that ends early ends the waiter's watch too (cancel),
// which the waiter then makes anew.
func (l *Locker) noteBeats(bch clientv3.WatchChan, beats *beatLog, cancel context.CancelFunc) {
	defer cancel()
	for wr := range bch {
		if wr.Err() != nil || wr.Canceled {
			return
		}
		at := l.clock.Now()
		for _, ev := range wr.Events {
			beats.observe(string(ev.Kv.Key), ev.Kv.ModRevision, at)
		}
	}
}

// run wakes the waiter at each delete event of ch until the watch ends.
func (w *watch) run(ch clientv3.WatchChan) {
	for wr := range ch {
		if wr.Err() != nil || wr.Canceled {
			break
		}
		var deleted []string
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				deleted = append(deleted, string(ev.Kv.Key))
			}
		}
		if len(deleted) > 0 {
			w.fire(false, deleted)
		}
	}
	w.fire(true, nil)
}

// maxFreed bounds the deleted keys a watch keeps between two tries: a Revoke of a
// full semaphore deletes at most fence.MaxLimit of them.
const maxFreed = fence.MaxLimit + 1

// fire closes the current wake channel, noting the deleted keys; unless the
// watch ended, a new channel serves the next delete.
func (w *watch) fire(ended bool, deleted []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken {
		return
	}
	w.freedK = append(w.freedK, deleted[:min(len(deleted), maxFreed-len(w.freedK))]...)
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

// freed returns the keys deleted since it was last called (released or expired
// leases', for the next try's guess of a free slot) and forgets them.
func (w *watch) freed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := w.freedK
	w.freedK = nil
	return keys
}

// watchTimeout bounds each request a Watch makes to etcd (creating its etcd watch,
// reading the lock): while etcd cannot be reached the client would wait for it
// indefinitely, and the watcher is to learn of that as fence.ErrUnavailable.
const watchTimeout = 5 * time.Second

// Watch yields the state of name as Inspect reports it, then its state after each
// change, in order, until ctx is done (see fence.Watcher). The loop is
// driver.Engine's; this package supplies how changes are learned: an etcd watch on
// the name's keys (its lock key, holder keys and waiter records). Every change of
// a lock on etcd writes one of them in the transaction that makes it: a grant
// creates the lock key or a holder key (with the token key), a release or a revoke
// deletes it, and etcd deletes it when it revokes an expired holder's etcd lease;
// so a change is seen as etcd applies it, and an expiry, too, comes as a
// delete (when etcd revokes the lease, not at the holder's deadline). Grants and
// releases of older versions of this package write the same key and are seen at
// once as well. A renewal writes nothing, or moves the key to another etcd lease,
// which wakes the watch but is not yielded (the state's Index is unchanged).
//
// All watchers of one name on a Locker share one etcd watch, and the reads that
// one change causes: a watcher woken while a read of the lock is in flight waits
// for the next one, which starts after it was woken. All of a Locker's watches
// share one gRPC stream of the client. The etcd watch is confirmed before the
// first read, so a change after that read is never missed. The client resumes a
// watch whose connection broke from the last revision it saw, so changes made
// meanwhile are delivered when it reconnects; a watch that etcd ends (compaction
// past that revision, the member losing its leader, as the watch requires one) is
// made anew and the state read again. Whatever a watch misses, a read every
// driver.DefaultWatchPoll finds.
//
// Each state yielded is what Inspect returned; in particular ExpiresIn is etcd's
// whole seconds. It yields an error matching fence.ErrInvalid for a bad name, or
// fence.ErrClosed after Close or when the client is closed, and ends. While etcd
// cannot be reached or has no leader (a request gets no answer within 5 s) it
// yields errors matching fence.ErrUnavailable and goes on trying, backing off;
// ErrCorrupt for an owner key that holds no valid owner is yielded in the same way.
func (l *Locker) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	return func(yield func(fence.LockInfo, error) bool) {
		for info, err := range l.engine.Watch(ctx, name, l.subscribe, l.watchInspect()) {
			if !yield(info, err) {
				return
			}
		}
	}
}

// watchInspect returns the InspectFunc of one Watch run: a shared read (see read).
// The Engine reads a held lock again just after its ExpiresIn, which on etcd is
// truncated to whole seconds: 0 in a lease's last second, and always for a lock
// key written without an etcd lease, which the Engine would read again every
// millisecond. etcd reports the expiry as a delete, which wakes the watch, so that
// re-read is not needed: a read whose Index is the last read's, which the Engine
// does not yield (it yields only a changed Index), reports a held lock with
// ExpiresIn 0 as expiring at the fallback poll. What is yielded is Inspect's state
// unchanged.
func (l *Locker) watchInspect() driver.InspectFunc {
	var last uint64 // Index of the last state returned, which the Engine yielded
	return func(ctx context.Context, name string) (fence.LockInfo, error) {
		info, err := l.read(ctx, name)
		if err != nil {
			return info, err
		}
		idx := info.Index()
		if idx == last && info.Held && info.ExpiresIn == 0 {
			info.ExpiresIn = driver.DefaultWatchPoll
		}
		last = idx
		return info, nil
	}
}

// lockWatch is the etcd watch of one name's keys that all of a Locker's watchers of
// that name share. It ends when its last subscriber leaves or etcd ends it; an
// ended lockWatch is out of Locker.watches, and its subscribers' channels are
// closed so that they subscribe again.
type lockWatch struct {
	cancel  context.CancelFunc // ends the etcd watch
	created chan struct{}      // closed once etcd confirmed the watch, or it failed
	err     error              // why the watch could not be created; set before created closes
	// subs are the subscribers' channels, each with the stop function of the
	// context.AfterFunc that unsubscribes it (nil until it is registered), which
	// endWatch calls: a watch that etcd ends often must not leave them piling up.
	subs  map[chan struct{}]func() bool
	ended bool
}

// sharedRead is one Inspect whose result several watchers of a name wait for.
type sharedRead struct {
	done chan struct{} // closed when info and err are set
	info fence.LockInfo
	err  error
}

// nameReads are the shared reads of one name: the one in flight, and the one that
// starts when it ends, for those who came meanwhile.
type nameReads struct {
	running, next *sharedRead
}

// read returns the state of name as Inspect does, from a read that started after
// read was called, shared with the other watchers of name that wait at the same
// time: a read in flight may predate their wake-up, so they share the next one.
// The read is bounded by watchTimeout (fence.ErrUnavailable after it) and runs
// on its own: ctx only bounds the wait for it.
func (l *Locker) read(ctx context.Context, name string) (fence.LockInfo, error) {
	l.wmu.Lock()
	st := l.reads[name]
	if st == nil {
		if l.reads == nil {
			l.reads = map[string]*nameReads{}
		}
		st = &nameReads{}
		l.reads[name] = st
	}
	var r *sharedRead
	switch {
	case st.running == nil:
		r = &sharedRead{done: make(chan struct{})}
		st.running = r
		go l.runReads(name, st)
	case st.next == nil:
		st.next = &sharedRead{done: make(chan struct{})}
		fallthrough
	default:
		r = st.next
	}
	l.wmu.Unlock()
	select {
	case <-r.done:
		return r.info, r.err
	case <-ctx.Done():
		return fence.LockInfo{}, ctx.Err()
	}
}

// runReads runs st's reads until none is waiting; what they return is Inspect's.
func (l *Locker) runReads(name string, st *nameReads) {
	l.wmu.Lock()
	r := st.running
	l.wmu.Unlock()
	for r != nil {
		// The Engine has checked name and prefixes the errors.
		ctx, cancel := context.WithTimeout(l.wctx, watchTimeout)
		r.info, r.err = l.inspect(ctx, name)
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		switch {
		case r.err == nil:
		case l.closed.Load():
			r.err = fence.ErrClosed
		case timedOut:
			r.err = fmt.Errorf("read: no answer from etcd within %v: %w", watchTimeout, fence.ErrUnavailable)
		}
		close(r.done)
		l.wmu.Lock()
		r, st.next = st.next, nil
		st.running = r
		if r == nil && l.reads[name] == st {
			delete(l.reads, name)
		}
		l.wmu.Unlock()
	}
}

// subscribe is Watch's driver.SubscribeFunc: it joins the shared etcd watch of
// name's keys, starting it if there is none, and returns once etcd confirmed
// it. The channel receives a value after each event and closes when the etcd watch
// ends. It returns fence.ErrClosed after Close, and fence.ErrUnavailable if the
// watch was not confirmed within watchTimeout or etcd refused it.
func (l *Locker) subscribe(ctx context.Context, name string) (<-chan struct{}, error) {
	c := make(chan struct{}, 1)
	l.wmu.Lock()
	if l.closed.Load() {
		l.wmu.Unlock()
		return nil, fence.ErrClosed
	}
	w := l.watches[name]
	if w == nil {
		w = l.startWatch(name)
	}
	w.subs[c] = nil
	l.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() { l.unsubscribe(name, w, c) })
	l.wmu.Lock()
	if _, ok := w.subs[c]; ok {
		w.subs[c] = stop
	} else {
		stop() // w ended, or ctx did: nothing to unsubscribe from
	}
	l.wmu.Unlock()
	t := time.NewTimer(watchTimeout)
	defer t.Stop()
	var err error
	select {
	case <-w.created:
		if err = w.err; err == nil {
			return c, nil
		}
	case <-t.C:
		err = fmt.Errorf("subscribe: no answer from etcd within %v: %w", watchTimeout, fence.ErrUnavailable)
	case <-ctx.Done():
		err = ctx.Err()
	case <-l.done:
		err = fence.ErrClosed
	}
	if stop() {
		l.unsubscribe(name, w, c)
	}
	return nil, err
}

// startWatch starts the shared etcd watch of name's keys and registers it in
// l.watches; l.wmu is held. The watch requires a leader, so that a member cut off
// from its cluster ends it instead of leaving it silent, and runs on the Locker's
// context, which Close ends: it outlives the subscriber that started it. All such
// watches carry the same metadata and so share one gRPC stream of the client.
func (l *Locker) startWatch(name string) *lockWatch {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.wctx))
	w := &lockWatch{cancel: cancel, created: make(chan struct{}), subs: map[chan struct{}]func() bool{}}
	if l.watches == nil {
		l.watches = map[string]*lockWatch{}
	}
	l.watches[name] = w
	go l.runWatch(ctx, name, w)
	return w
}

// runWatch creates w's etcd watch, signals w's subscribers at each event, and ends
// w when the watch ends.
func (l *Locker) runWatch(ctx context.Context, name string, w *lockWatch) {
	defer w.cancel()
	from, to := l.keys.name(name)
	ch := l.cli.Watch(ctx, from, clientv3.WithRange(to), clientv3.WithCreatedNotify())
	wr, ok := <-ch
	if !ok || !wr.Created || wr.Err() != nil || wr.Canceled {
		var err error
		switch {
		case l.cli.Ctx().Err() != nil:
			err = fmt.Errorf("subscribe: etcd client closed: %w", fence.ErrClosed)
		case ok && wr.Err() != nil:
			err = fmt.Errorf("subscribe: %w", storeErr(wr.Err()))
		default:
			err = fmt.Errorf("subscribe: watch not created: %w", fence.ErrUnavailable)
		}
		l.endWatch(name, w, err)
		return
	}
	close(w.created)
	for wr := range ch {
		if wr.Err() != nil || wr.Canceled {
			break
		}
		if len(wr.Events) > 0 {
			l.wmu.Lock()
			for c := range w.subs {
				select {
				case c <- struct{}{}:
				default:
				}
			}
			l.wmu.Unlock()
		}
	}
	l.endWatch(name, w, nil)
}

// endWatch ends w: it leaves l.watches, and its subscribers' channels close (or, if
// it was never created, they learn err).
func (l *Locker) endWatch(name string, w *lockWatch, err error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.watches[name] == w {
		delete(l.watches, name)
	}
	if w.ended {
		return
	}
	w.ended = true
	select {
	case <-w.created:
		for c, stop := range w.subs {
			close(c)
			if stop != nil {
				stop()
			}
		}
	default:
		w.err = err
		close(w.created)
	}
	w.subs = nil
}

// unsubscribe removes c from w's subscribers and ends the etcd watch when it was
// the last one.
func (l *Locker) unsubscribe(name string, w *lockWatch, c chan struct{}) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if w.ended {
		return
	}
	delete(w.subs, c)
	if len(w.subs) > 0 {
		return
	}
	w.ended = true
	if l.watches[name] == w {
		delete(l.watches, name)
	}
	w.cancel()
}
