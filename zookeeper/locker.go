package zookeeper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

var (
	_ fence.Locker    = (*Locker)(nil)
	_ fence.Inspector = (*Locker)(nil)
)

// DefaultRoot is the znode under which lock directories live unless Options.Root says
// otherwise.
const DefaultRoot = "/fence/locks"

// DefaultSessionTimeout is the session timeout Open asks for.
const DefaultSessionTimeout = 10 * time.Second

// maxRestarts bounds how often one Acquire starts over after its node vanished under it
// (a session change, or a successor that judged it expired in the instant of its
// promotion).
const maxRestarts = 8

// Options configures a Locker. The zero value (or nil) is usable.
type Options struct {
	// Root is the znode that holds one child per lock name; default DefaultRoot.
	Root string
	// SessionTimeout is what Open asks the server for, and how long NewLocker and Open
	// let a disconnect last before they treat the session as lost (see the package
	// doc); default DefaultSessionTimeout.
	SessionTimeout time.Duration
	// ACL of the znodes created; default zk.WorldACL(zk.PermAll).
	ACL []zk.ACL
	// Clock measures the holders' local deadlines; default driver.SystemClock. Expiry
	// at the server is judged by the ZooKeeper leader's clock, never by this one.
	Clock driver.Clock
}

// Locker is a fence.Locker on ZooKeeper. Each grant is an ephemeral sequential znode
// in the connection's session; its fencing token is the znode's czxid. It is safe for
// concurrent use. See the package documentation for the guarantees.
type Locker struct {
	conn    *zk.Conn
	owned   bool // Close closes conn
	root    string
	acl     []zk.ACL
	clock   driver.Clock
	timeout time.Duration

	mu       sync.Mutex
	closed   bool
	grants   map[string]*grant // by lease id
	lost     map[int64]bool    // sessions known to be lost
	lostWait *time.Timer       // running while disconnected
	stop     chan struct{}
}

// grant is what a Locker remembers of a lease it granted, to end it on session loss.
type grant struct {
	session int64
	lease   *fence.Lease
}

// NewLocker returns a Locker that uses conn. events, if not nil, must be the channel
// zk.Connect returned with conn, and the Locker must be its only reader: it watches it
// for session expiry and for disconnects that last longer than the session timeout,
// and then closes the Done channels of the leases granted in that session. Close does
// not close conn.
func NewLocker(conn *zk.Conn, events <-chan zk.Event, opts *Options) (*Locker, error) {
	return newLocker(conn, events, opts, false)
}

func newLocker(conn *zk.Conn, events <-chan zk.Event, opts *Options, owned bool) (*Locker, error) {
	if conn == nil {
		return nil, fmt.Errorf("zookeeper: new locker: %w", &fence.InvalidError{Field: "conn", Value: "nil", Reason: "is nil"})
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if err := validRoot(o.Root); err != nil {
		return nil, err
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.ACL == nil {
		o.ACL = zk.WorldACL(zk.PermAll)
	}
	if o.Clock == nil {
		o.Clock = driver.SystemClock
	}
	l := &Locker{
		conn: conn, owned: owned, root: strings.TrimSuffix(o.Root, "/"), acl: o.ACL, clock: o.Clock, timeout: o.SessionTimeout,
		grants: map[string]*grant{}, lost: map[int64]bool{}, stop: make(chan struct{}),
	}
	if events != nil {
		go l.watchSession(events)
	}
	return l, nil
}

// Open connects to the ZooKeeper servers ("host:port" each) and returns a Locker that
// owns the connection: Close closes it. It returns fence.ErrUnavailable if no session
// is established within the session timeout, and fence.ErrInvalid for a bad root or an
// empty server list.
func Open(servers []string, opts *Options) (*Locker, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("zookeeper: open: %w", &fence.InvalidError{Field: "servers", Value: "", Reason: "is empty"})
	}
	timeout := DefaultSessionTimeout
	if opts != nil && opts.SessionTimeout > 0 {
		timeout = opts.SessionTimeout
	}
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogger(nopLogger{}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: open %v: %w: %w", servers, fence.ErrUnavailable, err)
	}
	// Wait for the first session, so that a wrong address fails here.
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				conn.Close()
				return nil, fmt.Errorf("zookeeper: open %v: %w: connection closed", servers, fence.ErrUnavailable)
			}
			if ev.State != zk.StateHasSession {
				continue
			}
			l, err := newLocker(conn, events, opts, true)
			if err != nil {
				conn.Close()
				return nil, err
			}
			return l, nil
		case <-wait.C:
			conn.Close()
			return nil, fmt.Errorf("zookeeper: open %v: %w: no session within %v", servers, fence.ErrUnavailable, timeout)
		}
	}
}

