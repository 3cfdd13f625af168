package redis

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// srv is the one redis-server of this package's tests (nil with -short).
var srv *servers.Redis

func TestMain(m *testing.M) {
	flag.Parse()
	// One server for the whole package; it is cheap, so it also runs under -short,
	// where only its absence is tolerated: the examples, which need it, are then
	// left out and the integration tests skip.
	var err error
	if srv, err = servers.StartRedis(); err != nil {
		if !testing.Short() {
			fmt.Fprintln(os.Stderr, "redis tests:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "redis tests: -short without a redis-server: examples not run:", err)
		srv = nil
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			_ = flag.Set("test.run", "^Test")
		}
	}
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	os.Exit(code)
}

// server returns the package's redis-server, skipping the test under -short.
func server(t testing.TB) *servers.Redis {
	t.Helper()
	servertest.SkipIfShort(t)
	return srv
}

// newClient returns a go-redis client of addr, closed when t ends.
func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newLocker returns a Locker on the package's server with opts, closed when t ends.
func newLocker(t testing.TB, opts *Options) (*Locker, *goredis.Client) {
	t.Helper()
	c := newClient(t, server(t).Addr)
	l, err := NewLocker(c, opts)
	if err != nil {
		t.Fatalf("NewLocker: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, c
}

var nameSeq atomic.Int64

// uniqueName returns a lock name no other test uses.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", t.Name(), nameSeq.Add(1))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustAcquire acquires name on l, failing t if that fails.
func mustAcquire(t testing.TB, ctx context.Context, l *Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire %q: %v", name, err)
	}
	return lease
}

func TestEscapeName_RoundTripsAndRemovesBraces(t *testing.T) {
	for _, name := range []string{"plain", "a{b}c", "{", "}", "{}", "%", "%7B", "100%{x}%7D", "ünï{cødé}"} {
		esc := escapeName(name)
		if strings.ContainsAny(esc, "{}") {
			t.Errorf("escapeName(%q) = %q, want no braces", name, esc)
		}
		back, err := unescapeName(esc)
		if err != nil || back != name {
			t.Errorf("unescapeName(escapeName(%q)) = %q, %v; want %q, nil", name, back, err, name)
		}
	}
	for _, bad := range []string{"%", "%7", "%41", "a%zz"} {
		if got, err := unescapeName(bad); err == nil {
			t.Errorf("unescapeName(%q) = %q, nil; want an error", bad, got)
		}
	}
}

func TestNewLocker_BadOptions(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"brace in prefix", Options{Prefix: "a{"}},
		{"negative replicas", Options{WaitReplicas: -1}},
		{"aof local 2", Options{WaitAOFLocal: 2}},
		{"poll too short", Options{PollInterval: time.Microsecond}},
	} {
		if _, err := NewLocker(c, &tc.opts); !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "redis: ") {
			t.Errorf("%s: NewLocker error = %v, want a redis: error matching fence.ErrInvalid", tc.name, err)
		}
	}
	if _, err := NewLocker(nil, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewLocker(nil) error = %v, want fence.ErrInvalid", err)
	}
}

// countHook counts the commands a client sends (a pipeline counts its commands),
// and apart the scripts it runs (EVAL, EVALSHA), which connection
// set-up (HELLO, CLIENT) does not add to.
type countHook struct{ n, scripts atomic.Int64 }

