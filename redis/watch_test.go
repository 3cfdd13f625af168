package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// promptly bounds how soon a watcher must see a change in these tests: well under
// driver.DefaultWatchPoll (5s), so only a message (or a resubscription) is in time.
const promptly = 2 * time.Second

// watchStream is l.Watch(name) run in a goroutine until stop or the test's end.
type watchStream struct {
	t      *testing.T
	name   string
	states chan watchItem
	done   chan struct{}
	cancel context.CancelFunc
}

type watchItem struct {
	info fence.LockInfo
	err  error
}

func startWatching(t *testing.T, l *Locker, name string) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	w := &watchStream{t: t, name: name, states: make(chan watchItem, 256), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.done)
		for info, err := range l.Watch(ctx, name) {
			select {
			case w.states <- watchItem{info, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

// await reads states until one satisfies ok, within the bound. Errors matching
// fence.ErrUnavailable (the store was cut off) are logged and skipped; others fail.
func (w *watchStream) await(within time.Duration, what string, ok func(fence.LockInfo) bool) fence.LockInfo {
	w.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case s := <-w.states:
			switch {
			case errors.Is(s.err, fence.ErrUnavailable):
				w.t.Logf("Watch(%q) while waiting for %s: %v", w.name, what, s.err)
			case s.err != nil:
				w.t.Fatalf("Watch(%q) yielded %v while waiting for %s", w.name, s.err, what)
			case ok(s.info):
				return s.info
			}
		case <-deadline.C:
			w.t.Fatalf("Watch(%q): no state with %s within %v", w.name, what, within)
		}
	}
}

func (w *watchStream) first() fence.LockInfo {
	w.t.Helper()
	return w.await(promptly, "the first state", func(fence.LockInfo) bool { return true })
}

// stop cancels the watch and waits for it to end.
func (w *watchStream) stop() {
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(promptly):
		w.t.Errorf("Watch(%q) still running %v after its context was cancelled", w.name, promptly)
	}
}

func held(tok fence.Token) func(fence.LockInfo) bool {
	return func(i fence.LockInfo) bool { return i.Held && i.Token == tok }
}

func free(i fence.LockInfo) bool { return !i.Held }

// cutDialer is a client's Dialer that can cut every connection it made and refuse
// new ones until healed: a network partition of one client.
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, fmt.Errorf("dial %s: cut by the test", addr)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) setCut(cut bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = cut
	if cut {
		for _, c := range d.conns {
			_ = c.Close()
		}
		d.conns = nil
	}
}

// A change made while the watcher's connection is down publishes to nobody; when
// go-redis reconnects and subscribes again, the watcher reads the state at once,
// and messages reach it again.
func TestLocker_Watch_DroppedConnection_ResubscribesAndSeesMissedChange(t *testing.T) {
	d := &cutDialer{}
	c := goredis.NewClient(&goredis.Options{Addr: server(t).Addr, Dialer: d.dial})
	t.Cleanup(func() { _ = c.Close() })
	l, err := NewLocker(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	other, oc := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)

	w := startWatching(t, l, name)
	w.first()
	waitSubscribers(t, oc, l, name, 1)
	d.setCut(true)
	waitSubscribers(t, oc, l, name, 0) // the server dropped it: the grant's message goes nowhere
	lease := mustAcquire(t, ctx, other, name, time.Hour)
	time.Sleep(150 * time.Millisecond) // go-redis tries to reconnect, and fails
	d.setCut(false)
	healed := time.Now()
	w.await(promptly, "the grant made while cut off", held(lease.Token()))
	t.Logf("grant made while cut off seen %v after the connection came back", time.Since(healed).Round(time.Millisecond))
	waitSubscribers(t, oc, l, name, 1) // subscribed again, once
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.await(promptly, "the release after the reconnect", free)
}

