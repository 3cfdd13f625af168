package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/internal/servers/etcdmember"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// promptly bounds how soon a watcher must see a change that etcd signalled: well
// under driver.DefaultWatchPoll, so that a change found only by the fallback read
// fails the test.
const promptly = 2 * time.Second

// watched is one state or error a watch yielded, and when.
type watched struct {
	info fence.LockInfo
	err  error
	at   time.Time
}

// startWatch ranges over w.Watch(name) in a goroutine until stop or the test's end
// and returns what it yields. stop returns once the watch has ended, failing t if
// that takes over 5 s.
func startWatch(t *testing.T, w fence.Watcher, name string) (states <-chan watched, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	out := make(chan watched, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for info, err := range w.Watch(ctx, name) {
			select {
			case out <- watched{info, err, time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Errorf("Watch(%q) still running 5s after its context was cancelled", name)
			}
		})
	}
	t.Cleanup(stop)
	return out, stop
}

// waitFor reads states until one satisfies ok, failing t if none does within
// within. Errors fail t too, unless they match fence.ErrUnavailable and
// unavailableOK is set (a watch through a cut connection yields them).
func waitFor(t *testing.T, states <-chan watched, within time.Duration, what string, unavailableOK bool, ok func(fence.LockInfo) bool) watched {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case s := <-states:
			if s.err != nil {
				if unavailableOK && errors.Is(s.err, fence.ErrUnavailable) {
					continue
				}
				t.Fatalf("watch yielded %v while waiting for %s", s.err, what)
			}
			if ok(s.info) {
				return s
			}
		case <-deadline:
			t.Fatalf("watch: no state with %s within %v", what, within)
		}
	}
}

func isFree(i fence.LockInfo) bool { return !i.Held }
func isHeld(i fence.LockInfo) bool { return i.Held }

// cutProxy forwards TCP connections to the package's etcd server and can cut them:
// Cut closes every connection and refuses new ones until Heal.
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool
}

// newCutProxy starts a proxy to the shared server, closed at the test's cleanup.
func newCutProxy(t *testing.T) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(srv.Endpoints[0], "http://"), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			c.Close()
			up.Close()
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// track registers a connection pair, unless the link is cut.
func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
	dst.Close()
	src.Close()
}

