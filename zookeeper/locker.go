package zookeeper

import (
	"context"
	"errors"
	"fmt"
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
	_ fence.Revoker   = (*Locker)(nil)
	_ fence.Watcher   = (*Locker)(nil)

	_ fence.FeatureLocker = (*Locker)(nil)
)

// DefaultRoot is the znode under which lock directories live unless Options.Root says
// otherwise.
const DefaultRoot = "/fence/locks"

// DefaultSessionTimeout is the session timeout Open asks for.
const DefaultSessionTimeout = 10 * time.Second

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
	// Clock measures the holders' local deadlines and the waits of Acquire; default
	// driver.SystemClock. Expiry at the server is judged by the ZooKeeper leader's
	// clock, never by this one.
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
	engine  driver.Engine

	mu       sync.Mutex
	closed   bool
	grants   map[string]*grant // by lease id
	lost     map[int64]bool    // sessions known to be lost
	lostWait *time.Timer       // running while disconnected
	stop     chan struct{}

	wmu    sync.Mutex
	relays map[string]*relay // Watch's one directory watch per name watched
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
	o, err := opts.resolve("new locker", conn)
	if err != nil {
		return nil, err
	}
	l := &Locker{
		conn: conn, owned: owned, root: o.Root, acl: o.ACL, clock: o.Clock, timeout: o.SessionTimeout,
		grants: map[string]*grant{}, lost: map[int64]bool{}, stop: make(chan struct{}),
		relays: map[string]*relay{},
	}
	l.engine = driver.Engine{
		Backend: "zookeeper", Locker: l, Clock: o.Clock, Closed: l.stop,
		Features: fence.Features{Semaphores: true, Shared: true},
	}
	if events != nil {
		go l.watchSession(events)
	}
	return l, nil
}

// resolve returns the options with their defaults filled in (opts may be nil) and the
// root without a trailing '/'. It returns fence.ErrInvalid, naming the constructor op,
// for a nil conn, and for a bad root.
func (opts *Options) resolve(op string, conn *zk.Conn) (Options, error) {
	if conn == nil {
		return Options{}, fmt.Errorf("zookeeper: %s: %w", op, &fence.InvalidError{Field: "conn", Value: "nil", Reason: "is nil"})
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if err := validRoot(o.Root); err != nil {
		return Options{}, err
	}
	o.Root = strings.TrimSuffix(o.Root, "/")
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.ACL == nil {
		o.ACL = zk.WorldACL(zk.PermAll)
	}
	if o.Clock == nil {
		o.Clock = driver.SystemClock
	}
	return o, nil
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

func (l *Locker) checkOpen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fence.ErrClosed
	}
	return nil
}

// Features reports the kinds of grant beyond locks that the Locker makes:
// semaphores (fence.WithLimit) and shared locks (fence.WithShared), both on the
// queue of sequential nodes that locks use (see the package documentation).
func (l *Locker) Features() fence.Features { return l.engine.Features }

// deleteQuietly removes our node (of dir), with its slot's node if slot >= 0, in the
// background if the first try fails (a waiter node left behind would block the lock
// until the session ends).
func (l *Locker) deleteQuietly(dir, path string, slot int) {
	err := l.removeNode(dir, path, -1, slot)
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
			err := l.removeNode(dir, path, -1, slot)
			if err == nil || errors.Is(err, zk.ErrNoNode) {
				return
			}
		}
	}()
}

func (l *Locker) checkLease(op, name, leaseID string) error {
	if err := driver.ValidateLease(name, leaseID); err != nil {
		return fmt.Errorf("zookeeper: %s: %w", op, err)
	}
	if err := l.checkOpen(); err != nil {
		return fmt.Errorf("zookeeper: %s %q: %w", op, name, err)
	}
	return nil
}

// Renew extends the lease to ttl from now by the ZooKeeper leader's clock (it rewrites
// the node's data with the new TTL and the same owner and slot, which moves its
// mtime). It returns fence.ErrNotHeld if the node is
// gone (released, taken over after expiry, session ended), if its TTL had already
// passed by the leader's clock, or if the session it was granted in is known here to be
// lost; fence.ErrInvalid for bad arguments; fence.ErrUnavailable if ZooKeeper cannot be
// reached.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := l.checkLease("renew", name, leaseID); err != nil {
		return err
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("zookeeper: renew %q: %w", name, err)
	}
	notHeld := fmt.Errorf("zookeeper: renew %q: %w", name, fence.ErrNotHeld)
	path, slot, ok := l.nodePath(name, leaseID)
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
	old := parseData(data)
	if !old.held || old.slotOf() != slot {
		return notHeld // a waiting node, or a permit without that slot: not this grant
	}
	st2, err := l.conn.Set(path, old.withTTL(ttl), st.Version)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		l.forget(leaseID)
		return notHeld
	}
	if err != nil {
		return fmt.Errorf("zookeeper: renew %q: %w", name, zkErr(err))
	}
	if time.UnixMilli(st2.Mtime).After(time.UnixMilli(st.Mtime).Add(old.ttl)) {
		// The TTL had passed by the leader's clock before this renewal: the lease is
		// over even though no waiter took it over yet.
		l.deleteQuietly(l.dir(name), path, slot)
		l.forget(leaseID)
		return fmt.Errorf("zookeeper: renew %q: %w: its TTL passed before the renewal", name, fence.ErrNotHeld)
	}
	return nil
}

// Release deletes the lease's node (and a permit's slot node with it, in one
// transaction), which wakes the next waiter (it watches it). It
// returns fence.ErrNotHeld if the node is gone (released before, taken over after
// expiry, session ended); fence.ErrInvalid for bad arguments; fence.ErrUnavailable if
// ZooKeeper cannot be reached.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := l.checkLease("release", name, leaseID); err != nil {
		return err
	}
	notHeld := fmt.Errorf("zookeeper: release %q: %w", name, fence.ErrNotHeld)
	path, slot, ok := l.nodePath(name, leaseID)
	if !ok {
		return notHeld
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zookeeper: release %q: %w: %w", name, fence.ErrUnavailable, err)
	}
	err := l.removeNode(l.dir(name), path, -1, slot)
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

// ensurePath creates path and its ancestors as persistent nodes (with acl), and returns
// conn's error if one cannot be created.
func ensurePath(conn *zk.Conn, acl []zk.ACL, path string) error {
	cur := ""
	for _, p := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		cur += "/" + p
		if _, err := conn.Create(cur, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// zkErr translates a go-zookeeper error into the fence sentinels, keeping the original.
func zkErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%w: %w", fence.ErrClosed, err)
	}
	return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
}

func validRoot(root string) error {
	if !strings.HasPrefix(root, "/") || root == "/" || strings.Contains(root, "//") {
		return fmt.Errorf("zookeeper: %w", &fence.InvalidError{Field: "root", Value: root, Reason: `must be an absolute znode path other than "/"`})
	}
	return nil
}
