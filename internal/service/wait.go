package service

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Waits: a waiting acquire and a blocking query wait on a channel or the store
// with the caller's context (its wire's request or connection), a timer and the
// service's drain, and return their answer to the wire that called.
//
// Fair waiting (P10): the waiting acquires of one lock name form a queue, in the
// order they arrived at this service, over whichever wire. Only its head tries the store; the others
// wait for their turn, which comes when the head leaves (granted, or its wait
// over, its client gone, the server draining). A waiter that gives up leaves the
// queue at once. While a name has waiters, no new acquire tries first: a waiting
// one joins the end of the queue, and one that does not wait (wait_ms 0) is
// answered held at once. Semaphores and shared locks queue the same way, one
// try at a time; the store then decides what each head gets (a free permit, a
// shared lease beside others).

// waitQueues are the waiting acquires of the server, by lock name.
type waitQueues struct {
	mu    sync.Mutex
	names map[string]*list.List // of *waiter, the head first
}

// waiter is one waiting acquire in its name's queue.
type waiter struct {
	turn chan struct{} // closed when it is the head
}

// join puts a new waiter at the end of name's queue and returns it, and whether
// it is the head (its turn has come).
func (q *waitQueues) join(name string) (*list.Element, bool) {
	wt := &waiter{turn: make(chan struct{})}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.names == nil {
		q.names = make(map[string]*list.List)
	}
	l := q.names[name]
	if l == nil {
		l = list.New()
		q.names[name] = l
	}
	e := l.PushBack(wt)
	head := l.Len() == 1
	if head {
		close(wt.turn)
	}
	return e, head
}

// leave takes e out of name's queue; if it was the head, the next waiter's turn
// comes.
func (q *waitQueues) leave(name string, e *list.Element) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.names[name]
	head := l.Front() == e
	l.Remove(e)
	switch {
	case l.Len() == 0:
		delete(q.names, name)
	case head:
		close(l.Front().Value.(*waiter).turn)
	}
}

// waiting reports whether name has waiting acquires.
func (q *waitQueues) waiting(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.names[name] != nil
}

// AcquireRequest is an acquire: its TTL in milliseconds (nil: the default), its
// wait in milliseconds (0 tries once; cut to MaxWait), the holder's owner, a
// semaphore's Limit (nil or 1: a lock) or Shared, and the RequestID that names
// it across its retries (fence.WithRequestID; a store whose Features lack
// RequestIDs ignores it).
type AcquireRequest struct {
	TTLms     *int64
	WaitMs    int64
	Owner     string
	Limit     *int
	Shared    bool
	RequestID string
}

// Grant is the lease an acquire was granted: Waited is the time from when the
// service got the acquire to when it sent the store the request that granted
// it, which is when the store's TTL started (see grantedAt); Slot is set for a
// semaphore permit only.
type Grant struct {
	Name   string
	Token  fence.Token
	ID     string
	TTL    time.Duration
	Waited time.Duration
	Slot   *int
}

// Acquire grants name as req asks, waiting its turn in name's fair queue (P10,
// shared by every wire: see the head of this file) for at most req.WaitMs.
// Errors: fence.ErrInvalid for a bad request, a *fence.HeldError
// (fence.ErrNotAcquired) when the wait ends first, a *fence.LimitError,
// ErrNotImplemented for a kind of grant the store lacks, an error of ErrBusy
// beyond MaxWaiters, ErrShuttingDown when the service drains, one of ctx's when
// it ends (the client went away: a grant made then is disposed of, see
// wentAway), and the store's.
func (s *Service) Acquire(ctx context.Context, name string, req AcquireRequest) (Grant, error) {
	ttl, err := s.checkAcquire(req)
	if err != nil {
		return Grant{}, err
	}
	a := &acquireCall{name: name, req: req, ttl: ttl, wait: s.cfg.MaxWait, start: time.Now()}
	if req.WaitMs < a.wait.Milliseconds() {
		a.wait = time.Duration(req.WaitMs) * time.Millisecond
	}
	if req.Owner != "" {
		a.opts = append(a.opts, fence.WithOwner(req.Owner))
	}
	if req.RequestID != "" {
		// A store whose Features lack RequestIDs ignores it (see openapi.json).
		a.opts = append(a.opts, fence.WithRequestID(req.RequestID))
	}
	switch {
	case req.Limit != nil && *req.Limit > 1:
		a.limit = *req.Limit
		a.opts = append(a.opts, fence.WithLimit(a.limit))
	case req.Shared:
		a.opts = append(a.opts, fence.WithShared())
	}
	g, err := s.grantInTurn(ctx, a)
	return s.acquired(ctx, a, g, err)
}