// Cut closes every connection through the proxy and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal lets connections through again.
func (p *cutProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// gauge returns the value of one of the etcd server's gauges: the server runs in
// this process and registers its metrics with the default registry.
func gauge(t *testing.T, name string) int {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	t.Fatalf("no gauge %s among the etcd server's metrics", name)
	return 0
}

// etcd's gauges of the server's watchers and gRPC watch streams.
const (
	watchersGauge = "etcd_debugging_mvcc_watcher_total"
	streamsGauge  = "etcd_debugging_mvcc_watch_stream_total"
)

// eventually polls cond every 20ms until it holds, failing t with what after
// within.
func eventually(t *testing.T, within time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cutWatch is a watch of a fresh name through a cutProxy, with a Locker on a
// direct client to change the lock while the link is cut.
type cutWatch struct {
	ctx     context.Context
	direct  *clientv3.Client
	changer *etcd.Locker
	name    string
	proxy   *cutProxy
	states  <-chan watched
	first   watched // the watch's first state, read before any cut
}

func newCutWatch(t *testing.T, what string) *cutWatch {
	t.Helper()
	ctx, direct, name := setup(t, what)
	p := newCutProxy(t)
	states, _ := startWatch(t, etcd.NewLocker(newClient(t, []string{p.endpoint()}), nil), name)
	c := &cutWatch{ctx: ctx, direct: direct, changer: etcd.NewLocker(direct, nil), name: name, proxy: p, states: states}
	c.first = waitFor(t, states, promptly, "the first state", false, isFree)
	return c
}

// acquire grants the lock on the direct client, released at the test's end.
func (c *cutWatch) acquire(t *testing.T) *fence.Lease {
	t.Helper()
	a := mustAcquire(t, c.ctx, c.changer, c.name, time.Minute)
	t.Cleanup(func() { a.Release(context.Background()) })
	return a
}

// wantGrantBeforePoll waits for the watch to yield a's grant, which it must do
// before the fallback read after its first state would have found it.
func (c *cutWatch) wantGrantBeforePoll(t *testing.T, a *fence.Lease) {
	t.Helper()
	got := waitFor(t, c.states, driver.DefaultWatchPoll, "the grant made while cut", true, isHeld)
	if got.info.Token != a.Token() {
		t.Fatalf("state after the cut = %+v; want held with token %d", got.info, a.Token())
	}
	if d := got.at.Sub(c.first.at); d >= driver.DefaultWatchPoll-500*time.Millisecond {
		t.Fatalf("grant seen %v after the first state; want it before the fallback read (%v)", d, driver.DefaultWatchPoll)
	}
}

// A cut connection: the client resumes the watch from the revision it last saw
// when it reconnects, so a grant made meanwhile reaches the watcher as soon as the
// link is back, not at the fallback read.
func TestLocker_Watch_ConnectionCut_ResumedWatchSeesChange(t *testing.T) {
	c := newCutWatch(t, "watch-cut")
	c.proxy.Cut()
	a := c.acquire(t)
	time.Sleep(100 * time.Millisecond)
	c.proxy.Heal()
	c.wantGrantBeforePoll(t, a)
}

// A link that stays cut: the watch hears nothing, its fallback read gets no answer
// and, after watchTimeout, yields fence.ErrUnavailable instead of hanging; once the
// link is back it yields the state again.
func TestLocker_Watch_LinkDown_ErrUnavailableThenRecovers(t *testing.T) {
	servertest.SkipIfShort(t) // about 15s: the fallback read's wait and timeout, then the client's reconnection
	c := newCutWatch(t, "watch-down")
	c.proxy.Cut()
	// The fallback read comes after driver.DefaultWatchPoll, its timeout 5s later.
	select {
	case s := <-c.states:
		if !errors.Is(s.err, fence.ErrUnavailable) {
			t.Fatalf("watch through a cut link yielded %+v, %v; want an error matching fence.ErrUnavailable", s.info, s.err)
		}
		if !strings.HasPrefix(s.err.Error(), `etcd: watch "`+c.name+`": `) || strings.Count(s.err.Error(), c.name) != 1 {
			t.Fatalf("error = %q; want it to start etcd: watch %q: and name the lock once", s.err, c.name)
		}
	case <-time.After(driver.DefaultWatchPoll + 10*time.Second):
		t.Fatal("watch through a cut link yielded nothing; want fence.ErrUnavailable")
	}
	c.acquire(t)
	c.proxy.Heal()
	waitFor(t, c.states, 10*time.Second, "the grant once the link is back", true, isHeld)
}

// A watch that etcd ends: the client's resumed watch starts at a revision that
// was compacted meanwhile, so etcd cancels it; Watch makes a new one, reads the
// state and yields the grant made while the link was cut, without waiting for the
// fallback read.
func TestLocker_Watch_CompactedWhileCut_ResubscribesSeesChange(t *testing.T) {
	c := newCutWatch(t, "watch-compact")
	c.proxy.Cut()
	a := c.acquire(t)
	resp, err := c.direct.Get(c.ctx, "compact-"+c.name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.direct.Compact(c.ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact = %v", err)
	}
	c.proxy.Heal()
	c.wantGrantBeforePoll(t, a)
	// The new watch works: a release is seen promptly.
	if err := a.Release(c.ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c.states, promptly, "the release after the new watch", false, isFree)
}

// Many watchers of one name on one Locker share one etcd watch (one watcher at
// the server, one event per change) and the reads a change causes; each sees the
// change. When they end, the watch, its gRPC stream and their goroutines end too.
func TestLocker_Watch_ManyWatchersOneName_OneEtcdWatchSharedReadsNothingLeft(t *testing.T) {
	ctx, cli, name := setup(t, "watch-many")
	kv := countTxns(cli)
	l := etcd.NewLocker(cli, nil)
	changer := etcd.NewLocker(client(t), nil)
	for _, l := range []*etcd.Locker{l, changer} {
		if _, err := l.Inspect(ctx, name); err != nil { // a client connects on its first call
			t.Fatal(err)
		}
	}
	base := quiesce(t)
	const n = 20
	var all []<-chan watched
	var stops []func()
	for range n {
		states, stop := startWatch(t, l, name)
		waitFor(t, states, promptly, "the first state", false, isFree)
		all = append(all, states)
		stops = append(stops, stop)
	}
	if got := gauge(t, watchersGauge) - base.watchers; got != 1 {
		t.Fatalf("etcd watchers for %d watchers of one name = %d; want 1", n, got)
	}
	if got := gauge(t, streamsGauge) - base.streams; got != 1 {
		t.Fatalf("etcd watch streams for %d watchers of one name = %d; want 1", n, got)
	}
	before := kv.txns.Load()
	a := mustAcquire(t, ctx, changer, name, time.Minute)
	for i, states := range all {
		if got := waitFor(t, states, promptly, "the grant", false, isHeld); got.info.Token != a.Token() {
			t.Fatalf("watcher %d saw %+v; want token %d", i, got.info, a.Token())
		}
	}
	// The first watcher woken starts a read; those woken meanwhile share the next.
	reads := kv.txns.Load() - before
	t.Logf("%d watchers of one name: %d reads after one change", n, reads)
	if reads >= n/2 {
		t.Fatalf("%d watchers of one name read the lock %d times after one change; want them to share reads (fewer than %d)", n, reads, n/2)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, states := range all {
		waitFor(t, states, promptly, "the release", false, isFree)
	}
	// Half of them leave: the others still see changes on the same etcd watch.
	for _, stop := range stops[:n/2] {
		stop()
	}
	b := mustAcquire(t, ctx, changer, name, time.Minute)
	defer b.Release(ctx)
	for _, states := range all[n/2:] {
		waitFor(t, states, promptly, "the grant after half left", false, isHeld)
	}
	for _, stop := range stops {
		stop()
	}
	wantNothingLeft(t, base)
}

// Watchers of many names on one Locker: one etcd watcher per name, all on one
// gRPC stream of the client; nothing is left once their contexts end.
func TestLocker_Watch_ManyNames_OneStreamNothingLeft(t *testing.T) {
	ctx, cli, name := setup(t, "watch-names")
	l := etcd.NewLocker(cli, nil)
	if _, err := l.Inspect(ctx, name); err != nil { // the client connects on its first call
		t.Fatal(err)
	}
	base := quiesce(t)
	const n = 50
	var all []<-chan watched
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range n {
		out := make(chan watched, 64)
		all = append(all, out)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for info, err := range l.Watch(wctx, fmt.Sprintf("%s-%d", name, i)) {
				select {
				case out <- watched{info, err, time.Now()}:
				default: // the test reads only the first states
				}
			}
		}()
	}
	for _, states := range all {
		waitFor(t, states, promptly, "the first state", false, isFree)
	}
	if got := gauge(t, watchersGauge) - base.watchers; got != n {
		t.Errorf("etcd watchers for %d names = %d; want %d", n, got, n)
	}
	if got := gauge(t, streamsGauge) - base.streams; got != 1 {
		t.Errorf("etcd watch streams for %d names = %d; want 1", n, got)
	}
	a := mustAcquire(t, ctx, l, name+"-7", time.Minute)
	defer a.Release(ctx)
	waitFor(t, all[7], promptly, "the grant of its name", false, isHeld)
	cancel()
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("watches still running 5s after their context was cancelled")
	}
	wantNothingLeft(t, base)
}

// A grant and a release by an older version of this package (no owner key) write
// the same lock key, so a watcher sees them at once.
func TestLocker_Watch_OldFormatGrant_SeenAtOnce(t *testing.T) {
	ctx, cli, name := setup(t, "watch-old")
	l := etcd.NewLocker(cli, nil)
	states, _ := startWatch(t, l, name)
	waitFor(t, states, promptly, "the first state", false, isFree)
	id := driver.NewLeaseID()
	el := oldGrant(t, ctx, cli, name, id)
	waitFor(t, states, promptly, "the old-format grant", false, isHeld)
	// An older version's release: delete the key if it holds the lease id, revoke the lease.
	lk := etcd.DefaultPrefix + "lock/" + name
	if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(lk), "=", id)).Then(clientv3.OpDelete(lk)).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, el); err != nil {
		t.Fatal(err)
	}
	waitFor(t, states, promptly, "the old-format release", false, isFree)
}

