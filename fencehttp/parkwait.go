package fencehttp

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// A parked wait's goroutine stays shallow: it only waits on channels, in a
// small frame, so that its stack is the smallest Go gives (2 KiB) and never
// grows while it is parked. What waits in the store, and grows a stack, is one
// goroutine per lock name: for waiting acquires, the queue's, which runs the
// backend's wait (driver.Engine's, woken by the release) for each in turn, in
// the order they came; for blocking queries, one watch of the name
// (fence.Watcher) that they share. The answer is made in the parked goroutine
// once its wait is over.

// acquireQueue is the waiting acquires parked on one lock name, in order.
type acquireQueue struct {
	name string
	q    []*queuedAcquire // under parking.mu
}

// States of a queuedAcquire.
const (
	waitQueued    = iota // in its queue
	waitServing          // the queue's goroutine waits in the store for it
	waitServed           // g and err are its outcome
	waitAbandoned        // it ended first: its deadline, its client or the drain
)

// queuedAcquire is a waiting acquire parked on p.
type queuedAcquire struct {
	p      *parkedConn
	a      *acquireCall
	unpark func()
	ready  chan struct{} // closed when served

	mu    sync.Mutex
	state int
	g     driver.Grant
	err   error
}

// parkAcquire queues the long poll a, parked on p, and starts its goroutine (and
// its name's queue's, if none runs).
func (s *Server) parkAcquire(p *parkedConn, a *acquireCall, unpark func()) {
	s.m.waits.Inc()
	qa := &queuedAcquire{p: p, a: a, unpark: unpark, ready: make(chan struct{})}
	s.parked.mu.Lock()
	if s.parked.queues == nil {
		s.parked.queues = make(map[string]*acquireQueue)
	}
	aq := s.parked.queues[a.name]
	start := aq == nil
	if start {
		aq = &acquireQueue{name: a.name}
		s.parked.queues[a.name] = aq
	}
	aq.q = append(aq.q, qa)
	s.parked.mu.Unlock()
	if start {
		go s.serveQueue(aq)
	}
	go s.parkedAcquire(qa)
}

// serveQueue runs the backend's wait for each acquire of aq in turn, until aq
// is empty.
func (s *Server) serveQueue(aq *acquireQueue) {
	for {
		var head *queuedAcquire
		s.parked.mu.Lock()
		for len(aq.q) > 0 && head == nil {
			qa := aq.q[0]
			aq.q[0] = nil
			aq.q = aq.q[1:]
			qa.mu.Lock()
			if qa.state == waitQueued {
				qa.state, head = waitServing, qa
			}
			qa.mu.Unlock()
		}
		if head == nil {
			delete(s.parked.queues, aq.name)
			s.parked.mu.Unlock()
			return
		}
		s.parked.mu.Unlock()
		s.serveHead(head)
	}
}

// serveHead runs the backend's wait for head and hands it the outcome; a panic
// of the store is the head's internal error, as in net/http (recoverPanics).
func (s *Server) serveHead(head *queuedAcquire) {
	var (
		g   driver.Grant
		err = errInternalError
	)
	defer func() {
		if v := recover(); v != nil {
			s.logPanic("serving a waiting acquire", v)
		}
		head.mu.Lock()
		head.g, head.err, head.state = g, err, waitServed
		head.mu.Unlock()
		close(head.ready)
	}()
	g, err = s.grantWaiting(head.p.ctx, head.a)
}

