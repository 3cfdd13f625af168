package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// maxRestarts bounds how often one Acquire starts over after its node vanished under it
// (a session change, or a successor that judged it expired in the instant of its
// promotion).
const maxRestarts = 8

// Acquire grants a lease on name for ttl (see fence.Locker). It creates an ephemeral
// sequential node under the lock's directory; the lowest node holds the lock. A waiter
// (fence.WithWait) keeps its node, so grants are FIFO; it watches only its
// predecessor, and the one right behind the holder deletes the holder's node once its
// TTL has passed by the ZooKeeper leader's clock. A call that ends without a grant
// deletes its node.
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the lock
// stayed held, also matching ctx.Err() when the context ended the wait;
// fence.ErrInvalid for a bad name or TTL; fence.ErrTokenExhausted if the node's czxid
// is above fence.MaxToken; fence.ErrUnavailable if ZooKeeper cannot be reached or the
// node kept vanishing; fence.ErrClosed after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	a := &acquisition{l: l, stop: make(chan struct{})}
	defer a.end()
	lease, err := l.engine.Acquire(ctx, name, ttl, opts, a.try)
	if err != nil {
		return nil, err
	}
	l.remember(a.leaseID, a.session, lease)
	return lease, nil
}

// acquisition is one Acquire call across its tries: its node, kept from try to try
// (its place in the queue), and the holder it waits behind.
type acquisition struct {
	l    *Locker
	dir  string
	stop chan struct{} // closed when the call ends: stops the watch relays

	// Our node; path is "" before it is created and after it vanished.
	path     string
	me       node
	leaseID  string
	session  int64
	start    time.Time       // when the request that may grant was sent
	stat     func() nodeStat // the node's stat, asked for right after the create
	waiting  bool            // our node's data says "w" (not yet a holder)
	version  int32           // of our node's data
	granted  bool
	restarts int

	// The holder we wait behind, as last read, and the watch on our predecessor.
	// When the Engine wakes us for the holder's expiry (not by the watch), the
	// holder is judged again from predStat (one write to read the leader's clock,
	// one delete) without listing the directory or reading the holder again: no
	// node can come between it and ours, and a renewal meanwhile changed its
	// version, so the delete fails and the look starts over.
	pred     string
	predStat *zk.Stat // nil: no holder's expiry to judge
	predTTL  time.Duration
	wake     chan struct{} // closes when the watch on pred fires
}

// nodeStat is the answer to Exists on our node.
type nodeStat struct {
	ok  bool
	st  *zk.Stat
	err error
}

// errRestart means our node vanished: the acquisition starts over with a new node.
var errRestart = errors.New("zookeeper: node vanished")

// try is the acquisition's driver.TryFunc: it looks at the queue once (creating our
// node on the first try), and grants, or reports the holder's time left and the
// watch that fires when our predecessor changes.
func (a *acquisition) try(ctx context.Context, r *driver.Request) (driver.Result, error) {
	if a.dir == "" {
		a.dir = a.l.dir(r.Name)
	}
	for {
		res, err := a.look(r)
		if !errors.Is(err, errRestart) {
			if err != nil {
				a.drop()
			}
			return res, err
		}
		a.path, a.waiting, a.version, a.predStat, a.wake = "", false, 0, nil, nil
		if a.restarts++; a.restarts == maxRestarts {
			return driver.Result{}, fmt.Errorf("%w: its node kept vanishing (session changes?)", fence.ErrUnavailable)
		}
		if err := ctx.Err(); err != nil {
			return driver.Result{}, err
		}
	}
}

// end deletes our node unless it was granted, and stops the watch relays.
func (a *acquisition) end() {
	close(a.stop)
	a.drop()
}

// drop deletes our node unless it was granted.
func (a *acquisition) drop() {
	if a.path != "" && !a.granted {
		a.l.deleteQuietly(a.path)
	}
	a.path = ""
}