// checkAcquire validates an acquire and returns its TTL.
func (s *Service) checkAcquire(req AcquireRequest) (time.Duration, error) {
	ttl, err := s.ttlFromMs(req.TTLms)
	if err != nil {
		return 0, err
	}
	if req.WaitMs < 0 {
		return 0, &fence.InvalidError{Field: "wait_ms", Value: strconv.FormatInt(req.WaitMs, 10), Reason: "must not be negative"}
	}
	// Checked here as well as by the engine: a Locker that is no driver.Engine
	// must not store an owner the API promises to refuse.
	if err := fence.ValidateOwner(req.Owner); err != nil {
		return 0, err
	}
	if req.RequestID != "" {
		if err := fence.ValidateRequestID(req.RequestID); err != nil {
			return 0, err
		}
	}
	return ttl, s.checkKind(req)
}

// acquireCall is what the wait of an acquire and its answer need of the call.
type acquireCall struct {
	name      string
	req       AcquireRequest
	ttl, wait time.Duration
	start     time.Time
	limit     int // a semaphore's permits; 0 for a lock or a shared lease
	opts      []fence.AcquireOption
}

// grantInTurn grants a.name when its turn in the name's queue comes (see the
// head of this file): at once if the name has no waiters, else after the
// waiters before it. Without a wait it tries once, and only if no acquire
// waits. The wait ends with ctx (the client going away), a.wait, or the
// server's drain (errShuttingDown).
//
// An acquire with a request id that arrives while the name has waiters first
// asks the store (a driver.RetryFinder) for the grant an earlier attempt of it
// made: a retry whose answer was lost gets that grant at once, instead of
// queueing behind waiters who wait for it to expire. Nothing is granted by that
// look, so no acquire jumps the queue.
func (s *Service) grantInTurn(ctx context.Context, a *acquireCall) (driver.Grant, error) {
	if rf, ok := s.cfg.Locker.(driver.RetryFinder); ok && a.req.RequestID != "" && s.queues.waiting(a.name) {
		// A look that fails while the call may wait is no answer: its turn in the
		// queue finds the grant by the request id as well.
		if g, found, err := rf.FindRetried(ctx, a.name, a.ttl, a.opts...); found || err != nil && !s.ridesOut(ctx, a, err) {
			return g, err
		}
	}
	if a.wait <= 0 {
		if s.queues.waiting(a.name) {
			return driver.Grant{}, s.heldNow(ctx, a.name, a.limit, nil)
		}
		return s.grant(ctx, a.name, a.ttl, a.opts...)
	}
	e, head := s.queues.join(a.name)
	defer s.queues.leave(a.name, e)
	if head {
		g, err := s.grant(ctx, a.name, a.ttl, a.opts...)
		if !errors.Is(err, fence.ErrNotAcquired) && !s.ridesOut(ctx, a, err) || ctx.Err() != nil {
			return g, err
		}
	}
	unpark, err := s.park()
	if err != nil {
		return driver.Grant{}, err
	}
	defer unpark()
	s.m.waits.Inc()
	defer func() { s.m.waitSeconds.Observe(time.Since(a.start).Seconds()) }()
	if !head {
		t := time.NewTimer(a.wait - time.Since(a.start))
		defer t.Stop()
		select {
		case <-e.Value.(*waiter).turn:
		case <-t.C:
			return driver.Grant{}, s.heldNow(ctx, a.name, a.limit, nil)
		case <-ctx.Done():
			return driver.Grant{}, Because(ctx.Err(), "client went away")
		case <-s.drainCtx.Done():
			return driver.Grant{}, ErrShuttingDown
		}
	}
	return s.grantWaiting(ctx, a)
}