// nopLogger silences go-zookeeper's connection log.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// Close stops the Locker; later calls return fence.ErrClosed. Leases it granted stay
// at the server until released or until the session ends: closing an owned connection
// (Open) ends the session, which deletes their nodes at once. It returns nil.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.stop)
	if l.lostWait != nil {
		l.lostWait.Stop()
	}
	l.mu.Unlock()
	if l.owned {
		l.conn.Close()
	}
	return nil
}

// watchSession follows the connection's session: expiry, or a disconnect longer than
// the session timeout, marks the session lost and ends its leases.
func (l *Locker) watchSession(events <-chan zk.Event) {
	last := l.conn.SessionID() // Open consumed the first session event
	for {
		select {
		case <-l.stop:
			return
		case ev, ok := <-events:
			if !ok {
				if last != 0 {
					l.loseSession(last)
				}
				return
			}
			if ev.Type != zk.EventSession {
				continue
			}
			switch ev.State {
			case zk.StateHasSession:
				l.mu.Lock()
				if l.lostWait != nil {
					l.lostWait.Stop()
					l.lostWait = nil
				}
				l.mu.Unlock()
				if id := l.conn.SessionID(); id != 0 {
					if last != 0 && id != last {
						l.loseSession(last)
					}
					last = id
				}
			case zk.StateExpired:
				if last != 0 {
					l.loseSession(last)
				}
			case zk.StateDisconnected:
				// SUSPENDED: not sure yet. LOST once it outlasts the session timeout.
				s := last
				l.mu.Lock()
				if l.lostWait == nil && s != 0 && !l.closed {
					l.lostWait = time.AfterFunc(l.timeout, func() { l.loseSession(s) })
				}
				l.mu.Unlock()
			}
		}
	}
}

// loseSession marks session lost and closes the Done channels of its leases (through a
// Renew that the Locker answers with ErrNotHeld).
func (l *Locker) loseSession(session int64) {
	l.mu.Lock()
	l.lost[session] = true
	var ends []*fence.Lease
	for _, g := range l.grants {
		// Kept in grants: Renew finds the session in lost and answers ErrNotHeld
		// without asking the server, which may be unreachable (LOST).
		if g.session == session {
			ends = append(ends, g.lease)
		}
	}
	l.mu.Unlock()
	for _, lease := range ends {
		go func() { _ = lease.Renew(context.Background(), lease.TTL()) }()
	}
}

func (l *Locker) checkOpen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fence.ErrClosed
	}
	return nil
}

// Acquire grants a lease on name for ttl (see fence.Locker). It creates an ephemeral
// sequential node under the lock's directory; the lowest node holds the lock. Waiting
// watches only the predecessor node. It returns fence.ErrNotAcquired (a
// *fence.HeldError) if the lock stayed held, joined with ctx.Err() when the context
// ended the wait; fence.ErrInvalid for a bad name or TTL; fence.ErrTokenExhausted if the
// node's czxid is above fence.MaxToken; fence.ErrUnavailable if ZooKeeper cannot be
// reached; fence.ErrClosed after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	if err := driver.ValidateName(name); err != nil {
		return nil, fmt.Errorf("zookeeper: acquire: %w", err)
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return nil, fmt.Errorf("zookeeper: acquire %q: %w", name, err)
	}
	if err := l.checkOpen(); err != nil {
		return nil, fmt.Errorf("zookeeper: acquire %q: %w", name, err)
	}
	o := driver.ApplyOptions(opts...)
	var waitEnd <-chan time.Time
	if o.Wait > 0 && o.Wait != fence.WaitForever {
		t := time.NewTimer(o.Wait)
		defer t.Stop()
		waitEnd = t.C
	}
	dir := l.dir(name)
	for range maxRestarts {
		lease, err := l.acquireOnce(ctx, name, dir, ttl, o, waitEnd)
		if errors.Is(err, errRestart) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("zookeeper: acquire %q: %w", name, err)
		}
		return lease, nil
	}
	return nil, fmt.Errorf("zookeeper: acquire %q: %w: its node kept vanishing (session changes?)", name, fence.ErrUnavailable)
}