// Watchers of one name share one subscription per Locker, each sees every change,
// and the subscription ends with the last of them.
func TestLocker_Watch_ManyWatchersOfOneName_OneSubscription(t *testing.T) {
	l, c := newLocker(t, nil)
	l2, _ := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	var ws []*watchStream
	for i := 0; i < 20; i++ {
		on := l
		if i%4 == 3 {
			on = l2 // 5 of 20 on a second Locker, as another process
		}
		w := startWatching(t, on, name)
		w.first() // subscribed and confirmed
		ws = append(ws, w)
	}
	ch := l.keysFor(name).wake
	if got, err := c.PubSubShardNumSub(ctx, ch).Result(); err != nil || got[ch] != 2 {
		t.Fatalf("subscribers of %s with 20 watchers on two Lockers = %v, %v; want 2 (one per Locker)", ch, got, err)
	}
	lease := mustAcquire(t, ctx, l, name, time.Hour)
	for _, w := range ws {
		w.await(promptly, "the grant", held(lease.Token()))
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		w.await(promptly, "the release", free)
	}
	for _, w := range ws {
		w.stop()
	}
	waitSubscribers(t, c, l, name, 0)
	if n := relayConns(l) + relayConns(l2); n != 0 {
		t.Errorf("relay connections after every watch ended = %d, want 0", n)
	}
}

func relayConns(l *Locker) int {
	l.relay.mu.Lock()
	defer l.relay.mu.Unlock()
	return len(l.relay.conns)
}

// pubSubClients counts the pub/sub connections of s.
func pubSubClients(t *testing.T, s *servers.Redis) int {
	t.Helper()
	out, err := s.CLI("CLIENT", "LIST", "TYPE", "pubsub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count("\n"+out, "\nid=")
}

// shardChannels counts the sharded channels subscribed on s.
func shardChannels(t *testing.T, s *servers.Redis) int {
	t.Helper()
	out, err := s.CLI("PUBSUB", "SHARDCHANNELS")
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(out))
}

// Watchers of many names on one Locker share one pub/sub connection; once their
// contexts end, no connection, subscription or goroutine is left.
func TestLocker_Watch_ManyNames_OneConnection_NothingLeaks(t *testing.T) {
	s := servertest.Redis(t) // its own server, so that only this test's clients count
	c := newClient(t, s.Addr)
	l, err := NewLocker(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxT(t)
	if _, err := l.Inspect(ctx, "warm-up"); err != nil { // the client's first connection
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()

	const names = 50
	var ws []*watchStream
	for i := 0; i < names; i++ {
		for range 2 {
			w := startWatching(t, l, fmt.Sprintf("many-%d", i))
			w.first()
			ws = append(ws, w)
		}
	}
	if n := pubSubClients(t, s); n != 1 {
		t.Errorf("pub/sub connections for %d watchers of %d names = %d, want 1", len(ws), names, n)
	}
	if n := shardChannels(t, s); n != names {
		t.Errorf("channels subscribed = %d, want %d", n, names)
	}
	lease := mustAcquire(t, ctx, l, "many-7", time.Hour)
	ws[14].await(promptly, "the grant", held(lease.Token()))
	ws[15].await(promptly, "the grant", held(lease.Token()))

	for _, w := range ws {
		w.stop()
	}
	waitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n, ch, g := pubSubClients(t, s), shardChannels(t, s), runtime.NumGoroutine(); n != 0 || ch != 0 || g > goroutines {
			return fmt.Errorf("after every watch ended: %d pub/sub connections, %d channels, %d goroutines (%d before); want 0, 0, at most %d", n, ch, g, goroutines, goroutines)
		}
		return nil
	})
}