// ridesOut reports whether the acquire a, whose try failed with err, keeps
// waiting instead of answering err: the store is unavailable for now (a
// cluster's leader election, a short partition) and a's wait has time left.
// Its waiting grant then rides the unavailability out as every backend's
// waiting acquire does (driver.Transient), so that an election costs a waiting
// acquire only time (DESIGN P11). An acquire without a wait answers at once,
// and so does one whose client went away or whose server drains.
func (s *Service) ridesOut(ctx context.Context, a *acquireCall, err error) bool {
	return err != nil && errors.Is(err, fence.ErrUnavailable) && !errors.Is(err, fence.ErrClosed) &&
		ctx.Err() == nil && s.drainCtx.Err() == nil && a.wait-time.Since(a.start) > 0
}

// grantWaiting is the store's wait of the head of a queue, woken by the
// release, for what is left of a.wait.
func (s *Service) grantWaiting(ctx context.Context, a *acquireCall) (driver.Grant, error) {
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.drainCtx, cancel)
	waitStart := time.Now()
	g, err := s.grant(wctx, a.name, a.ttl, append(a.opts, fence.WithWait(a.wait-time.Since(a.start)))...)
	stop()
	cancel()
	switch {
	case err != nil && s.drainCtx.Err() != nil && ctx.Err() == nil:
		err = ErrShuttingDown
	case errors.Is(err, fence.ErrNotAcquired) && ctx.Err() == nil:
		err = s.heldAtEnd(ctx, a.name, err, waitStart)
	}
	return g, err
}

// acquired returns the answer to the acquire a, which ended with g or err,
// and counts it; ctx ended means the client went away.
func (s *Service) acquired(ctx context.Context, a *acquireCall, g driver.Grant, err error) (Grant, error) {
	elapsed := time.Since(a.start).Seconds()
	if err != nil {
		result := s.m.acquireError
		if errors.Is(err, fence.ErrNotAcquired) {
			result = s.m.acquireHeld
		}
		result.Observe(elapsed)
		return Grant{}, s.kindCause(a.req, err)
	}
	if ctx.Err() != nil {
		s.wentAway(a, g)
		s.m.acquireError.Observe(elapsed)
		return Grant{}, Because(ctx.Err(), "client went away")
	}
	granted := grantedAt(g, a.start)
	s.m.grants.Inc()
	s.m.acquireGranted.Observe(elapsed)
	s.held.set(a.name, g.ID, granted.Add(a.ttl))
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("granted", "lock", a.name, "token", uint64(g.Token), "ttl", a.ttl, "slot", g.Slot)
	}
	out := Grant{Name: a.name, Token: g.Token, ID: g.ID, TTL: a.ttl, Waited: granted.Sub(a.start)}
	if a.limit > 1 {
		slot := g.Slot
		out.Slot = &slot
	}
	return out, nil
}

// wentAway disposes of the grant g of an acquire a whose client went away
// before the answer. Without a request id nobody will ever know its lease id,
// so it is released now instead of at expiry. With one, the client may be
// retrying on another server (its attempt timed out, its connection was reset),
// which finds the grant by its request id and returns it with a full TTL: it is
// never released unconditionally here (P6 through retries), whatever the store
// declares. A store that records which grants a retry claimed
// (driver.UnclaimedReleaser) releases it only if no retry has, in one store
// operation that the claim is serialized with; on any other store, or if that
// fails, it is left to expire (a client that gives up also sends an abandon,
// which frees it early).
func (s *Service) wentAway(a *acquireCall, g driver.Grant) {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if a.req.RequestID == "" {
		rerr := s.cfg.Locker.Release(rctx, a.name, g.ID)
		s.log.Info("released a grant whose client went away", "lock", a.name, "token", uint64(g.Token), "err", rerr)
		return
	}
	ur, ok := s.cfg.Locker.(driver.UnclaimedReleaser)
	if !ok {
		s.log.Info("left a grant whose client went away to expire or to its retry", "lock", a.name, "token", uint64(g.Token))
		return
	}
	released, err := ur.ReleaseUnclaimed(rctx, a.name, g.ID, a.req.RequestID)
	switch {
	case released && err == nil:
		s.log.Info("released a grant whose client went away and that no retry claimed", "lock", a.name, "token", uint64(g.Token))
	default:
		s.log.Info("left a grant whose client went away to its retry or to expire", "lock", a.name, "token", uint64(g.Token), "err", err)
	}
}