func (a *acquisition) look(r *driver.Request) (driver.Result, error) {
	l := a.l
	if a.path == "" {
		if err := a.create(r); err != nil {
			return driver.Result{}, err
		}
	}
	lowest := false // our predecessor is gone and our node waits: we hold the lock
	if st := a.predStat; st != nil && !isClosed(a.wake) {
		// Woken for the holder's expiry, not by the watch.
		a.predStat = nil
		left, gone, err := l.takeOver(a.dir, a.pred, st, a.predTTL)
		switch {
		case err != nil:
			return driver.Result{}, err
		case gone:
			lowest = true // we waited, so our node says "w"
		case left > 0:
			// Not yet by the leader's clock (the Engine's timer ran ahead of it).
			a.predStat = st
			return driver.Result{ExpiresIn: left, Wake: a.wake}, nil
		}
	}
	for {
		a.predStat = nil
		idx := 0
		var nodes []node
		if lowest {
			lowest = false // the version check of the Set in claim proves the node is ours
		} else {
			kids, _, err := l.conn.Children(a.dir)
			if err != nil {
				return driver.Result{}, zkErr(err)
			}
			nodes = parseNodes(kids)
			idx = -1
			for i, n := range nodes {
				if n.name == a.me.name {
					idx = i
					break
				}
			}
			if idx < 0 {
				return driver.Result{}, errRestart
			}
		}
		if idx == 0 {
			return a.claim(r)
		}
		a.pred = a.dir + "/" + nodes[idx-1].name
		var expiresIn time.Duration
		if idx == 1 {
			// The predecessor holds the lock: watch it, and judge its TTL by the
			// leader's clock.
			data, st, ch, err := l.conn.GetW(a.pred)
			if errors.Is(err, zk.ErrNoNode) {
				lowest = a.waiting
				continue
			}
			if err != nil {
				return driver.Result{}, zkErr(err)
			}
			a.watch(ch)
			if pd := parseData(data); pd.held {
				left, gone, err := l.takeOver(a.dir, a.pred, st, pd.ttl)
				switch {
				case err != nil:
					return driver.Result{}, err
				case gone:
					lowest = a.waiting
					continue
				case left <= 0:
					continue // renewed meanwhile: read it again
				}
				expiresIn, a.predStat, a.predTTL = left, st, pd.ttl
			}
		} else {
			ok, _, ch, err := l.conn.ExistsW(a.pred)
			if err != nil {
				return driver.Result{}, zkErr(err)
			}
			if !ok {
				continue
			}
			a.watch(ch)
		}
		held := driver.Result{ExpiresIn: expiresIn, Wake: a.wake}
		if expiresIn == 0 {
			// Only the watch can tell: look again after a session timeout at the
			// latest, in case it was lost.
			held.Retry = l.timeout
		}
		if !r.Waiting || a.waiting {
			return held, nil // a call that does not wait deletes its node as it ends
		}
		st, err := l.conn.Set(a.path, waitData(r.Options.Owner), a.version)
		if err != nil {
			return driver.Result{}, a.vanished(err)
		}
		a.waiting, a.version = true, st.Version
		return held, nil
	}
}

// create makes our node, with holder's data for r's TTL and owner, and asks for its
// stat in the background: the czxid (the token) never changes, and the question is
// pipelined with the first Children call on the same connection, so the fast path
// costs one round trip less.
func (a *acquisition) create(r *driver.Request) error {
	l := a.l
	secret := driver.NewLeaseID()
	a.start = l.clock.Now()
	a.session = l.conn.SessionID()
	path, err := l.create(a.dir, ownerTag(secret), holdData(r.TTL, r.Options.Owner))
	if err != nil {
		return err
	}
	me, ok := parseNode(path[len(a.dir)+1:])
	if !ok {
		l.deleteQuietly(path)
		return fmt.Errorf("%w: server returned node %q", fence.ErrUnavailable, path)
	}
	a.path, a.me, a.leaseID = path, me, secret+"-"+me.seqText
	statc := make(chan nodeStat, 1)
	go func() {
		ok, st, err := l.conn.Exists(path)
		statc <- nodeStat{ok, st, err}
	}()
	var got *nodeStat
	a.stat = func() nodeStat {
		if got == nil {
			s := <-statc
			got = &s
		}
		return *got
	}
	return nil
}