func (h *countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		if strings.HasPrefix(cmd.Name(), "eval") {
			h.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		for _, cmd := range cmds { // acquires and releases are pipelined (see batcher)
			if strings.HasPrefix(cmd.Name(), "eval") {
				h.scripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func TestLocker_Acquire_OneCommandPerGrant(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	// Warm the script cache so EVALSHA hits.
	lease := mustAcquire(t, ctx, l, name, time.Second)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h := &countHook{}
	c.AddHook(h)
	lease = mustAcquire(t, ctx, l, name, time.Second)
	if got := h.n.Load(); got != 1 {
		t.Errorf("acquire sent %d commands, want 1 (one EVALSHA)", got)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.n.Load(); got != 2 {
		t.Errorf("acquire+release sent %d commands, want 2", got)
	}
}

func TestLocker_Keys_LayoutAndEscapedHashTag(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := "a{b}c%-" + uniqueName(t)
	lease := mustAcquire(t, ctx, l, name, 10*time.Second)
	tag := "{" + strings.NewReplacer("{", "%7B", "}", "%7D", "%", "%25").Replace(name) + "}"
	v, err := c.Get(ctx, "fence:"+tag+":lock").Result()
	if want := lease.ID() + " " + lease.Token().String(); err != nil || v != want {
		t.Errorf("lock key value = %q, %v; want %q", v, err, want)
	}
	n, err := c.Get(ctx, "fence:"+tag+":token").Result()
	if err != nil || n != lease.Token().String() {
		t.Errorf("counter = %q, %v; want %q", n, err, lease.Token())
	}
	if ttl, err := c.TTL(ctx, "fence:"+tag+":token").Result(); err != nil || ttl != -1 {
		t.Errorf("counter TTL = %v, %v; want -1 (no expiry)", ttl, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "fence:"+tag+":token").Result(); err != nil || n != 1 {
		t.Errorf("counter exists after release = %d, %v; want 1 (never deleted)", n, err)
	}
}

func TestLocker_Acquire_LockKeyOfWrongType(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	k := l.keysFor(name)
	if err := c.LPush(ctx, k.lock, "x").Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, name, time.Second)
	if !errors.Is(err, ErrWrongType) || lease != nil || !strings.HasPrefix(err.Error(), "redis: acquire") {
		t.Fatalf("Acquire on a list key = %v, %v; want nil and a redis: acquire error matching ErrWrongType", lease, err)
	}
	if errors.Is(err, fence.ErrNotAcquired) {
		t.Errorf("error %v matches ErrNotAcquired; want only ErrWrongType", err)
	}
	if n, _ := c.Exists(ctx, k.token).Result(); n != 0 {
		t.Errorf("counter exists after refused acquire: want it untouched")
	}
	// Release and Renew of a foreign key are "not held", never a deletion.
	if err := l.Release(ctx, name, driver.NewLeaseID()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release on a list key = %v, want fence.ErrNotHeld", err)
	}
	if err := l.Renew(ctx, name, driver.NewLeaseID(), time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Renew on a list key = %v, want fence.ErrNotHeld", err)
	}
	// Revoke refuses, as Acquire does: a foreign key is no lease to end.
	if err := l.Revoke(ctx, name); !errors.Is(err, ErrWrongType) || !strings.HasPrefix(err.Error(), `redis: revoke "`) {
		t.Errorf("Revoke on a list key = %v, want a redis: revoke error matching ErrWrongType", err)
	}
	if typ, _ := c.Type(ctx, k.lock).Result(); typ != "list" {
		t.Errorf("lock key type after release = %q, want list (untouched)", typ)
	}
}

func TestLocker_Acquire_CounterNotAToken(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	for _, bad := range []string{"abc", "-5", "0x10", "1.5", "12345678901234567", "9223372036854775807", " 7", ""} {
		name := uniqueName(t)
		k := l.keysFor(name)
		if err := c.Set(ctx, k.token, bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(ctx, name, time.Second); !errors.Is(err, ErrWrongType) {
			t.Errorf("Acquire with counter %q = %v, want ErrWrongType", bad, err)
		}
		if n, _ := c.Exists(ctx, k.lock).Result(); n != 0 {
			t.Errorf("counter %q: lock key was set; want no grant", bad)
		}
		if got, _ := c.Get(ctx, k.token).Result(); got != bad {
			t.Errorf("counter after refused acquire = %q, want %q (unchanged)", got, bad)
		}
		if err := l.Heal(ctx, name, 5); !errors.Is(err, ErrWrongType) {
			t.Errorf("Heal with counter %q = %v, want ErrWrongType", bad, err)
		}
	}
	name := uniqueName(t)
	if err := c.HSet(ctx, l.keysFor(name).token, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, name, time.Second); !errors.Is(err, ErrWrongType) {
		t.Errorf("Acquire with a hash counter = %v, want ErrWrongType", err)
	}
	if _, err := l.Inspect(ctx, name); !errors.Is(err, ErrWrongType) {
		t.Errorf("Inspect with a hash counter = %v, want ErrWrongType", err)
	}
}

func TestLocker_Acquire_FailsClosedAtMaxToken(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	k := l.keysFor(name)
	if err := c.Set(ctx, k.token, uint64(fence.MaxToken-1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	lease := mustAcquire(t, ctx, l, name, time.Second)
	if lease.Token() != fence.MaxToken {
		t.Fatalf("token = %d, want MaxToken %d", lease.Token(), fence.MaxToken)
	}
	if info, err := l.Inspect(ctx, name); err != nil || info.Token != fence.MaxToken || info.LastToken != fence.MaxToken {
		t.Errorf("Inspect at MaxToken = %+v, %v; want holder and last token %d (exact, not a rounded double)", info, err, fence.MaxToken)
	}
	if v, _ := c.Get(ctx, k.lock).Result(); v != lease.ID()+" 9007199254740991" {
		t.Errorf("lock value = %q, want the lease id and 9007199254740991", v)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := l.Acquire(ctx, name, time.Second)
	if !errors.Is(err, fence.ErrTokenExhausted) || !strings.HasPrefix(err.Error(), "redis: acquire") {
		t.Fatalf("Acquire at MaxToken = %v, want a redis: acquire error matching fence.ErrTokenExhausted", err)
	}
	if n, _ := c.Exists(ctx, k.lock).Result(); n != 0 {
		t.Errorf("lock key set after exhaustion; want no grant")
	}
	if got, _ := c.Get(ctx, k.token).Result(); got != strconv.FormatUint(uint64(fence.MaxToken), 10) {
		t.Errorf("counter = %s after exhaustion, want %d (unchanged)", got, fence.MaxToken)
	}
}

func TestLocker_Release_RetriedAfterExpiry_LeavesNewHolder(t *testing.T) {
	l, _ := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	old := mustAcquire(t, ctx, l, name, 50*time.Millisecond)
	// Waiting for the old lease's expiry: the script's PTTL wakes the waiter.
	cur, err := l.Acquire(ctx, name, 10*time.Second, fence.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire after expiry: %v", err)
	}
	if cur.Token() <= old.Token() {
		t.Errorf("new token %d, want > old %d", cur.Token(), old.Token())
	}
	for i := 0; i < 2; i++ {
		if err := l.Release(ctx, name, old.ID()); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("release %d of the expired lease = %v, want fence.ErrNotHeld", i, err)
		}
		if err := l.Renew(ctx, name, old.ID(), time.Second); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("renew %d of the expired lease = %v, want fence.ErrNotHeld", i, err)
		}
	}
	info, err := l.Inspect(ctx, name)
	if err != nil || !info.Held || info.Token != cur.Token() {
		t.Errorf("Inspect = %+v, %v; want held by token %d", info, err, cur.Token())
	}
	if err := cur.Release(ctx); err != nil {
		t.Errorf("release of the current lease: %v", err)
	}
}

// TestLocker_Wait_HolderExpiry_RetriedPromptly is the regression test of a waiter
// that slept a whole PollInterval when its try at the holder's expiry found the key
// in its last millisecond (PTTL 0). With PollInterval an hour, such a miss cannot
// pass for slowness: the wait, bounded at the holder's deadline plus missBound, ends
// without the lock. Before the fix most rounds missed on an idle machine and a few
// in twenty under load; missBound only has to absorb scheduling delays on a loaded
// machine, which are far below a PollInterval.
func TestLocker_Wait_HolderExpiry_RetriedPromptly(t *testing.T) {
	const (
		rounds    = 20
		ttl       = 50 * time.Millisecond
		missBound = 500 * time.Millisecond
	)
	l, _ := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	var worst time.Duration
	for i := 0; i < rounds; i++ {
		name := uniqueName(t)
		old, err := l.Acquire(ctx, name, ttl) // never released
		if err != nil {
			t.Fatal(err)
		}
		cur, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(ttl+missBound))
		if err != nil {
			t.Fatalf("round %d: waiter not granted within %v after a %v lease that was never released: %v", i, missBound, ttl, err)
		}
		late := time.Since(old.Deadline())
		worst = max(worst, late)
		if cur.Token() <= old.Token() {
			t.Errorf("round %d: token %d, want > %d", i, cur.Token(), old.Token())
		}
		if err := cur.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("latest grant: %v after the holder's deadline", worst)
}

func TestRetryAfter_ShortPTTLRetriesSoonThenBacksOff(t *testing.T) {
	const poll = time.Second
	for _, c := range []struct {
		pttl  int64
		quick int
		want  time.Duration
		next  int
	}{
		{-1, 0, poll, 0},                    // no expiry: poll
		{-1, 5, poll, 0},                    // and the streak ends
		{5000, 0, poll, 0},                  // longer than the poll: poll
		{100, 2, 101 * time.Millisecond, 0}, // the key is gone a millisecond after PTTL
		{2, 3, 3 * time.Millisecond, 0},     // a fresh PTTL ends the streak
		{0, 0, time.Millisecond, 1},         // last millisecond: retry at once, not a poll
		{1, 0, 2 * time.Millisecond, 1},     // likewise
		{0, quickRetries - 1, time.Millisecond, quickRetries},
		{0, quickRetries, 2 * time.Millisecond, quickRetries + 1}, // then back off
		{0, quickRetries + 1, 4 * time.Millisecond, quickRetries + 2},
		{1, quickRetries + 8, 512 * time.Millisecond, quickRetries + 9},
		{0, quickRetries + 10, poll, quickRetries + 11}, // up to the poll
		{0, 1 << 20, poll, 1<<20 + 1},                   // no overflow
	} {
		got, next := retryAfter(c.pttl, c.quick, poll)
		if got != c.want || next != c.next {
			t.Errorf("retryAfter(%d, %d) = %v, %d; want %v, %d", c.pttl, c.quick, got, next, c.want, c.next)
		}
	}
}

// waitFor calls check every interval until it returns nil, and fails t with
// check's last error once within has passed.
func waitFor(t testing.TB, within, interval time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(interval)
	}
}

// waitSubscribers waits until n clients subscribe to name's wake channel, as l
// subscribes (sharded or classic pub/sub), on c's server (a Cluster's: the
// channel's master).
func waitSubscribers(t testing.TB, c goredis.UniversalClient, l *Locker, name string, n int64) {
	t.Helper()
	ctx := context.Background()
	ch := l.keysFor(name).wake
	waitFor(t, 5*time.Second, 100*time.Microsecond, func() error {
		at := c
		if cc, ok := c.(*goredis.ClusterClient); ok {
			m, err := cc.MasterForKey(ctx, ch)
			if err != nil {
				return err
			}
			at = m
		}
		count := at.PubSubShardNumSub
		if l.opts.ClassicPubSub {
			count = at.PubSubNumSub
		}
		if got, err := count(ctx, ch).Result(); err != nil || got[ch] != n {
			return fmt.Errorf("subscribers of %s = %v, %v; want %d", ch, got, err, n)
		}
		return nil
	})
}

// wakesOnRelease starts a waiter on holder's lock, releases holder once the waiter's
// subscription is confirmed on c's server, and checks that the release woke the
// waiter: it gets the next token, and its subscription is closed afterwards. With
// l's PollInterval and holder's TTL an hour, only the release's message wakes it in
// time.
func wakesOnRelease(t *testing.T, ctx context.Context, l *Locker, c goredis.UniversalClient, holder *fence.Lease) {
	t.Helper()
	wakesOnEnd(t, ctx, l, c, holder, holder.Release)
}

// wakesOnRevoke is wakesOnRelease with Revoke ending holder's lease; the revoked
// holder's Release then says ErrNotHeld.
func wakesOnRevoke(t *testing.T, ctx context.Context, l *Locker, c goredis.UniversalClient, holder *fence.Lease) {
	t.Helper()
	wakesOnEnd(t, ctx, l, c, holder, func(ctx context.Context) error { return l.Revoke(ctx, holder.Name()) })
	if err := holder.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("revoked holder's Release = %v, want fence.ErrNotHeld", err)
	}
}

// wakesOnEnd is wakesOnRelease with end ending holder's lease.
func wakesOnEnd(t *testing.T, ctx context.Context, l *Locker, c goredis.UniversalClient, holder *fence.Lease, end func(context.Context) error) {
	t.Helper()
	name := holder.Name()
	type result struct {
		lease *fence.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, time.Hour, fence.WithWait(15*time.Second))
		done <- result{lease, err}
	}()
	waitSubscribers(t, c, l, name, 1)
	released := time.Now()
	if err := end(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	handoff := time.Since(released)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	t.Logf("handoff %v", handoff)
	if r.lease.Token() != holder.Token()+1 {
		t.Errorf("waiter token %d, want %d", r.lease.Token(), holder.Token()+1)
	}
	if handoff > 5*time.Second {
		t.Errorf("handoff took %v, want well under the 1h poll", handoff)
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Errorf("waiter's release: %v", err)
	}
	waitSubscribers(t, c, l, name, 0) // the waiter's subscription is closed
}

func TestLocker_Wait_WokenByRelease(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	wakesOnRelease(t, ctx, l, c, mustAcquire(t, ctx, l, uniqueName(t), time.Hour))
}

func TestLocker_Wait_ManyWaiters_EachGetsTheLockOnce(t *testing.T) {
	l, _ := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	const waiters = 5
	var (
		mu     sync.Mutex
		tokens []fence.Token
		wg     sync.WaitGroup
		inside atomic.Int32
	)
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(ctx, name, time.Hour, fence.WithWait(15*time.Second))
			if err != nil {
				t.Errorf("waiter: %v", err)
				return
			}
			if n := inside.Add(1); n != 1 {
				t.Errorf("%d holders at once, want 1", n)
			}
			mu.Lock()
			tokens = append(tokens, lease.Token())
			mu.Unlock()
			inside.Add(-1)
			if err := lease.Release(ctx); err != nil {
				t.Errorf("release: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(tokens) != waiters {
		t.Fatalf("got %d grants, want %d", len(tokens), waiters)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("grant %d token %d not above previous %d (in grant order): %v", i, tokens[i], tokens[i-1], tokens)
		}
	}
}

func TestLocker_Wait_WokenByExpiry(t *testing.T) {
	l, _ := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	if _, err := l.Acquire(ctx, name, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lease, err := l.Acquire(ctx, name, time.Second, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	defer lease.Release(ctx)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waiter woke after %v, want about the holder's 200ms TTL", d)
	}
}

func TestLocker_Wait_ContextCancelled(t *testing.T) {
	l, _ := newLocker(t, nil)
	name := uniqueName(t)
	holder, err := l.Acquire(ctxT(t), name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(ctx, name, time.Second, fence.WithWait(fence.WaitForever))
	var held *fence.HeldError
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &held) {
		t.Fatalf("Acquire with expired ctx = %v, want ErrNotAcquired, a *HeldError and context.DeadlineExceeded", err)
	}
	if want := fmt.Sprintf("redis: lock %q not acquired after waiting ", name); strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error message %q: want one line starting with %q", err, want)
	}
	if held.ExpiresIn <= 0 || held.ExpiresIn > time.Hour {
		t.Errorf("HeldError.ExpiresIn = %v, want in (0, 1h]", held.ExpiresIn)
	}
	// Wait bounded by WithWait, not by ctx: ErrNotAcquired without a ctx error.
	_, err = l.Acquire(ctxT(t), name, time.Second, fence.WithWait(30*time.Millisecond))
	if !errors.Is(err, fence.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire with a 30ms wait = %v, want ErrNotAcquired only", err)
	}
}

func TestLocker_Close_EndsWaitersAndCalls(t *testing.T) {
	l, _ := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	holder := mustAcquire(t, ctx, l, name, time.Hour)
	defer func() {
		l2, _ := newLocker(t, nil)
		_ = l2.Release(ctx, name, holder.ID())
	}()
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, name, time.Second, fence.WithWait(fence.WaitForever))
		done <- err
	}()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, fence.ErrClosed) {
		t.Errorf("waiter after Close = %v, want fence.ErrClosed", err)
	}
	if _, err := l.Acquire(ctx, uniqueName(t), time.Second); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want fence.ErrClosed", err)
	}
	if err := l.Revoke(ctx, name); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Revoke after Close = %v, want fence.ErrClosed", err)
	}
}