// checkKind validates the kind of grant an acquire asks for: "limit" 1 to
// fence.MaxLimit, "shared" not with a limit above 1 (invalid), and a kind the store
// declares (fence.FeaturesOf; ErrNotImplemented otherwise).
func (s *Service) checkKind(req AcquireRequest) error {
	limit := 0
	if req.Limit != nil {
		limit = *req.Limit
		if err := fence.ValidateLimit(limit); err != nil {
			return err
		}
	}
	if req.Shared && limit > 1 {
		return &fence.InvalidError{Field: "shared", Value: "true", Reason: fmt.Sprintf("cannot be combined with limit %d: a semaphore's permits are not shared", limit)}
	}
	if kind, declared := s.kindOf(req); kind != "" && !declared {
		return kindUnsupported(kind)
	}
	return nil
}

// kindOf names what req asks for beyond a lock ("" for a lock) and says whether
// the store declares it.
func (s *Service) kindOf(req AcquireRequest) (kind string, declared bool) {
	f := fence.FeaturesOf(s.cfg.Locker)
	switch {
	case req.Limit != nil && *req.Limit > 1:
		return `semaphores ("limit")`, f.Semaphores
	case req.Shared:
		return `shared locks ("shared")`, f.Shared
	}
	return "", true
}

func kindUnsupported(kind string) error {
	return Because(ErrNotImplemented, "%s are not supported by this server's store", kind)
}

// kindCause returns an acquire's error, with the store's refusal of the kind of
// grant as kindUnsupported's cause: a store (a wrapper of one, say) may declare a
// kind and refuse it all the same.
func (s *Service) kindCause(req AcquireRequest, err error) error {
	var cause *causeError
	if kind, _ := s.kindOf(req); kind != "" && errors.Is(err, fence.ErrNotImplemented) && !errors.As(err, &cause) {
		return kindUnsupported(kind)
	}
	return err
}

// grant acquires name for a remote holder. A driver.Granter grants without a
// *fence.Lease; from any other Locker the server takes a lease, whose expiry timer
// runs until its TTL is over although nobody here watches it.
func (s *Service) grant(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, error) {
	if g, ok := s.cfg.Locker.(driver.Granter); ok {
		return g.Grant(ctx, name, ttl, opts...)
	}
	lease, err := s.cfg.Locker.Acquire(ctx, name, ttl, opts...)
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: lease.Token(), ID: lease.ID(), Start: lease.Deadline().Add(-ttl), Slot: lease.Slot()}, nil
}

// grantedAt returns when the backend request that made g was sent, which is when
// the backend started counting its TTL: a holder's deadline is that time plus the
// TTL. It is not when the backend answered: a grant can take a while to be
// acknowledged (an fsync, a Redis WAIT, a Raft commit) after its TTL started, and a
// holder dating its lease from the answer would believe in it for that much too long.
// The result is clamped to [start, now], so a backend on another clock can only make
// the holder's deadline earlier, never later.
func grantedAt(g driver.Grant, start time.Time) time.Time {
	t := g.Start
	if now := time.Now(); t.After(now) {
		t = now
	}
	if t.Before(start) {
		t = start
	}
	return t
}

// heldAtEnd returns the answer to a wait that ended with err (ErrNotAcquired) with
// the time the lock has left as of now, the wait's end (see heldNow). The
// backend's *HeldError describes its last try, possibly when the wait began:
// without an Inspector, the time since the wait began comes off its figure, which
// can only say the lock expires sooner than it does, never later. waitStart is
// when the waiting Acquire was called.
func (s *Service) heldAtEnd(ctx context.Context, name string, err error, waitStart time.Time) error {
	var held *fence.HeldError
	if !errors.As(err, &held) {
		return err
	}
	left := held.ExpiresIn - time.Since(waitStart)
	if held.ExpiresIn <= 0 || left <= 0 {
		left = 0 // unknown: the holder renewed, or the lock is about to be free
	}
	return s.heldNow(ctx, name, held.Limit, &fence.HeldError{Name: name, ExpiresIn: left, Limit: held.Limit})
}