// countingKV counts the transactions a client starts (Inspect is one).
type countingKV struct {
	clientv3.KV
	txns atomic.Int64
}

// countTxns makes cli count its transactions, before any Locker uses it.
func countTxns(cli *clientv3.Client) *countingKV {
	kv := &countingKV{KV: cli.KV}
	cli.KV = kv
	return kv
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.txns.Add(1)
	return k.KV.Txn(ctx)
}

// etcd reports a lease's time left in whole seconds, 0 in its last second: the
// watch must not take that as "expires now" and read the lock again and again
// until etcd deletes the key (up to 500ms after the lease's end). The expiry is
// seen as etcd's delete.
func TestLocker_Watch_Expiry_NoBusyReads(t *testing.T) {
	ctx, cli, name := setup(t, "watch-expiry")
	kv := countTxns(cli)
	l := etcd.NewLocker(cli, nil)
	holder := etcd.NewLocker(client(t), nil)
	states, _ := startWatch(t, l, name)
	waitFor(t, states, promptly, "the first state", false, isFree)
	before := kv.txns.Load()
	mustAcquire(t, ctx, holder, name, etcdmember.MinLeaseTTL)
	waitFor(t, states, promptly, "the grant", false, isHeld)
	waitFor(t, states, etcdmember.MinLeaseTTL+promptly, "the expiry", false, isFree)
	// The grant's read, at most one more in the lease's last second, the read
	// after the delete, and one spare for a read that etcd's TTL made necessary.
	if reads := kv.txns.Load() - before; reads > 4 {
		t.Fatalf("watch read the lock %d times from grant to expiry; want at most 4", reads)
	}
}