func TestLocker_BadInput(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx := ctxT(t)
	id := driver.NewLeaseID()
	checks := map[string]error{
		"empty name":      func() error { _, err := l.Acquire(ctx, "", time.Second); return err }(),
		"long name":       func() error { _, err := l.Acquire(ctx, strings.Repeat("x", 256), time.Second); return err }(),
		"control char":    func() error { _, err := l.Acquire(ctx, "a\nb", time.Second); return err }(),
		"zero ttl":        func() error { _, err := l.Acquire(ctx, "x", 0); return err }(),
		"sub-ms ttl":      func() error { _, err := l.Acquire(ctx, "x", 1500*time.Microsecond); return err }(),
		"renew bad lease": l.Renew(ctx, "x", "has space", time.Second),
		"renew bad ttl":   l.Renew(ctx, "x", id, -time.Second),
		"release empty":   l.Release(ctx, "x", ""),
		"heal zero":       l.Heal(ctx, "x", 0),
		"heal too big":    l.Heal(ctx, "x", fence.MaxToken+1),
		"inspect bad":     func() error { _, err := l.Inspect(ctx, ""); return err }(),
		"revoke bad":      l.Revoke(ctx, "a\nb"),
		"list bad prefix": func() error { _, err := l.List(ctx, fence.ListOptions{Prefix: "a\x00"}); return err }(),
	}
	for what, err := range checks {
		if !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "redis: ") {
			t.Errorf("%s: error = %v, want a redis: error matching fence.ErrInvalid", what, err)
		}
	}
}

