package redis

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
)

// Watch yields the state of lock name as Inspect reports it, then its state after
// each acquire, release, expiry, revoke or heal, in order (see fence.Watcher); a
// renewal is not a change. Grants, releases, revokes and heals publish on the
// name's wake channel (SPUBLISH; PUBLISH with Options.ClassicPubSub) in the script
// that makes them, and the watch reads the state again at each message; an expiry
// publishes nothing and is read at the holder's expiry by the Redis server's PTTL;
// and the state is read every driver.DefaultWatchPoll (5s) in case a message was
// lost. A version that did not publish grants and heals (before Watch existed)
// still publishes releases and revokes: during a rolling upgrade a watcher sees the
// grants and heals of older binaries only at that poll.
//
// All watches of one Locker share its pub/sub connections: one for every name
// (on a Cluster with sharded pub/sub, one per hash slot watched, since a
// connection's channels are subscribed again in one command), subscribed to each
// watched name's channel once; it is closed when the last watch on it ends.
// Dropped connections are recovered by go-redis, which reconnects (after a
// Sentinel failover, to the new primary) and subscribes again: every watch on the
// connection then reads the state again, as messages may have been missed. A
// channel the server drops (its Cluster slot moved) ends the watches' subscription
// and they subscribe again, at the slot's new owner.
//
// It yields an error matching fence.ErrInvalid for a bad name, or fence.ErrClosed
// after Close, and ends. While Redis cannot be reached, or a subscription is not
// confirmed in time (see Options.PollInterval), it yields errors matching
// fence.ErrUnavailable and goes on trying, backing off; ErrWrongType if the
// counter holds foreign data. Errors read "redis: watch NAME: ...".
func (l *Locker) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	return l.engine.Watch(ctx, name, l.relay.subscribe, l.Inspect)
}

// maxIdleChannels bounds the channels a relay connection stays subscribed to that
// no watch wants any more (fence never unsubscribes: see relay). Past it the
// connection is replaced, and its watches subscribe again on a fresh one.
const maxIdleChannels = 256

// relay shares pub/sub connections among a Locker's watches and relays each
// message to the watches of its channel. A channel is subscribed once on a
// connection and never unsubscribed: every subscription reply on a connection is
// then either the first, confirming the channel, or a resubscription after
// go-redis reconnected, and an unsubscribe reply can only mean the server dropped
// the channel. The zero value, with l set, is ready to use.
type relay struct {
	l        *Locker
	mu       sync.Mutex
	conns    map[int]*relayConn      // the connection that takes new subscriptions, by group
	dropping map[*relayConn]struct{} // connections a Cluster slot moved away from, until retired
	closed   bool
}

// relayConn is one pub/sub connection of a relay.
type relayConn struct {
	group   int
	node    string // on a Cluster, the address of the master it subscribed at
	ps      *goredis.PubSub
	chans   map[string]*relayChan // every channel subscribed on ps
	live    int                   // watch subscriptions
	idle    int                   // channels no watch subscribes to any more
	lost    chan struct{}         // closed when retired
	retired bool
	reading sync.Once
}

// relayChan is a channel on a relay connection and its watch subscriptions, each
// with the stop of its clean-up at the end of its context.
type relayChan struct {
	subs      map[chan struct{}]func() bool
	ready     chan struct{} // closed at the server's first confirmation
	confirmed bool
}

// subscribe is the driver.SubscribeFunc of Watch. It returns once the server has
// confirmed the subscription of name's wake channel on a shared connection (at
// once if it was confirmed before). The channel it returns receives a value after
// each message on the wake channel and after a resubscription, and closes when the
// subscription is lost (the connection was replaced, or the server dropped the
// channel). It returns fence.ErrClosed after Close, ctx.Err() when ctx ends, and
// an error matching fence.ErrUnavailable if the server did not confirm in time.
func (r *relay) subscribe(ctx context.Context, name string) (<-chan struct{}, error) {
	channel := r.l.keysFor(name).wake
	group := r.group(name)
	r.mu.Lock()
	if r.closed || r.l.isClosed() {
		r.mu.Unlock()
		return nil, fence.ErrClosed
	}
	c := r.conns[group]
	if c == nil {
		c = &relayConn{group: group, ps: r.l.pubSub(ctx), chans: map[string]*relayChan{}, lost: make(chan struct{})}
		if r.conns == nil {
			r.conns = map[int]*relayConn{}
		}
		r.conns[group] = c
	}
	e := c.chans[channel]
	fresh := e == nil
	if fresh {
		e = &relayChan{subs: map[chan struct{}]func() bool{}, ready: make(chan struct{})}
		c.chans[channel] = e
	} else if len(e.subs) == 0 {
		c.idle--
	}
	s := make(chan struct{}, 1)
	e.subs[s] = context.AfterFunc(ctx, func() { r.leave(c, channel, s) })
	c.live++
	r.mu.Unlock()

	timeout := r.l.confirmWithin(ctx, fence.WaitForever)
	deadline := time.Now().Add(timeout) // network time, not the Locker's Clock
	if fresh {
		// In its own goroutine, as go-redis may block in the dial past any context
		// (a server that accepts and does not answer), and the wait is bounded. The
		// connection is shared, so one watch's cancellation must not break it; an
		// error shows as a missing confirmation (go-redis dials and subscribes
		// again as it reads).
		go func() {
			ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
			defer cancel()
			if r.l.opts.ClassicPubSub {
				_ = c.ps.Subscribe(ctx, channel)
			} else {
				_ = c.ps.SSubscribe(ctx, channel)
			}
			// Read only after the first subscribe dialled: on a Cluster the
			// connection goes to the master of the first channel's slot.
			c.reading.Do(func() {
				if mk, ok := r.l.client.(masterForKeyer); ok && group != 0 {
					if m, err := mk.MasterForKey(ctx, channel); err == nil {
						c.node = m.Options().Addr
					}
				}
				go r.read(c)
			})
		}()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-e.ready:
		return s, nil
	case <-c.lost:
		return s, nil // closed: the watch subscribes again
	case <-ctx.Done():
		r.leave(c, channel, s)
		return nil, ctx.Err()
	case <-t.C:
	}
	r.mu.Lock()
	confirmed, retired := e.confirmed, c.retired
	// On a Cluster the likely cause is a node that no longer owns the slot and
	// answered MOVED, which the connection cannot recover from: new subscriptions
	// take a fresh one. Elsewhere the server is slow or away, and go-redis
	// subscribes again when it reconnects.
	retire := !confirmed && !retired && group != 0
	if retire {
		r.retireLocked(c)
	}
	r.mu.Unlock()
	switch {
	case retire:
		go r.closeConn(c) // as in leave
	case !confirmed && !retired:
		r.leave(c, channel, s)
	default:
		return s, nil // confirmed, or lost (s is closed), as the timer fired
	}
	return nil, fmt.Errorf("%w: subscription to %s not confirmed within %v", fence.ErrUnavailable, channel, timeout)
}