// errRestart means the caller's node vanished: Acquire starts over with a new node.
var errRestart = errors.New("zookeeper: node vanished")

func (l *Locker) acquireOnce(ctx context.Context, name, dir string, ttl time.Duration, o driver.AcquireOptions, waitEnd <-chan time.Time) (*fence.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(fence.ErrNotAcquired, err)
	}
	secret := driver.NewLeaseID()
	tag := ownerTag(secret)
	start := l.clock.Now()
	session := l.conn.SessionID()
	path, err := l.create(dir, tag, holdData(ttl))
	if err != nil {
		return nil, err
	}
	me, ok := parseNode(path[len(dir)+1:])
	if !ok {
		l.deleteQuietly(path)
		return nil, fmt.Errorf("%w: server returned node %q", fence.ErrUnavailable, path)
	}
	leaseID := secret + "-" + me.seqText
	// The node's czxid (the token) never changes: ask for it now, pipelined with the
	// first Children call on the same connection, so the fast path costs one round
	// trip less.
	type stat struct {
		ok  bool
		st  *zk.Stat
		err error
	}
	statc := make(chan stat, 1)
	go func() {
		ok, st, err := l.conn.Exists(path)
		statc <- stat{ok, st, err}
	}()
	var czxid *stat
	nodeStat := func() stat {
		if czxid == nil {
			r := <-statc
			czxid = &r
		}
		return *czxid
	}
	waiting := false // our node's data says "w" (not yet a holder)
	version := int32(0)
	giveUp := func(cause error) error {
		l.deleteQuietly(path)
		return cause
	}
	// The holder we wait behind, as last read. When our timer for its expiry fires,
	// it is judged again from this (one write to read the leader's clock, one delete)
	// without listing the directory or reading the holder again: no node can come
	// between it and ours, and a renewal meanwhile changed its version, so the
	// delete fails and the loop starts over.
	var (
		fired    <-chan zk.Event // the watch on our predecessor
		pred     string
		predStat *zk.Stat
		predTTL  time.Duration
		recheck  bool // our timer for the holder's expiry fired
		lowest   bool // our predecessor is gone and our node waits: we hold the lock
	)
	// sleep waits for the watch, the holder's expiry (if expiresIn > 0) or the end of
	// the wait; it reports whether the expiry timer fired.
	sleep := func(expiresIn time.Duration) (bool, error) {
		var expiry <-chan time.Time
		if expiresIn > 0 {
			t := time.NewTimer(expiresIn)
			defer t.Stop()
			expiry = t.C
		}
		select {
		case <-fired:
			return false, nil
		case <-expiry:
			return true, nil
		case <-waitEnd:
			return false, giveUp(&fence.HeldError{Name: name})
		case <-ctx.Done():
			return false, giveUp(errors.Join(&fence.HeldError{Name: name}, ctx.Err()))
		case <-l.stop:
			return false, giveUp(fence.ErrClosed)
		}
	}
	for {
		if recheck {
			recheck = false
			left, gone, err := l.takeOver(dir, pred, predStat, predTTL)
			switch {
			case err != nil:
				return nil, giveUp(err)
			case gone:
				lowest = true // we slept, so our node says "w"
			case left > 0:
				// Not yet by the leader's clock (our timer ran ahead of it).
				if recheck, err = sleep(left); err != nil {
					return nil, err
				}
				continue
			}
		}
		idx := 0
		var nodes []node
		if lowest {
			lowest = false // the version check of the Set below proves the node is ours
		} else {
			kids, _, err := l.conn.Children(dir)
			if err != nil {
				return nil, giveUp(zkErr(err))
			}
			nodes = parseNodes(kids)
			idx = -1
			for i, n := range nodes {
				if n.name == me.name {
					idx = i
					break
				}
			}
			if idx < 0 {
				return nil, errRestart
			}
		}
		if idx == 0 {
			if waiting {
				start = l.clock.Now()
				if _, err := l.conn.Set(path, holdData(ttl), version); err != nil {
					if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
						l.deleteQuietly(path)
						return nil, errRestart
					}
					return nil, giveUp(zkErr(err))
				}
			}
			ns := nodeStat()
			if ns.err != nil {
				return nil, giveUp(zkErr(ns.err))
			}
			if !ns.ok {
				return nil, errRestart
			}
			st := ns.st
			if st.Czxid <= 0 || fence.Token(st.Czxid) > fence.MaxToken {
				return nil, giveUp(fmt.Errorf("%w: czxid %#x is above %d", fence.ErrTokenExhausted, st.Czxid, uint64(fence.MaxToken)))
			}
			lease := driver.NewLease(driver.LeaseConfig{
				Locker: l, Name: name, Token: fence.Token(st.Czxid), ID: leaseID, TTL: ttl,
				Start: start, Clock: l.clock, AutoRenew: o.AutoRenew,
			})
			l.mu.Lock()
			l.grants[leaseID] = &grant{session: session, lease: lease}
			l.mu.Unlock()
			return lease, nil
		}
		pred = dir + "/" + nodes[idx-1].name
		var expiresIn time.Duration
		if idx == 1 {
			// The predecessor holds the lock: watch it, and judge its TTL by the
			// leader's clock.
			data, st, ch, err := l.conn.GetW(pred)
			if errors.Is(err, zk.ErrNoNode) {
				lowest = waiting
				continue
			}
			if err != nil {
				return nil, giveUp(zkErr(err))
			}
			fired = ch
			if pttl, held := parseHold(data); held {
				left, gone, err := l.takeOver(dir, pred, st, pttl)
				switch {
				case err != nil:
					return nil, giveUp(err)
				case gone:
					lowest = waiting
					continue
				case left <= 0:
					continue // renewed meanwhile: read it again
				}
				expiresIn, predStat, predTTL = left, st, pttl
			}
		} else {
			ok, _, ch, err := l.conn.ExistsW(pred)
			if err != nil {
				return nil, giveUp(zkErr(err))
			}
			if !ok {
				continue
			}
			fired = ch
		}
		if o.Wait == 0 {
			return nil, giveUp(&fence.HeldError{Name: name, ExpiresIn: expiresIn})
		}
		if !waiting {
			st, err := l.conn.Set(path, []byte(waitData), version)
			if err != nil {
				if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
					l.deleteQuietly(path)
					return nil, errRestart
				}
				return nil, giveUp(zkErr(err))
			}
			waiting, version = true, st.Version
		}
		expired, err := sleep(expiresIn)
		if err != nil {
			return nil, err
		}
		recheck = expired
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