func TestLocker_Unreachable(t *testing.T) {
	servertest.SkipIfShort(t)
	port, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	l, err := NewLocker(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	_, err = l.Acquire(ctx, "x", time.Second)
	if !errors.Is(err, fence.ErrUnavailable) || !strings.HasPrefix(err.Error(), `redis: acquire "x"`) {
		t.Errorf("Acquire on a closed port = %v, want a redis: acquire error matching fence.ErrUnavailable", err)
	}
	if err := l.Release(ctx, "x", driver.NewLeaseID()); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Release on a closed port = %v, want fence.ErrUnavailable", err)
	}
	if err := l.Heal(ctx, "x", 3); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Heal on a closed port = %v, want fence.ErrUnavailable", err)
	}
	if err := l.Revoke(ctx, "x"); !errors.Is(err, fence.ErrUnavailable) || !strings.HasPrefix(err.Error(), `redis: revoke "x": `) {
		t.Errorf("Revoke on a closed port = %v, want a redis: revoke error matching fence.ErrUnavailable", err)
	}
}

func TestLocker_Timeout_IsUnavailableAndGrantIsReleased(t *testing.T) {
	s := server(t)
	// ContextTimeoutEnabled: go-redis then bounds reads by the ctx deadline.
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := NewLocker(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	name := uniqueName(t)
	// Freeze the server for 300ms: the acquire's reply comes too late for its ctx.
	if err := c.Do(ctx, "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = l.Acquire(actx, name, time.Hour)
	cancel()
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire during a pause = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	_ = l.Close() // waits for the background release of the lost grant
	l2, err := NewLocker(newClient(t, s.Addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := l2.Inspect(ctx, name)
	if err != nil || info.Held {
		t.Errorf("Inspect after lost reply = %+v, %v; want not held (grant released)", info, err)
	}
	t.Logf("counter after the lost reply: %d (1: the server granted it late and the Locker released it)", info.LastToken)
}

func TestLocker_NOSCRIPT_AfterScriptFlush(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	for i := 0; i < 2; i++ {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(ctx, name, time.Second)
		if err != nil {
			t.Fatalf("Acquire after SCRIPT FLUSH: %v", err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := lease.Renew(ctx, time.Second); err != nil {
			t.Fatalf("Renew after SCRIPT FLUSH: %v", err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release after SCRIPT FLUSH: %v", err)
		}
	}
}

func TestLocker_Heal_RaisesNeverLowers(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	if err := l.Heal(ctx, name, 41); err != nil {
		t.Fatal(err)
	}
	lease := mustAcquire(t, ctx, l, name, time.Second)
	if lease.Token() != 42 {
		t.Errorf("token after Heal(41) = %d, want 42", lease.Token())
	}
	if err := l.Heal(ctx, name, 7); err != nil {
		t.Fatal(err)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil || info.LastToken != 42 || !info.Held || info.Token != 42 {
		t.Errorf("Inspect after Heal(7) = %+v, %v; want held, token 42, last 42 (heal never lowers, keeps the lease)", info, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("release after heal: %v", err)
	}
}

// Issue 29: a heal moves its own name's counter key and no other; it may ask
// for at most fence.MaxHealAhead above the name's counter, checked inside the
// script: the 9007199254740991, and last+MaxHealAhead+1 (above 2^32,
// where a double still holds every integer), are refused with a
// *fence.HealBoundError naming the counter, and nothing changes.
func TestLocker_Heal_OnlyOwnNameWithinMaxHealAhead(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	a, b := uniqueName(t), uniqueName(t)
	grant := func(name string) fence.Token {
		t.Helper()
		lease := mustAcquire(t, ctx, l, name, time.Second)
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return lease.Token()
	}
	a1, b1 := grant(a), grant(b)
	for _, seen := range []fence.Token{fence.MaxToken, a1 + fence.MaxHealAhead + 1} {
		err := l.Heal(ctx, a, seen)
		var hb *fence.HealBoundError
		if !errors.As(err, &hb) || !errors.Is(err, fence.ErrInvalid) || hb.Name != a || hb.Seen != seen || hb.Last != a1 {
			t.Fatalf("Heal(%d) = %v; want a *fence.HealBoundError{%q, %d, last %d} matching ErrInvalid", seen, err, a, seen, a1)
		}
	}
	if got, _ := c.Get(ctx, l.keysFor(a).token).Result(); got != strconv.FormatUint(uint64(a1), 10) {
		t.Fatalf("counter after the refused heals = %s, want %d (unchanged)", got, a1)
	}
	seen := a1 + fence.MaxHealAhead
	if err := l.Heal(ctx, a, seen); err != nil {
		t.Fatalf("Heal(last+MaxHealAhead = %d) = %v, want nil", seen, err)
	}
	if got := grant(a); got != seen+1 {
		t.Fatalf("token after Heal(%d) = %d, want %d", seen, got, seen+1)
	}
	if got := grant(b); got != b1+1 {
		t.Fatalf("the other name after the heal: token %d, want %d, as without it", got, b1+1)
	}
	if err := l.Heal(ctx, uniqueName(t), fence.MaxHealAhead); err != nil {
		t.Fatalf("Heal(a name never used, MaxHealAhead) = %v, want nil (its counter is 0)", err)
	}
}

func TestLocker_Heal_FromGuardRejection(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	lease := mustAcquire(t, ctx, l, name, time.Second)
	_ = lease.Release(ctx)
	// A guard has already seen token 100 (as after a failover that lost increments).
	highest := fence.Fence{Name: name, Token: 100, LeaseID: driver.NewLeaseID()}
	lease = mustAcquire(t, ctx, l, name, time.Second)
	rejected := fence.Admit("row", highest, lease.Fence())
	if !errors.Is(rejected, fence.ErrStaleToken) {
		t.Fatalf("Admit(%d after 100) = %v, want ErrStaleToken", lease.Token(), rejected)
	}
	_ = lease.Release(ctx)
	if err := fence.Heal(ctx, l, name, fmt.Errorf("put: %w", rejected)); err != nil {
		t.Fatal(err)
	}
	lease = mustAcquire(t, ctx, l, name, time.Second)
	defer lease.Release(ctx)
	if err := fence.Admit("row", highest, lease.Fence()); err != nil || lease.Token() != 101 {
		t.Errorf("after heal: token %d, Admit = %v; want 101, nil", lease.Token(), err)
	}
	if got, _ := c.Get(ctx, l.keysFor(name).token).Result(); got != "101" {
		t.Errorf("counter = %s, want 101", got)
	}
}

func TestLocker_InspectAndList(t *testing.T) {
	l, _ := newLocker(t, &Options{Prefix: "list-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"})
	ctx := ctxT(t)
	info, err := l.Inspect(ctx, "never")
	if err != nil || info.Held || info.LastToken != 0 || info.Name != "never" {
		t.Errorf("Inspect(never) = %+v, %v; want not held, last token 0", info, err)
	}
	names := []string{"job/b", "job/a{1}", "job/*", "other"}
	leases := map[string]*fence.Lease{}
	for _, n := range names {
		lease := mustAcquire(t, ctx, l, n, time.Minute)
		leases[n] = lease
	}
	_ = leases["job/b"].Release(ctx)
	got, err := l.List(ctx, fence.ListOptions{Prefix: "job/", All: true})
	if err != nil {
		t.Fatal(err)
	}
	var gotNames []string
	for _, i := range got {
		gotNames = append(gotNames, fmt.Sprintf("%s:%v:%d", i.Name, i.Held, i.LastToken))
	}
	want := "job/*:true:1 job/a{1}:true:1 job/b:false:1"
	if strings.Join(gotNames, " ") != want {
		t.Errorf("List(job/) = %v, want %s", gotNames, want)
	}
	if got, err := l.List(ctx, fence.ListOptions{Prefix: "job/"}); err != nil || len(got) != 2 || got[0].Name != "job/*" || got[1].Name != "job/a{1}" {
		t.Errorf("List(job/, held) = %v, %v; want job/* and job/a{1}, not the released job/b", got, err)
	}
	if got, err := l.List(ctx, fence.ListOptions{Limit: 2, All: true}); err != nil || len(got) != 2 || got[0].Name != "job/*" {
		t.Errorf("List(\"\", 2) = %v, %v; want the first 2 names", got, err)
	}
	if got, err := l.List(ctx, fence.ListOptions{Prefix: "job/*"}); err != nil || len(got) != 1 {
		t.Errorf("List(job/*) = %v, %v; want only the name job/* (glob characters are literal)", got, err)
	}
	i := got[0]
	if i.ExpiresIn <= 0 || i.ExpiresIn > time.Minute || i.Token != 1 {
		t.Errorf("held info = %+v, want token 1, expiry in (0, 1m]", i)
	}
}

// TestLocker_Durability_FailsClosed asks for acknowledgements the package's server
// cannot give: it has no replica, and runs without appendonly (and Redis < 7.2
// lacks WAITAOF). No lease is handed out, the grant is released, its token used up.
func TestLocker_Durability_FailsClosed(t *testing.T) {
	for what, opts := range map[string]Options{
		"WaitReplicas 1 without a replica": {WaitReplicas: 1, WaitTimeout: 30 * time.Millisecond},
		"WaitAOFLocal 1 without AOF":       {WaitAOFLocal: 1, WaitTimeout: 30 * time.Millisecond},
	} {
		l, _ := newLocker(t, &opts)
		ctx := ctxT(t)
		name := uniqueName(t)
		lease, err := l.Acquire(ctx, name, time.Hour)
		if !errors.Is(err, ErrNotReplicated) || !errors.Is(err, fence.ErrUnavailable) || lease != nil {
			t.Fatalf("Acquire with %s = %v, %v; want ErrNotReplicated", what, lease, err)
		}
		t.Logf("%s: %v", what, err)
		if info, err := l.Inspect(ctx, name); err != nil || info.Held || info.LastToken != 1 {
			t.Errorf("%s: Inspect = %+v, %v; want not held (released), last token 1 (used up)", what, info, err)
		}
	}
}

func TestLocker_ServerRestart_ScriptCacheLost_AOFKeepsCounter(t *testing.T) {
	servertest.SkipIfShort(t)
	// AOF with fsync always: the counter survives the restart; the script cache does not.
	s := servertest.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	l, err := NewLocker(newClient(t, s.Addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxT(t)
	first := mustAcquire(t, ctx, l, "restart", time.Second)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// The pooled connection is dead and the server answers NOSCRIPT: a clear
	// ErrUnavailable at worst, never a wrong grant; the next call succeeds.
	var lease *fence.Lease
	for attempt := 0; attempt < 3; attempt++ {
		if lease, err = l.Acquire(ctx, "restart", time.Second); err == nil {
			break
		}
		if !errors.Is(err, fence.ErrUnavailable) {
			t.Fatalf("Acquire after restart = %v, want success or fence.ErrUnavailable", err)
		}
	}
	if err != nil {
		t.Fatalf("Acquire after restart, 3 attempts: %v", err)
	}
	defer lease.Release(ctx)
	if lease.Token() != first.Token()+1 {
		t.Errorf("token after restart %d, want %d (counter persisted by AOF)", lease.Token(), first.Token()+1)
	}
}

func TestLocker_ClassicPubSub_WokenByRelease(t *testing.T) {
	l, c := newLocker(t, &Options{ClassicPubSub: true, PollInterval: time.Hour})
	ctx := ctxT(t)
	wakesOnRelease(t, ctx, l, c, mustAcquire(t, ctx, l, uniqueName(t), time.Hour))
}
