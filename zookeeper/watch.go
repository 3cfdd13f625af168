package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
)

// Watch yields the state of name as Inspect reports it, then the state after each
// change (see fence.Watcher): an acquire, a release, a revoke, a takeover after
// expiry, and an expiry that no waiter took over (read at the holder's expiry by the
// ZooKeeper leader's clock; no event says it).
//
// Changes are learned from a ZooKeeper child watch on the lock's directory: every
// grant, release, revoke and takeover creates or deletes a node there, so the server
// itself signals them, for changes made by older versions of this package too. The
// watch is armed before Watch first reads the state, re-armed after each event, and
// shared by all of the Locker's watchers of name, as is the read after each event
// (one watch and one goroutine per name, not per watcher). A disconnect that keeps
// the session loses nothing: the client sets the watch again on reconnecting, and
// the server fires it for what changed meanwhile. A session that ends (expired, or
// the connection closed) drops the watch: every watcher of name then subscribes
// again, in the new session, and reads the state again. A lost event is caught by
// the fallback read every driver.DefaultWatchPoll.
//
// LastToken is the directory's pzxid, which also moves when a waiter joins or
// leaves and when an Acquire finds the lock held (its node comes and goes), so a
// watcher may see the same holder again with a greater LastToken. A renewal changes
// nothing a watcher sees and wakes no one.
//
// It yields an error matching fence.ErrInvalid for a bad name, or
// fence.ErrClosed after Close, and ends; while ZooKeeper cannot be reached it
// yields errors matching fence.ErrUnavailable and goes on trying. A request in
// flight is not interrupted by ctx: a watch ends at most about a session timeout
// after ctx is done.
func (l *Locker) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	return func(yield func(fence.LockInfo, error) bool) {
		var pause time.Duration
		inspect := func(ctx context.Context, name string) (fence.LockInfo, error) {
			return l.watchInspect(ctx, name, &pause)
		}
		l.engine.Watch(ctx, name, l.subscribe, inspect)(yield)
	}
}

// A lock whose lowest node has no TTL yet is read again after a pause that doubles
// from minUnclaimedPause to maxUnclaimedPause (see watchInspect); up to
// claimWaitPause, before its state is even yielded.
const (
	minUnclaimedPause = 10 * time.Millisecond
	claimWaitPause    = 160 * time.Millisecond
	maxUnclaimedPause = time.Second
)

// watchInspect is Watch's driver.InspectFunc: Inspect's read, with errors left for
// the Engine to name, and with pauses for a lock whose lowest node has no TTL yet.
// That is a promoted waiter that has not claimed its node, for a few round trips
// (or until its session ends, if it is stuck there), and Inspect reports it held
// with ExpiresIn 0. Its claim does not move the change index, so a watcher that was
// given that state would not see the holder's time left until the next change; and
// the Engine takes ExpiresIn 0 for an expiry due now and would read again at once,
// a thousand times a second. So such a read is tried again after 10, 20, 40, 80
// and 160ms (a claim is usually seen on the second), and only then returned; and
// while the state lasts, each later read first pauses, doubling up to
// maxUnclaimedPause.
func (l *Locker) watchInspect(ctx context.Context, name string, pause *time.Duration) (fence.LockInfo, error) {
	for {
		if *pause > 0 {
			t := time.NewTimer(*pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fence.LockInfo{}, ctx.Err()
			case <-l.stop:
				t.Stop()
			}
		}
		if err := l.checkOpen(); err != nil {
			return fence.LockInfo{}, err
		}
		info, err := l.sharedInspect(ctx, name)
		if err != nil || !info.Held || info.ExpiresIn > 0 {
			*pause = 0
			return info, err
		}
		*pause = min(max(2**pause, minUnclaimedPause), maxUnclaimedPause)
		if *pause > claimWaitPause {
			return info, nil
		}
	}
}

// read is a read of a lock's state in flight, which the relay's other watchers may
// join (see sharedInspect).
type read struct {
	gen  uint64        // the relay's gen when it started
	done chan struct{} // closed once info and err are set
	info fence.LockInfo
	err  error
}

// sharedInspect reads name's state, joining the read in flight for the same name
// if it started since the relay's last signal: every watcher of name is signalled
// at once, and one read after the signal serves them all, as well as its own. A
// read that started before the signal may miss the change signalled and is never
// joined; a finished read is never reused. A joined read that started before a
// watcher's timer fired (the holder's expiry) may still say held: that watcher reads
// again at the expiry the answer gives, so it only costs a read.
func (l *Locker) sharedInspect(ctx context.Context, name string) (fence.LockInfo, error) {
	l.wmu.Lock()
	r := l.relays[name]
	if r == nil { // not subscribed yet, or lost: read alone
		l.wmu.Unlock()
		info, _, err := l.inspect(name)
		return info, err
	}
	if rd := r.read; rd != nil && rd.gen == r.gen {
		l.wmu.Unlock()
		select {
		case <-rd.done:
			return rd.info, rd.err
		case <-ctx.Done():
			return fence.LockInfo{}, ctx.Err()
		}
	}
	rd := &read{gen: r.gen, done: make(chan struct{})}
	r.read = rd
	l.wmu.Unlock()
	rd.info, _, rd.err = l.inspect(name)
	close(rd.done)
	l.wmu.Lock()
	if r.read == rd {
		r.read = nil
	}
	l.wmu.Unlock()
	return rd.info, rd.err
}