// A lock key written by hand without an etcd lease is held, with ExpiresIn 0 (no
// time left is known): the watch must not take that as "expires now" and read it
// again and again. Its delete is seen at once.
func TestLocker_Watch_KeyWithoutLease_NoBusyReads(t *testing.T) {
	ctx, cli, name := setup(t, "watch-nolease")
	kv := countTxns(cli)
	l := etcd.NewLocker(cli, nil)
	lk := etcd.DefaultPrefix + "lock/" + name
	if _, err := cli.Put(ctx, lk, "by-hand"); err != nil {
		t.Fatal(err)
	}
	states, _ := startWatch(t, l, name)
	first := waitFor(t, states, promptly, "the first state", false, isHeld)
	if first.info.ExpiresIn != 0 {
		t.Fatalf("state of a key without lease = %+v; want ExpiresIn 0", first.info)
	}
	before := kv.txns.Load()
	time.Sleep(time.Second)
	if reads := kv.txns.Load() - before; reads > 2 {
		t.Fatalf("watch of a key without lease read it %d times in 1s; want at most 2", reads)
	}
	if _, err := cli.Delete(ctx, lk); err != nil {
		t.Fatal(err)
	}
	waitFor(t, states, promptly, "the delete", false, isFree)
}

// Close ends a watch with fence.ErrClosed; so does closing the client.
func TestLocker_Watch_CloseAndClosedClient_ErrClosed(t *testing.T) {
	for _, tc := range []struct {
		what  string
		close func(l *etcd.Locker, cli *clientv3.Client)
	}{
		{"Close", func(l *etcd.Locker, _ *clientv3.Client) { l.Close() }},
		{"client closed", func(_ *etcd.Locker, cli *clientv3.Client) { cli.Close() }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			_, cli, name := setup(t, "watch-close")
			l := etcd.NewLocker(cli, nil)
			states, _ := startWatch(t, l, name)
			waitFor(t, states, promptly, "the first state", false, isFree)
			tc.close(l, cli)
			select {
			case s := <-states:
				if !errors.Is(s.err, fence.ErrClosed) {
					t.Fatalf("watch after %s yielded %+v, %v; want an error matching fence.ErrClosed", tc.what, s.info, s.err)
				}
			case <-time.After(promptly):
				t.Fatalf("watch yielded nothing within %v of %s", promptly, tc.what)
			}
			for info, err := range l.Watch(context.Background(), name) {
				if !errors.Is(err, fence.ErrClosed) {
					t.Fatalf("Watch after %s yielded %+v, %v; want an error matching fence.ErrClosed", tc.what, info, err)
				}
			}
		})
	}
}

// leftOver reports what remains of watches after they all ended, against the
// counts before they started.
type leftOver struct{ goroutines, watchers, streams int }

func baseline(t *testing.T) leftOver {
	t.Helper()
	return leftOver{runtime.NumGoroutine(), gauge(t, watchersGauge), gauge(t, streamsGauge)}
}

// quiesce waits until the package's etcd server has no watchers: the tests run one
// at a time, but the cancellation of the previous test's watches reaches the
// server after that test ended, which would change the counts under this one. It
// fails t if watchers are still there after 5 s (a test left a watch running).
func quiesce(t *testing.T) leftOver {
	t.Helper()
	eventually(t, 5*time.Second, func() string {
		return fmt.Sprintf("etcd still has %d watchers and %d watch streams before the test", gauge(t, watchersGauge), gauge(t, streamsGauge))
	}, func() bool { return gauge(t, watchersGauge) == 0 && gauge(t, streamsGauge) == 0 })
	return baseline(t)
}

// wantNothingLeft waits until the goroutines, etcd watchers and watch streams are
// back to base, failing t after 5 s.
func wantNothingLeft(t *testing.T, base leftOver) {
	t.Helper()
	now := func() leftOver { return baseline(t) }
	eventually(t, 5*time.Second, func() string {
		n := now()
		return fmt.Sprintf("goroutines, etcd watchers and watch streams left after every watch ended: %d, %d, %d; want none",
			n.goroutines-base.goroutines, n.watchers-base.watchers, n.streams-base.streams)
	}, func() bool {
		n := now()
		return n.goroutines <= base.goroutines && n.watchers <= base.watchers && n.streams <= base.streams
	})
}