// logPanic logs a panic that a parked wait recovered from.
func (s *Server) logPanic(doing string, v any) {
	s.log.Error("panic "+doing, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
}

// recoverParked answers 500, as recoverPanics does in net/http, if the
// answer of p's wait panics (the store, while making it), unless it was written.
func (s *Server) recoverParked(p *parkedConn) {
	v := recover()
	if v == nil {
		return
	}
	s.logPanic("answering a parked wait", v)
	if !p.finished {
		var rw rawResponse
		s.writeJSON(&rw, http.StatusInternalServerError, errorResponse{Error: userMessage("", "", errInternalError), Code: "internal"})
		s.done(p, &rw)
	}
}

// parkedAcquire is the goroutine of a parked waiting acquire.
func (s *Server) parkedAcquire(qa *queuedAcquire) {
	s.awaitGrant(qa)
	s.answerAcquire(qa)
}

// awaitGrant waits until qa is served, or its wait ends first (qa abandoned).
// Its frame is small and it calls nothing deep: see parkwait.go's head.
func (s *Server) awaitGrant(qa *queuedAcquire) {
	t := time.NewTimer(qa.a.wait - time.Since(qa.a.start))
	defer t.Stop()
	select {
	case <-qa.ready:
		return
	case <-t.C:
	case <-qa.p.ctx.Done():
	case <-s.drainCtx.Done():
	}
	qa.mu.Lock()
	serving := qa.state != waitQueued
	if !serving {
		qa.state = waitAbandoned
	}
	qa.mu.Unlock()
	if serving {
		// The store's wait ends as this one did (the same deadline, client and
		// drain), with the outcome to answer.
		<-qa.ready
	}
}

// answerAcquire answers the parked acquire qa once its wait is over. A grant
// whose answer could not be written is released at once: nobody knows its lease
// id.
func (s *Server) answerAcquire(qa *queuedAcquire) {
	p, a := qa.p, qa.a
	defer s.recoverParked(p)
	qa.mu.Lock()
	g, err, abandoned := qa.g, qa.err, qa.state == waitAbandoned
	qa.mu.Unlock()
	if abandoned {
		switch {
		case p.ctx.Err() != nil:
			err = because(p.ctx.Err(), "client went away")
		case s.drainCtx.Err() != nil:
			err = errShuttingDown
		default:
			err = s.heldAtEnd(p.ctx, a.name, a.held, a.start)
		}
	}
	qa.unpark()
	s.m.waitSeconds.Observe(time.Since(a.start).Seconds())
	var rw rawResponse
	s.acquired(p.ctx, &rw, p.request(), a.name, a.req, a.ttl, a.start, a.permit, g, err)
	if !s.done(p, &rw) && rw.status == http.StatusOK {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rerr := s.cfg.Locker.Release(rctx, a.name, g.ID)
		cancel()
		s.held.remove(a.name, g.ID)
		s.log.Info("released a grant whose answer could not be written", "lock", a.name, "token", uint64(g.Token), "err", rerr)
	}
}

// sharedWatch is one watch of a lock name, shared by the blocking queries
// parked on it.
type sharedWatch struct {
	name   string
	refs   int // under parking.mu
	cancel context.CancelFunc

	mu      sync.Mutex
	have    bool           // info is set
	info    fence.LockInfo // the last state the watch yielded
	index   uint64         // info.Index()
	err     error          // the error that ended the watch
	changed chan struct{}  // closed (and replaced) when any of the above change
}

// joinWatch returns the shared watch of name, started if none runs.
func (s *Server) joinWatch(wt fence.Watcher, name string) *sharedWatch {
	s.parked.mu.Lock()
	defer s.parked.mu.Unlock()
	if s.parked.watches == nil {
		s.parked.watches = make(map[string]*sharedWatch)
	}
	sw := s.parked.watches[name]
	if sw == nil {
		var ctx context.Context
		sw = &sharedWatch{name: name, changed: make(chan struct{})}
		ctx, sw.cancel = context.WithCancel(context.Background())
		s.parked.watches[name] = sw
		go s.runWatch(ctx, wt, sw)
	}
	sw.refs++
	return sw
}

// leaveWatch ends a query's use of sw, and sw with its last.
func (s *Server) leaveWatch(sw *sharedWatch) {
	s.parked.mu.Lock()
	defer s.parked.mu.Unlock()
	if sw.refs--; sw.refs == 0 {
		if s.parked.watches[sw.name] == sw {
			delete(s.parked.watches, sw.name)
		}
		sw.cancel()
	}
}

// runWatch follows sw's name until ctx ends or the watch fails: a failure ends
// it for the queries on it (as their own watch's would), and the next query of
// the name starts another.
func (s *Server) runWatch(ctx context.Context, wt fence.Watcher, sw *sharedWatch) {
	publish := func(info fence.LockInfo, err error) {
		sw.mu.Lock()
		if err != nil {
			sw.err = err
		} else {
			sw.info, sw.index, sw.have = info, info.Index(), true
		}
		close(sw.changed)
		sw.changed = make(chan struct{})
		sw.mu.Unlock()
	}
	func() {
		defer func() {
			if v := recover(); v != nil {
				s.logPanic("watching a lock", v)
				publish(fence.LockInfo{}, errInternalError)
			}
		}()
		for info, err := range wt.Watch(ctx, sw.name) {
			publish(info, err)
			if err != nil {
				break
			}
		}
	}()
	if ctx.Err() != nil {
		return
	}
	s.parked.mu.Lock()
	if s.parked.watches[sw.name] == sw {
		delete(s.parked.watches, sw.name)
	}
	s.parked.mu.Unlock()
	sw.mu.Lock()
	ended := sw.err == nil
	sw.mu.Unlock()
	if ended {
		publish(fence.LockInfo{}, because(fence.ErrUnavailable, "the watch of the lock ended"))
	}
}

// How a parked blocking query's wait ended.
const (
	queryChanged = iota + 1 // the watch yielded another index
	queryStale              // the index differed when it came: read afresh
	queryFailed             // the watch failed
	queryTimedOut
	queryGone
	queryDrained
)

// parkedQuery is a blocking query parked on p.
type parkedQuery struct {
	p        *parkedConn
	in       fence.Inspector
	op, name string
	q        blockingQueryArgs
	unpark   func()
	sw       *sharedWatch
	end      int
}

// parkQuery starts the goroutine of the blocking query q of name, parked on p.
func (s *Server) parkQuery(p *parkedConn, in fence.Inspector, op, name string, q blockingQueryArgs, unpark func()) {
	pq := &parkedQuery{p: p, in: in, op: op, name: name, q: q, unpark: unpark}
	wt, ok := s.cfg.Locker.(fence.Watcher)
	if !ok {
		go func() { // blockingQuery answers 501 at once
			info, err := s.blockingQuery(p.ctx, in, name, q)
			unpark()
			var rw rawResponse
			s.inspected(&rw, p.request(), op, name, info, err)
			s.done(p, &rw)
		}()
		return
	}
	s.m.blocking.Inc()
	pq.sw = s.joinWatch(wt, name)
	go s.parkedQuery(pq)
}

// parkedQuery is the goroutine of a parked blocking query.
func (s *Server) parkedQuery(pq *parkedQuery) {
	s.awaitChange(pq)
	s.answerQuery(pq)
}

// awaitChange waits until the shared watch of pq yields an index other than
// pq's, or the wait ends; it sets pq.end. Its frame is small and it calls
// nothing deep.
func (s *Server) awaitChange(pq *parkedQuery) {
	t := time.NewTimer(pq.q.wait)
	defer t.Stop()
	for first := true; ; first = false {
		sw := pq.sw
		sw.mu.Lock()
		have, index, failed, changed := sw.have, sw.index, sw.err != nil, sw.changed
		sw.mu.Unlock()
		switch {
		case failed:
			pq.end = queryFailed
			return
		case have && index != pq.q.index && first:
			pq.end = queryStale // the watch's last state may be old
			return
		case have && index != pq.q.index:
			pq.end = queryChanged
			return
		}
		select {
		case <-changed:
		case <-t.C:
			pq.end = queryTimedOut
			return
		case <-pq.p.ctx.Done():
			pq.end = queryGone
			return
		case <-s.drainCtx.Done():
			pq.end = queryDrained
			return
		}
	}
}

// answerQuery answers the parked blocking query pq once its wait is over, as
// blockingQuery would have.
func (s *Server) answerQuery(pq *parkedQuery) {
	p, sw := pq.p, pq.sw
	defer s.recoverParked(p)
	var (
		info fence.LockInfo
		err  error
	)
	switch pq.end {
	case queryChanged:
		sw.mu.Lock()
		info = sw.info
		sw.mu.Unlock()
	case queryFailed:
		sw.mu.Lock()
		err = sw.err
		sw.mu.Unlock()
	case queryGone:
		err = because(p.ctx.Err(), "client went away")
	case queryDrained:
		err = errShuttingDown
	default: // stale or timed out: the state as it is now
		info, err = pq.in.Inspect(p.ctx, pq.name)
	}
	s.leaveWatch(sw)
	s.m.blocking.Dec()
	pq.unpark()
	var rw rawResponse
	s.inspected(&rw, p.request(), pq.op, pq.name, info, err)
	s.done(p, &rw)
}