// claim grants the lock to our node, the lowest: a waiter's node first gets the
// holder's data for r (with its version, which proves the node is still ours).
func (a *acquisition) claim(r *driver.Request) (driver.Result, error) {
	l := a.l
	if a.waiting {
		a.start = l.clock.Now()
		if _, err := l.conn.Set(a.path, holdData(r.TTL, r.Options.Owner), a.version); err != nil {
			return driver.Result{}, a.vanished(err)
		}
	}
	ns := a.stat()
	if ns.err != nil {
		return driver.Result{}, zkErr(ns.err)
	}
	if !ns.ok {
		return driver.Result{}, errRestart
	}
	if ns.st.Czxid <= 0 || fence.Token(ns.st.Czxid) > fence.MaxToken {
		return driver.Result{}, fmt.Errorf("%w: czxid %#x is above %d", fence.ErrTokenExhausted, ns.st.Czxid, uint64(fence.MaxToken))
	}
	a.granted = true
	return driver.Result{Token: fence.Token(ns.st.Czxid), Start: a.start, ID: a.leaseID}, nil
}

// vanished is the error of a conditional Set on our node: errRestart (after deleting
// it) if the node is gone or is not as we left it, the translated error otherwise.
func (a *acquisition) vanished(err error) error {
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		a.l.deleteQuietly(a.path)
		return errRestart
	}
	return zkErr(err)
}

// watch makes a.wake close when ch (a ZooKeeper watch) fires, or never if the call
// ends first.
func (a *acquisition) watch(ch <-chan zk.Event) {
	wake := make(chan struct{})
	a.wake = wake
	go func() {
		select {
		case <-ch:
			close(wake)
		case <-a.stop:
		}
	}()
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// takeOver judges the holder's node pred (stat st, TTL pttl) by the ZooKeeper
// leader's clock: if mtime+TTL has not passed, it returns the time until it has; if
// it has, it deletes the node, with st's version so that a renewal in between wins,
// and reports whether the node is gone (deleted by us, or already gone). Left 0 and
// not gone means the holder renewed: read it again.
//
// Both clock readings are whole milliseconds, and the node may have been written up
// to a millisecond after its mtime, so the TTL has surely passed only once the
// leader's clock is past mtime+TTL (as Renew judges it, and as Redis expires keys).
func (l *Locker) takeOver(dir, pred string, st *zk.Stat, pttl time.Duration) (time.Duration, bool, error) {
	now, err := l.serverNow(dir)
	if err != nil {
		return 0, false, err
	}
	if left := time.UnixMilli(st.Mtime).Add(pttl).Sub(now); left >= 0 {
		return left + time.Millisecond, false, nil
	}
	switch err := l.conn.Delete(pred, st.Version); {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		return 0, true, nil
	case errors.Is(err, zk.ErrBadVersion):
		return 0, false, nil
	default:
		return 0, false, zkErr(err)
	}
}

// create makes an ephemeral sequential node with the owner tag tag, creating the
// lock's directory if needed. If the connection drops during the create, it looks for
// the node by its tag, so that no orphan node blocks the lock until the session ends.
func (l *Locker) create(dir, tag string, data []byte) (string, error) {
	prefix := dir + "/n-" + tag + "-"
	for attempt := 0; ; attempt++ {
		path, err := l.conn.Create(prefix, data, zk.FlagEphemeral|zk.FlagSequence, l.acl)
		switch {
		case err == nil:
			return path, nil
		case errors.Is(err, zk.ErrNoNode) && attempt < 3:
			if err := ensurePath(l.conn, l.acl, dir); err != nil {
				return "", zkErr(err)
			}
		case errors.Is(err, zk.ErrConnectionClosed) && attempt < 3:
			kids, _, cerr := l.conn.Children(dir)
			if cerr != nil {
				return "", zkErr(err)
			}
			for _, k := range kids {
				if strings.HasPrefix(k, "n-"+tag+"-") {
					return dir + "/" + k, nil
				}
			}
		default:
			return "", zkErr(err)
		}
	}
}

// serverNow returns the ZooKeeper leader's clock now: the mtime of a write to the lock's
// directory node (its data is unused; nobody watches it, so the write wakes no one).
func (l *Locker) serverNow(dir string) (time.Time, error) {
	st, err := l.conn.Set(dir, nil, -1)
	if err != nil {
		return time.Time{}, zkErr(err)
	}
	return time.UnixMilli(st.Mtime), nil
}