// group is the key of the connection a name's channel is subscribed on: 0, or on
// a Cluster with sharded pub/sub 1 + the hash slot of the name's tag, since go-redis
// subscribes a connection's sharded channels again in one command, which a
// Cluster refuses across slots (classic pub/sub reaches every node).
func (r *relay) group(name string) int {
	if _, ok := r.l.client.(clusterScanner); !ok || r.l.opts.ClassicPubSub {
		return 0
	}
	return 1 + int(crc16(escapeName(name))%16384)
}

// leave removes watch subscription s of channel from c, when its context ends or
// its subscribe failed, and closes c (in the background) when no watch is left on
// it, or replaces it when too many of its channels are idle.
func (r *relay) leave(c *relayConn, channel string, s chan struct{}) {
	r.mu.Lock()
	e := c.chans[channel]
	if c.retired || e == nil {
		r.mu.Unlock()
		return
	}
	stop, ok := e.subs[s]
	if !ok {
		r.mu.Unlock()
		return
	}
	stop()
	delete(e.subs, s)
	c.live--
	if len(e.subs) == 0 {
		c.idle++
	}
	drop := c.live == 0 || c.idle > maxIdleChannels
	if drop {
		r.retireLocked(c)
	}
	r.mu.Unlock()
	if drop {
		// Not in this goroutine: Close waits while go-redis redials (up to the
		// client's timeouts), and a watch must end promptly.
		go r.closeConn(c)
	}
}

// read relays c's messages until c's connection is closed.
func (r *relay) read(c *relayConn) {
	for m := range c.ps.ChannelWithSubscriptions(goredis.WithChannelSize(64)) {
		if channel, drop := r.relayMessage(c, m); drop {
			// The server dropped a channel: its Cluster slot moved, and new
			// subscriptions already go to a fresh connection. Before this one's
			// watches subscribe again, let the slot map catch up (bounded), so that
			// they do at the slot's new owner, not at c.node, which answers MOVED.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			masterAfterReload(ctx, r.l.client, channel, func(addr string) bool { return addr != c.node })
			cancel()
			r.mu.Lock()
			r.retireLocked(c)
			r.mu.Unlock()
			r.closeConn(c)
		}
	}
}

// relayMessage signals the watches m concerns. If m says the server dropped a
// channel, it takes c out of r.conns and returns the channel and true.
func (r *relay) relayMessage(c *relayConn, m any) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.retired {
		return "", false
	}
	switch m := m.(type) {
	case *goredis.Message:
		if e := c.chans[m.Channel]; e != nil {
			e.signal()
		}
	case *goredis.Subscription:
		e := c.chans[m.Channel]
		switch {
		case dropped(m):
			if r.conns[c.group] == c {
				delete(r.conns, c.group)
			}
			if r.dropping == nil {
				r.dropping = map[*relayConn]struct{}{}
			}
			r.dropping[c] = struct{}{}
			return m.Channel, true
		case e == nil:
		case !e.confirmed:
			e.confirmed = true
			close(e.ready)
		default:
			e.signal() // subscribed again after a reconnect: a message may be lost
		}
	}
	return "", false
}

// signal wakes every watch subscription of e; it never blocks. r.mu is held.
func (e *relayChan) signal() {
	for s := range e.subs {
		select {
		case s <- struct{}{}:
		default:
		}
	}
}

// retireLocked takes c out of service: its watch subscriptions are closed, so
// their watches subscribe again, on another connection. r.mu is held; the caller
// then calls closeConn.
func (r *relay) retireLocked(c *relayConn) {
	if c.retired {
		return
	}
	c.retired = true
	if r.conns[c.group] == c {
		delete(r.conns, c.group)
	}
	delete(r.dropping, c)
	for _, e := range c.chans {
		for s, stop := range e.subs {
			stop()
			close(s)
		}
		e.subs = nil
	}
	c.live, c.idle = 0, 0
	close(c.lost)
}

// closeConn closes a retired connection; its reader then ends.
func (r *relay) closeConn(c *relayConn) { _ = c.ps.Close() }

// close retires every connection, for Locker.Close; later subscribes fail.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	conns := slices.AppendSeq(slices.Collect(maps.Values(r.conns)), maps.Keys(r.dropping))
	for _, c := range conns {
		r.retireLocked(c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		r.closeConn(c)
	}
}

// crc16 is the CRC16 (XMODEM) that Redis Cluster hashes keys and sharded
// channels with: a slot is crc16(tag) mod 16384.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