// relay is the one ZooKeeper watch on a lock's directory that a Locker keeps while
// anyone watches the lock, and the subscriptions it signals. Its goroutine re-arms
// the watch after each event, then signals every subscription. Once the last
// subscription ends it stays until the armed watch fires (a ZooKeeper watch cannot
// be taken back), so that a name watched again and again reuses it instead of
// piling up watches in the client; then it ends.
type relay struct {
	ready chan struct{}              // closed once the first watch is armed or failed
	err   error                      // why the first watch failed; set before ready closes
	subs  map[chan struct{}]struct{} // guarded by Locker.wmu; nil once lost
	gen   uint64                     // signals sent; guarded by Locker.wmu
	read  *read                      // the read in flight; guarded by Locker.wmu
}

// subscribe is Watch's driver.SubscribeFunc: it joins (or starts) the relay of name,
// and returns once the relay's watch is armed. The channel receives a value after
// each change event and closes when the watch is lost (the session ended).
func (l *Locker) subscribe(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := l.checkOpen(); err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	l.wmu.Lock()
	r := l.relays[name]
	if r == nil {
		r = &relay{ready: make(chan struct{}), subs: map[chan struct{}]struct{}{}}
		l.relays[name] = r
		go l.relay(name, r)
	}
	r.subs[c] = struct{}{}
	l.wmu.Unlock()
	leave := func() {
		l.wmu.Lock()
		delete(r.subs, c)
		l.wmu.Unlock()
	}
	select {
	case <-r.ready:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	if r.err != nil {
		leave()
		return nil, r.err
	}
	context.AfterFunc(ctx, leave)
	return c, nil
}

// relay runs r for name until its watch is lost, the Locker is closed, or an event
// finds no subscription left.
func (l *Locker) relay(name string, r *relay) {
	dir := l.dir(name)
	events, err := l.arm(dir)
	if err != nil {
		l.wmu.Lock()
		r.err = err
		l.dropRelay(name, r)
		l.wmu.Unlock()
		close(r.ready)
		return
	}
	close(r.ready)
	for {
		var ev zk.Event
		var ok bool
		select {
		case ev, ok = <-events:
			if !ok {
				ev.Type = zk.EventNotWatching // never so, but closed says lost
			}
		case <-l.stop:
			l.wmu.Lock()
			l.dropRelay(name, r)
			l.wmu.Unlock()
			return
		}
		l.wmu.Lock()
		if len(r.subs) == 0 {
			l.dropRelay(name, r) // nobody left to tell: leave no watch armed
			l.wmu.Unlock()
			return
		}
		l.wmu.Unlock()
		if ev.Type != zk.EventNotWatching { // NotWatching: the session ended
			events, err = l.arm(dir)
		}
		l.wmu.Lock()
		if ev.Type == zk.EventNotWatching || err != nil {
			for c := range r.subs {
				close(c) // lost: each watch subscribes again
			}
			r.subs = nil
			l.dropRelay(name, r)
			l.wmu.Unlock()
			return
		}
		r.gen++ // a read in flight may have missed this change: none joins it now
		for c := range r.subs {
			select {
			case c <- struct{}{}:
			default:
			}
		}
		l.wmu.Unlock()
	}
}

// dropRelay forgets r as name's relay, if it still is. l.wmu must be held.
func (l *Locker) dropRelay(name string, r *relay) {
	if l.relays[name] == r {
		delete(l.relays, name)
	}
}

// arm sets a watch that fires on the next change of dir's children, or on dir's
// creation if it does not exist yet (a lock never acquired), and returns its event
// channel. It never sets a data watch on an existing dir: Inspect writes the dir's
// data to read the leader's clock, and that write must wake no one.
func (l *Locker) arm(dir string) (<-chan zk.Event, error) {
	for attempt := 0; attempt < 3; attempt++ {
		_, _, events, err := l.conn.ChildrenW(dir)
		if err == nil {
			return events, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, zkErr(err)
		}
		exists, _, events, err := l.conn.ExistsW(dir)
		if err != nil {
			return nil, zkErr(err)
		}
		if !exists {
			return events, nil
		}
		// Created in between: that ExistsW set a data watch, which fires once, on
		// the next write of dir, and is not read. Set the child watch.
	}
	return nil, fmt.Errorf("%w: the lock's directory kept appearing and vanishing", fence.ErrUnavailable)
}