// heldNow returns the *fence.HeldError (fence.ErrNotAcquired) of an acquire of
// name (a semaphore of limit permits, or 0) that did not get its turn, with the
// time the lock has left as the Locker reports it now (Inspect), or else
// fallback's figure (none if fallback is nil). When Inspect shows live leases of
// another limit it returns their *fence.LimitError instead, as the store's try
// would have: a wrong limit is refused whether or not the name has waiters.
func (s *Service) heldNow(ctx context.Context, name string, limit int, fallback *fence.HeldError) error {
	if in, ok := s.cfg.Locker.(fence.Inspector); ok {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		info, err := in.Inspect(ictx, name)
		cancel()
		if err == nil {
			if err := limitMismatch(name, info, limit); err != nil {
				return err
			}
			return &fence.HeldError{Name: name, ExpiresIn: heldFor(info, limit), Limit: limit}
		}
	}
	if fallback != nil {
		return fallback
	}
	return &fence.HeldError{Name: name, Limit: limit}
}

// limitMismatch returns the *fence.LimitError of an acquire of limit permits (0
// for a lock or a shared lease, which count as limit 1) on name, whose live
// leases, as info shows them, have another limit; nil if they agree or none
// is live. It is driver.Decide's rule, for an answer the server gives without
// a try.
func limitMismatch(name string, info fence.LockInfo, limit int) error {
	if !info.Held {
		return nil
	}
	if held, want := max(info.Limit, 1), max(limit, 1); held != want {
		return &fence.LimitError{Name: name, Limit: want, Held: held}
	}
	return nil
}

// heldFor is how long info says an acquire of a semaphore of limit (0 for a
// lock) stays held at most: until the first permit expires, for a semaphore;
// until the last lease expires, for an exclusive acquire of a shared lock; the
// holder's time left, for a lock; 0 (unknown) if freed since.
func heldFor(info fence.LockInfo, limit int) time.Duration {
	if !info.Held {
		return 0
	}
	left := info.ExpiresIn
	for _, h := range info.Holders {
		if limit > 1 {
			left = min(left, h.ExpiresIn)
		} else {
			left = max(left, h.ExpiresIn)
		}
	}
	return left
}

// park counts a request about to wait and returns the function that ends its wait,
// or an error of ErrBusy (which matches fence.ErrUnavailable) when
// Config.MaxWaiters requests are waiting already.
func (s *Service) park() (unpark func(), err error) {
	n := s.waiting.Add(1)
	if limit := s.cfg.MaxWaiters; limit > 0 && n > int64(limit) {
		s.waiting.Add(-1)
		return nil, Because(ErrBusy, "too many requests waiting: the server's limit is %d waiting acquires and blocking queries at once; retry later", limit)
	}
	return func() { s.waiting.Add(-1) }, nil
}

// blockingQuery answers a blocking query on name: at once with the state if its
// index differs from q.index, else with the state after the next change (an
// acquire, release, expiry, revoke or heal), or, when q.wait passes first, with
// the state as it is then (a fresh read, so its time left is current). It is
// built on the store's fence.Watcher: one watch per request, which in process
// (bolt, inmem) is a subscription in memory and on a network store is what that
// store's Watch costs (a subscription to the store's change messages and a read
// of the lock, each time it changes). It ends early, with ErrShuttingDown, when
// the service drains. A store without a Watcher is ErrNotImplemented.
func (s *Service) blockingQuery(ctx context.Context, in fence.Inspector, name string, index uint64, wait time.Duration) (fence.LockInfo, error) {
	wt, ok := s.cfg.Locker.(fence.Watcher)
	if !ok {
		return fence.LockInfo{}, Because(ErrNotImplemented, "blocking queries (index) are not supported by this server's store (it cannot watch a lock)")
	}
	s.m.blocking.Inc()
	defer s.m.blocking.Dec()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	for info, err := range wt.Watch(wctx, name) {
		if err != nil {
			return fence.LockInfo{}, err
		}
		if info.Index() != index {
			return info, nil
		}
	}
	switch {
	case ctx.Err() != nil:
		return fence.LockInfo{}, Because(ctx.Err(), "client went away")
	case s.drainCtx.Err() != nil:
		return fence.LockInfo{}, ErrShuttingDown
	}
	return in.Inspect(ctx, name)
}
