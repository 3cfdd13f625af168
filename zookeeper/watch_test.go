package zookeeper_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/zookeeper"
)

// soon bounds how long a watcher may take to see a change here: well under the
// driver's 5 s fallback poll, so only the ZooKeeper watch can meet it.
const soon = 2 * time.Second

// netFault is the network of a ZooKeeper client that a test can cut, and that
// counts the requests it carries by kind.
type netFault struct {
	mu     sync.Mutex
	conns  []net.Conn
	refuse bool

	watchSets  atomic.Int64 // getChildren, exists and getData requests that set a watch
	childReads atomic.Int64 // getChildren requests without a watch (Inspect's reads)
}

func (f *netFault) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		return nil, errors.New("refused by the test")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	f.conns = append(f.conns, c)
	return &countingConn{Conn: c, f: f}, nil
}

// cut closes the client's connections; while refuse is true it cannot reconnect.
func (f *netFault) cut(refuse bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// countingConn counts the requests written to it. go-zookeeper writes each request
// whole in one Write: length, xid, opcode, then for the reads counted here the path
// and the watch flag. The first Write is the session handshake.
type countingConn struct {
	net.Conn
	f      *netFault
	shaken bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	if !c.shaken {
		c.shaken = true
	} else if len(b) >= 16 {
		const opExists, opGetData, opGetChildren2 = 3, 4, 12
		op := int32(binary.BigEndian.Uint32(b[8:12]))
		n := int(binary.BigEndian.Uint32(b[12:16]))
		if (op == opExists || op == opGetData || op == opGetChildren2) && len(b) > 16+n {
			switch watch := b[16+n] != 0; {
			case watch:
				c.f.watchSets.Add(1)
			case op == opGetChildren2:
				c.f.childReads.Add(1)
			}
		}
	}
	return c.Conn.Write(b)
}

// rig is a watch test's setup: a Locker (l, on conn) whose network f the test
// can cut, and another Locker in a session of its own that makes the changes.
type rig struct {
	t     *testing.T
	f     *netFault
	l     *zookeeper.Locker
	conn  *zk.Conn
	other *zookeeper.Locker
	ctx   context.Context
}

// newRig returns a rig on the shared server whose l has the given session timeout
// and root; everything is closed at cleanup.
func newRig(t *testing.T, session time.Duration, root string) *rig {
	t.Helper()
	servertest.SkipIfShort(t)
	f := &netFault{}
	conn, events, err := zk.Connect([]string{srv.Addr}, session, zk.WithDialer(f.dial), zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	l, err := zookeeper.NewLocker(conn, events, &zookeeper.Options{SessionTimeout: session, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	waitSession(t, conn, 0)
	return &rig{t: t, f: f, l: l, conn: conn, other: open(t, nil), ctx: testCtx(t)}
}

// touch makes other acquire and release name: a change, and name's directory.
func (r *rig) touch(name string) {
	r.t.Helper()
	if err := mustAcquire(r.t, r.ctx, r.other, name, time.Minute).Release(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// waitSession waits until conn has a session other than not (0: any).
func waitSession(t *testing.T, conn *zk.Conn, not int64) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if id := conn.SessionID(); conn.State() == zk.StateHasSession && id != 0 && id != not {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new ZooKeeper session within 10s (state %v, session %#x)", conn.State(), conn.SessionID())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// watching is a Watch running in the background: its states in order, its errors
// counted, and done closed once the sequence ends.
type watching struct {
	t      *testing.T
	name   string
	states chan fence.LockInfo
	errs   atomic.Int64
	last   error // the last error, once done
	done   chan struct{}
	stop   context.CancelFunc
}

func watch(t *testing.T, l *zookeeper.Locker, name string) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	w := &watching{t: t, name: name, states: make(chan fence.LockInfo, 1024), done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(w.done)
		for info, err := range l.Watch(ctx, name) {
			if err != nil {
				w.errs.Add(1)
				w.last = err
				continue
			}
			select {
			case w.states <- info:
			default:
				t.Errorf("Watch(%q): the test's buffer is full", name)
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
			t.Errorf("Watch(%q) still running 5s after its context was cancelled", name)
		}
	})
	return w
}

// until returns the first state that satisfies ok, failing the test if none comes
// within d.
func (w *watching) until(d time.Duration, what string, ok func(fence.LockInfo) bool) fence.LockInfo {
	w.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case info := <-w.states:
			if ok(info) {
				return info
			}
		case <-timeout:
			w.t.Fatalf("Watch(%q): no state with %s within %v (%d errors yielded)", w.name, what, d, w.errs.Load())
			return fence.LockInfo{}
		}
	}
}

// allSee waits until each of ws has yielded a state that satisfies ok, soon.
func allSee(ws []*watching, what string, ok func(fence.LockInfo) bool) {
	for _, w := range ws {
		w.t.Helper()
		w.until(soon, what, ok)
	}
}

func held(token fence.Token) func(fence.LockInfo) bool {
	return func(i fence.LockInfo) bool { return i.Held && i.Token == token }
}

func free(i fence.LockInfo) bool { return !i.Held }

func anyState(fence.LockInfo) bool { return true }

// A connection that drops and comes back within the session timeout keeps the
// session, and with it the watch: the client sets it again on reconnecting, and
// the server fires it for a grant made meanwhile.
func TestWatch_Disconnect_SessionKept_SeesChangeMadeMeanwhile(t *testing.T) {
	r := newRig(t, 8*time.Second, "")
	f, l, conn, ctx := r.f, r.l, r.conn, r.ctx
	name := "watch-disconnect"
	w := watch(t, l, name)
	w.until(soon, "the first state", anyState)
	session := conn.SessionID()

	f.cut(true)
	lease := mustAcquire(t, ctx, r.other, name, time.Minute)
	time.Sleep(300 * time.Millisecond)
	f.cut(false)
	if id := waitSession(t, conn, 0); id != session {
		t.Fatalf("session %#x after the reconnect; want the same %#x (kept)", id, session)
	}
	w.until(soon, "the grant made while disconnected", held(lease.Token()))
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.until(soon, "the release after the reconnect", free)
}

// A session that ends takes its watches with it: every watcher of the name
// subscribes again in the new session, sees what changed meanwhile and then the
// next change, well before the fallback poll.
func TestWatch_SessionExpired_WatchersSubscribeAgain(t *testing.T) {
	r := newRig(t, time.Second, "")
	f, l, conn, ctx := r.f, r.l, r.conn, r.ctx
	name := "watch-expired"
	ws := []*watching{watch(t, l, name), watch(t, l, name)}
	allSee(ws, "the first state", anyState)
	session := conn.SessionID()

	f.cut(true)
	lease := mustAcquire(t, ctx, r.other, name, time.Minute)
	time.Sleep(2500 * time.Millisecond) // the server expires the 1s session
	f.cut(false)
	waitSession(t, conn, session)
	allSee(ws, "the grant made while the session expired", held(lease.Token()))
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	allSee(ws, "the release in the new session", free)
	if n := l.WatchRelays(); n != 1 {
		t.Fatalf("WatchRelays() = %d after the session changed; want 1 (the lost one dropped)", n)
	}
}

// Many watchers of one name share one ZooKeeper watch and their reads: the watches
// set and the reads follow the changes, not the watchers, and every watcher sees
// every change.
func TestWatch_ManyWatchersOneName_OneWatch(t *testing.T) {
	r := newRig(t, 10*time.Second, "")
	f, l, ctx := r.f, r.l, r.ctx
	name := "watch-many"
	r.touch(name) // the directory exists: one child watch, no exists watch
	const watchers, rounds = 50, 5
	ws := make([]*watching, watchers)
	for i := range ws {
		ws[i] = watch(t, l, name)
	}
	allSee(ws, "the first state", anyState)
	if got := f.watchSets.Load(); got != 1 {
		t.Fatalf("%d watches set for %d watchers of one name; want 1", got, watchers)
	}
	reads := f.childReads.Load()
	for i := 0; i < rounds; i++ {
		lease := mustAcquire(t, ctx, r.other, name, time.Minute)
		allSee(ws, "the grant", held(lease.Token()))
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		allSee(ws, "the release", free)
	}
	// The watchers signalled together share one read (here, about one per change);
	// each reading alone would make 50 per change.
	if got, most := f.childReads.Load()-reads, int64(10*2*rounds); got > most {
		t.Fatalf("%d reads for %d changes seen by %d watchers; want at most %d (shared)", got, 2*rounds, watchers, most)
	}
	// One re-arm per event, and an event per grant and per release at most.
	if got, most := f.watchSets.Load(), int64(1+2*rounds); got > most {
		t.Fatalf("%d watches set over %d grants and releases with %d watchers; want at most %d", got, rounds, watchers, most)
	}
	if n := l.WatchRelays(); n != 1 {
		t.Fatalf("WatchRelays() = %d; want 1", n)
	}
}

// Watchers that end leave nothing behind: each name's relay stays only until its
// armed watch fires, then its goroutine ends; and a quiet name watched again and
// again reuses its one armed watch instead of setting a new one each time.
func TestWatch_EndedWatchers_LeaveNothingBehind(t *testing.T) {
	r := newRig(t, 10*time.Second, "")
	f, l := r.f, r.l
	const names, perName = 20, 3
	for i := 0; i < names; i++ {
		r.touch(watchName(i))
	}
	base := runtime.NumGoroutine()

	var ws []*watching
	for i := 0; i < names; i++ {
		for j := 0; j < perName; j++ {
			ws = append(ws, watch(t, l, watchName(i)))
		}
	}
	allSee(ws, "the first state", anyState)
	if n := l.WatchRelays(); n != names {
		t.Fatalf("WatchRelays() = %d with %d names watched; want %d", n, names, names)
	}
	for _, w := range ws {
		w.stop()
		<-w.done
	}
	// Each name's watch is still armed; a change of each fires it, and no relay
	// re-arms for nobody.
	for i := 0; i < names; i++ {
		r.touch(watchName(i))
	}
	waitFor(t, soon, "the relays to end after their names changed", func() bool {
		return l.WatchRelays() == 0 && runtime.NumGoroutine() <= base
	})

	// A quiet name watched 200 times, one after another, as blocking queries do.
	set := f.watchSets.Load()
	for i := 0; i < 200; i++ {
		w := watch(t, l, watchName(0))
		w.until(soon, "the first state", anyState)
		w.stop()
		<-w.done
	}
	if got := f.watchSets.Load() - set; got != 1 {
		t.Fatalf("%d watches set for 200 watches of a quiet name, one after another; want 1 (reused)", got)
	}
	// The last watch's unsubscribe runs in a goroutine of its own (context.AfterFunc)
	// as its context ends: wait for it.
	waitFor(t, soon, "one relay and one goroutine more than before, after 200 ended watches of a quiet name", func() bool {
		return l.WatchRelays() == 1 && runtime.NumGoroutine() <= base+1
	})
}

func watchName(i int) string { return "watch-quiet-" + string(rune('a'+i)) }

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lowest node with no TTL (a promoted waiter that has not claimed, here one that
// never will) is held with no expiry known. The watch reads it a few times a
// second, not once a millisecond, and still sees its end promptly.
func TestWatch_UnclaimedLowestNode_ReadsPaced(t *testing.T) {
	root := freshRoot("watch-unclaimed")
	r := newRig(t, 10*time.Second, root)
	f, l := r.f, r.l
	c := rawConn(t)
	name := "unclaimed"
	node := unclaimedNode(t, c, root, name)
	w := watch(t, l, name)
	first := w.until(soon, "the first state", anyState)
	if !first.Held || first.ExpiresIn != 0 {
		t.Fatalf("first state = %+v; want held with no expiry known", first)
	}
	reads := f.childReads.Load()
	time.Sleep(2 * time.Second)
	if got := f.childReads.Load() - reads; got > 20 {
		t.Fatalf("%d reads in 2s of a lock whose lowest node has no TTL; want at most 20 (paced)", got)
	}
	if err := c.Delete(node, -1); err != nil {
		t.Fatal(err)
	}
	w.until(zookeeper.MaxUnclaimedPause+soon, "the node's deletion", free)
}

// unclaimedNode makes, in c's session, the lowest node of name under root as a
// promoted waiter leaves it before it claims: waiter's data, no TTL. It returns the
// node's path.
func unclaimedNode(t *testing.T, c *zk.Conn, root, name string) string {
	t.Helper()
	for _, p := range []string{"/fence-test", root, root + "/" + name} {
		if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	node, err := c.Create(root+"/"+name+"/n-0000000000000000-", []byte("w"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// A promoted waiter claims its node (waiter's data becomes holder's, with a TTL)
// soon after the watch first reads it: the watch yields the claimed state, with
// its time left, not the one before (the claim does not move the change index, so
// a watcher given that one would see no time left until the next change).
func TestWatch_ClaimSoonAfterRead_YieldedWithTTL(t *testing.T) {
	root := freshRoot("watch-claim")
	r := newRig(t, 10*time.Second, root)
	c := rawConn(t)
	name := "claim"
	node := unclaimedNode(t, c, root, name)
	w := watch(t, r.l, name)
	waitFor(t, soon, "the watch's first read", func() bool { return r.f.childReads.Load() > 0 })
	if _, err := c.Set(node, []byte("h 60000"), -1); err != nil {
		t.Fatal(err)
	}
	first := w.until(soon, "the first state", anyState)
	if !first.Held || first.ExpiresIn <= 0 {
		t.Fatalf("first state = %+v; want held with the time left of the claimed node", first)
	}
}

// Close ends every watch with an error matching ErrClosed, and its relays.
func TestWatch_Close_EndsWithErrClosed(t *testing.T) {
	l := open(t, nil)
	w := watch(t, l, "watch-close")
	w.until(soon, "the first state", anyState)
	l.Close()
	select {
	case <-w.done:
	case <-time.After(soon):
		t.Fatalf("Watch still running %v after Close", soon)
	}
	if !errors.Is(w.last, fence.ErrClosed) {
		t.Fatalf("Watch's last error after Close = %v; want one matching ErrClosed", w.last)
	}
	waitFor(t, soon, "the relay to end after Close", func() bool { return l.WatchRelays() == 0 })
}

// A release hands the lock straight to the waiter behind it: the watcher sees the
// waiter hold it (never free in between), with its time left: the state read
// before the waiter claims its node is not yielded, since the claim does not move
// the change index.
func TestWatch_HandoffToWaiter_SeesNewHolderWithTTL(t *testing.T) {
	r := newRig(t, 10*time.Second, "")
	name := "watch-handoff"
	a := mustAcquire(t, r.ctx, r.other, name, time.Minute)
	w := watch(t, r.l, name)
	w.until(soon, "the first holder", held(a.Token()))
	got := make(chan *fence.Lease, 1)
	go func() {
		b, err := r.l.Acquire(r.ctx, name, time.Minute, fence.WithWait(time.Minute))
		if err != nil {
			t.Errorf("waiter's Acquire = %v", err)
		}
		got <- b
	}()
	waitFor(t, soon, "the waiter's node", func() bool {
		kids, _, err := r.conn.Children(zookeeper.DefaultRoot + "/" + name)
		return err == nil && len(kids) == 2
	})
	if err := a.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.FailNow()
	}
	info := w.until(soon, "the next state", func(i fence.LockInfo) bool { return i.Token != a.Token() || !i.Held })
	if !info.Held || info.Token != b.Token() || info.ExpiresIn <= 0 {
		t.Fatalf("state after the handoff = %+v; want held by the waiter's token %d, with time left", info, b.Token())
	}
}