// A connection stays subscribed to the channels of watches that ended (fence
// never unsubscribes), at most maxIdleChannels of them: then it is replaced, and
// a watch still running goes on seeing changes on the new one.
func TestLocker_Watch_IdleChannelsBounded_LongWatchSurvives(t *testing.T) {
	s := servertest.Redis(t)
	l, err := NewLocker(newClient(t, s.Addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxT(t)
	long := startWatching(t, l, "long")
	long.first()
	most := 0
	for i := 0; i < maxIdleChannels+50; i++ {
		w := startWatching(t, l, fmt.Sprintf("short-%d", i))
		w.first()
		w.stop()
		if i%25 == 0 {
			most = max(most, shardChannels(t, s))
		}
	}
	if most > maxIdleChannels+2 {
		t.Errorf("channels subscribed at most = %d, want at most %d (idle ones, the long watch's, the current one)", most, maxIdleChannels+2)
	}
	if n := pubSubClients(t, s); n != 1 {
		t.Errorf("pub/sub connections after the churn = %d, want 1", n)
	}
	lease := mustAcquire(t, ctx, l, "long", time.Hour)
	long.await(promptly, "the grant after its connection was replaced", held(lease.Token()))
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	long.await(promptly, "the release", free)
}

// Close ends every watch with fence.ErrClosed and closes their connections.
func TestLocker_Watch_Close_EndsWatchesWithErrClosed(t *testing.T) {
	l, c := newLocker(t, nil)
	name := uniqueName(t)
	w := startWatching(t, l, name)
	w.first()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-w.states:
		if !errors.Is(s.err, fence.ErrClosed) || !strings.HasPrefix(s.err.Error(), "redis: watch ") {
			t.Fatalf("Watch after Close yielded %+v, %v; want a redis: watch error matching fence.ErrClosed", s.info, s.err)
		}
	case <-time.After(promptly):
		t.Fatal("Watch yielded nothing within 2s of Close")
	}
	select {
	case <-w.done:
	case <-time.After(promptly):
		t.Fatal("Watch still running after Close")
	}
	waitSubscribers(t, c, l, name, 0)
	for _, err := range l.Watch(ctxT(t), name) {
		if !errors.Is(err, fence.ErrClosed) {
			t.Fatalf("Watch on a closed Locker = %v, want fence.ErrClosed", err)
		}
	}
}

// A server that accepts connections and never answers: the watch says the
// subscription was not confirmed (fence.ErrUnavailable) within its bound, goes on
// trying, and ends promptly when its context does.
func TestLocker_Watch_SilentServer_UnavailableThenEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	c := newClient(t, ln.Addr().String())
	l, err := NewLocker(c, &Options{PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w := startWatching(t, l, "silent")
	for i := 0; i < 2; i++ { // the first try, and the next after a backoff
		select {
		case s := <-w.states:
			if !errors.Is(s.err, fence.ErrUnavailable) || !strings.HasPrefix(s.err.Error(), `redis: watch "silent": `) {
				t.Fatalf("Watch of a silent server yielded %+v, %v; want a redis: watch error matching fence.ErrUnavailable", s.info, s.err)
			}
		case <-time.After(promptly):
			t.Fatalf("Watch of a silent server yielded nothing within %v", promptly)
		}
	}
	stopped := time.Now()
	w.stop()
	if d := time.Since(stopped); d > 500*time.Millisecond {
		t.Errorf("Watch of a silent server ended %v after its context; want promptly", d)
	}
}

// Classic pub/sub (Options.ClassicPubSub) carries the watch messages too.
func TestLocker_Watch_ClassicPubSub(t *testing.T) {
	l, c := newLocker(t, &Options{ClassicPubSub: true})
	ctx := ctxT(t)
	name := uniqueName(t)
	w := startWatching(t, l, name)
	w.first()
	waitSubscribers(t, c, l, name, 1)
	lease := mustAcquire(t, ctx, l, name, time.Hour)
	w.await(promptly, "the grant", held(lease.Token()))
	if err := l.Heal(ctx, name, lease.Token()+10); err != nil {
		t.Fatal(err)
	}
	w.await(promptly, "the heal", func(i fence.LockInfo) bool { return i.LastToken == lease.Token()+10 })
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.await(promptly, "the release", free)
}

// A waiter is not woken by the messages only watchers want: a heal (or a grant)
// frees nothing, so the waiter runs no script until the release.
func TestLocker_Wait_NotWokenByHeal(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	waiter, wc := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	holder := mustAcquire(t, ctx, l, name, time.Hour)
	h := &countHook{}
	wc.AddHook(h)
	got := make(chan error, 1)
	go func() {
		lease, err := waiter.Acquire(ctx, name, time.Minute, fence.WithWait(20*time.Second))
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	waitSubscribers(t, c, l, name, 1)
	// Its first try, then its look once subscribed: two scripts, then it sleeps.
	waitFor(t, 5*time.Second, time.Millisecond, func() error {
		if n := h.scripts.Load(); n < 2 {
			return fmt.Errorf("waiter ran %d scripts, want its 2 tries", n)
		}
		return nil
	})
	before := h.scripts.Load()
	for i := 1; i <= 5; i++ {
		if err := l.Heal(ctx, name, holder.Token()+fence.Token(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := h.scripts.Load() - before; n != 0 {
		t.Errorf("waiter ran %d scripts after 5 heals, want 0 (not woken)", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("waiter after the release: %v", err)
	}
}

func TestFreeing_GrantsAndHealsDoNotWakeWaiters(t *testing.T) {
	for p, want := range map[string]bool{"released": true, "revoked": true, "granted": false, "healed": false, "something new": true} {
		if got := freeing(p); got != want {
			t.Errorf("freeing(%q) = %v, want %v", p, got, want)
		}
	}
}