// create makes our ephemeral sequential node, creating the lock's directory if needed.
// If the connection drops during the create, it looks for the node by its owner tag, so
// that no orphan node blocks the lock until the session ends.
func (l *Locker) create(dir, tag string, data []byte) (string, error) {
	prefix := dir + "/n-" + tag + "-"
	for attempt := 0; ; attempt++ {
		path, err := l.conn.Create(prefix, data, zk.FlagEphemeral|zk.FlagSequence, l.acl)
		switch {
		case err == nil:
			return path, nil
		case errors.Is(err, zk.ErrNoNode) && attempt < 3:
			if err := l.ensurePath(dir); err != nil {
				return "", err
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

// ensurePath creates path and its ancestors as persistent nodes.
func (l *Locker) ensurePath(path string) error {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := ""
	for _, p := range parts {
		cur += "/" + p
		if _, err := l.conn.Create(cur, nil, 0, l.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return zkErr(err)
		}
	}
	return nil
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

// deleteQuietly removes our node, in the background if the first try fails (a waiter
// node left behind would block the lock until the session ends).
func (l *Locker) deleteQuietly(path string) {
	err := l.conn.Delete(path, -1)
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return
	}
	go func() {
		for i := 0; i < 10; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(time.Duration(i+1) * 100 * time.Millisecond):
			}
			err := l.conn.Delete(path, -1)
			if err == nil || errors.Is(err, zk.ErrNoNode) {
				return
			}
		}
	}()
}

// nodePath returns the node of leaseID under name's directory, or ok false if the lease
// id is not of this package's form (then no lease of it can exist).
func (l *Locker) nodePath(name, leaseID string) (string, bool) {
	secret, seq, ok := strings.Cut(leaseID, "-")
	if !ok || len(secret) != 32 || len(seq) < 10 {
		return "", false
	}
	if _, err := hex.DecodeString(secret); err != nil {
		return "", false
	}
	if _, err := strconv.ParseInt(seq, 10, 64); err != nil {
		return "", false
	}
	return l.dir(name) + "/n-" + ownerTag(secret) + "-" + seq, true
}

func (l *Locker) checkLease(op, name, leaseID string) error {
	if err := driver.ValidateName(name); err != nil {
		return fmt.Errorf("zookeeper: %s: %w", op, err)
	}
	if err := driver.ValidateLeaseID(leaseID); err != nil {
		return fmt.Errorf("zookeeper: %s %q: %w", op, name, err)
	}
	if err := l.checkOpen(); err != nil {
		return fmt.Errorf("zookeeper: %s %q: %w", op, name, err)
	}
	return nil
}

// lostSession reports whether leaseID was granted here in a session known to be lost,
// or in one other than the connection's current session.
func (l *Locker) lostSession(leaseID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.grants[leaseID]
	if g == nil {
		return false
	}
	cur := l.conn.SessionID()
	return l.lost[g.session] || (cur != 0 && g.session != 0 && cur != g.session)
}

// Renew extends the lease to ttl from now by the ZooKeeper leader's clock (it rewrites
// the node's data, which moves its mtime). It returns fence.ErrNotHeld if the node is
// gone (released, taken over after expiry, session ended), if its TTL had already
// passed by the leader's clock, or if the session it was granted in is known here to be
// lost; fence.ErrInvalid for bad arguments; fence.ErrUnavailable if ZooKeeper cannot be
// reached.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := l.checkLease("renew", name, leaseID); err != nil {
		return err
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("zookeeper: renew %q: %w", name, err)
	}
	notHeld := fmt.Errorf("zookeeper: renew %q: %w", name, fence.ErrNotHeld)
	path, ok := l.nodePath(name, leaseID)
	if !ok {
		return notHeld
	}
	if l.lostSession(leaseID) {
		l.forget(leaseID)
		return fmt.Errorf("zookeeper: renew %q: %w: its ZooKeeper session was lost", name, fence.ErrNotHeld)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zookeeper: renew %q: %w: %w", name, fence.ErrUnavailable, err)
	}
	data, st, err := l.conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		l.forget(leaseID)
		return notHeld
	}
	if err != nil {
		return fmt.Errorf("zookeeper: renew %q: %w", name, zkErr(err))
	}
	old, held := parseHold(data)
	if !held {
		return notHeld // a waiting node: not a grant
	}
	st2, err := l.conn.Set(path, holdData(ttl), st.Version)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		l.forget(leaseID)
		return notHeld
	}
	if err != nil {
		return fmt.Errorf("zookeeper: renew %q: %w", name, zkErr(err))
	}
	if time.UnixMilli(st2.Mtime).After(time.UnixMilli(st.Mtime).Add(old)) {
		// The TTL had passed by the leader's clock before this renewal: the lease is
		// over even though no waiter took it over yet.
		l.deleteQuietly(path)
		l.forget(leaseID)
		return fmt.Errorf("zookeeper: renew %q: %w: its TTL passed before the renewal", name, fence.ErrNotHeld)
	}
	return nil
}

// Release deletes the lease's node, which wakes the next waiter (it watches it). It
// returns fence.ErrNotHeld if the node is gone (released before, taken over after
// expiry, session ended); fence.ErrInvalid for bad arguments; fence.ErrUnavailable if
// ZooKeeper cannot be reached.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := l.checkLease("release", name, leaseID); err != nil {
		return err
	}
	notHeld := fmt.Errorf("zookeeper: release %q: %w", name, fence.ErrNotHeld)
	path, ok := l.nodePath(name, leaseID)
	if !ok {
		return notHeld
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zookeeper: release %q: %w: %w", name, fence.ErrUnavailable, err)
	}
	err := l.conn.Delete(path, -1)
	if errors.Is(err, zk.ErrNoNode) {
		l.forget(leaseID)
		return notHeld
	}
	if err != nil {
		return fmt.Errorf("zookeeper: release %q: %w", name, zkErr(err))
	}
	l.forget(leaseID)
	return nil
}

func (l *Locker) forget(leaseID string) {
	l.mu.Lock()
	delete(l.grants, leaseID)
	l.mu.Unlock()
}

// Inspect reports the state of name: Held and Token (the holder's czxid) from the
// lowest node, ExpiresIn by the leader's clock, and LastToken as the directory's pzxid
// (the zxid of its last child creation or deletion), which is at least every token
// issued for name and below every later one. A lock never acquired has LastToken 0. It
// returns fence.ErrInvalid for a bad name and fence.ErrUnavailable if ZooKeeper cannot
// be reached.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := driver.ValidateName(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("zookeeper: inspect: %w", err)
	}
	if err := l.checkOpen(); err != nil {
		return fence.LockInfo{}, fmt.Errorf("zookeeper: inspect %q: %w", name, err)
	}
	info, err := l.inspect(name)
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("zookeeper: inspect %q: %w", name, err)
	}
	return info, nil
}

func (l *Locker) inspect(name string) (fence.LockInfo, error) {
	info := fence.LockInfo{Name: name}
	dir := l.dir(name)
	for attempt := 0; attempt < 3; attempt++ {
		kids, st, err := l.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return info, nil
		}
		if err != nil {
			return info, zkErr(err)
		}
		info.LastToken = fence.Token(st.Pzxid)
		nodes := parseNodes(kids)
		if len(nodes) == 0 {
			return info, nil
		}
		data, nst, err := l.conn.Get(dir + "/" + nodes[0].name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return info, zkErr(err)
		}
		ttl, held := parseHold(data)
		if !held {
			// A promoted waiter that has not claimed yet: held, expiry unknown.
			info.Held, info.Token = true, fence.Token(nst.Czxid)
			return info, nil
		}
		now, err := l.serverNow(dir)
		if err != nil {
			return info, err
		}
		left := time.UnixMilli(nst.Mtime).Add(ttl).Sub(now)
		if left <= 0 {
			return info, nil // expired, not taken over yet
		}
		info.Held, info.Token, info.ExpiresIn = true, fence.Token(nst.Czxid), left
		return info, nil
	}
	return info, fmt.Errorf("%w: lock nodes kept changing", fence.ErrUnavailable)
}

// DefaultListLimit is how many locks List returns when limit <= 0.
const DefaultListLimit = 1000

// List returns the locks whose names start with prefix, held or not, in name order, at
// most limit (DefaultListLimit if limit <= 0). It reads every lock directory's name, so
// it costs one round trip plus one Inspect per lock returned. It returns
// fence.ErrUnavailable if ZooKeeper cannot be reached.
func (l *Locker) List(ctx context.Context, prefix string, limit int) ([]fence.LockInfo, error) {
	if err := l.checkOpen(); err != nil {
		return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, err)
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	kids, _, err := l.conn.Children(l.root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, zkErr(err))
	}
	var names []string
	for _, k := range kids {
		n, ok := decodeName(k)
		if ok && strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) > limit {
		names = names[:limit]
	}
	out := make([]fence.LockInfo, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("zookeeper: list %q: %w: %w", prefix, fence.ErrUnavailable, err)
		}
		info, err := l.inspect(n)
		if err != nil {
			return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, err)
		}
		out = append(out, info)
	}
	return out, nil
}

// dir returns the lock directory of name.
func (l *Locker) dir(name string) string { return l.root + "/" + encodeName(name) }

// ownerTag is the part of a node's name derived from the lease's secret: readers of the
// tree see it, but cannot derive the lease id from it.
func ownerTag(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:8])
}

// Node data: "h <ttl ms>" for a holder (or a node that may become one at once), "w"
// for a waiter.
const waitData = "w"

func holdData(ttl time.Duration) []byte {
	return []byte("h " + strconv.FormatInt(ttl.Milliseconds(), 10))
}

func parseHold(data []byte) (time.Duration, bool) {
	s, ok := strings.CutPrefix(string(data), "h ")
	if !ok {
		return 0, false
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// node is a lock node's name parsed: "n-<tag>-<sequence>".
type node struct {
	name    string
	seqText string
	seq     int64
}

func parseNode(name string) (node, bool) {
	i := strings.LastIndexByte(name, '-')
	if !strings.HasPrefix(name, "n-") || i < 2 {
		return node{}, false
	}
	seq, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return node{}, false
	}
	return node{name: name, seqText: name[i+1:], seq: seq}, true
}

// parseNodes returns the lock nodes among kids in sequence order; other names are
// ignored.
func parseNodes(kids []string) []node {
	out := make([]node, 0, len(kids))
	for _, k := range kids {
		if n, ok := parseNode(k); ok {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// zkErr translates a go-zookeeper error into the fence sentinels, keeping the original.
func zkErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%w: %w", fence.ErrClosed, err)
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
}

func validRoot(root string) error {
	if !strings.HasPrefix(root, "/") || root == "/" || strings.Contains(root, "//") {
		return fmt.Errorf("zookeeper: %w", &fence.InvalidError{Field: "root", Value: root, Reason: `must be an absolute znode path other than "/"`})
	}
	return nil
}
