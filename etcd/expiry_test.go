package etcd_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
)

// fastOpts are the options cluster mode runs with.
var fastOpts = &etcd.Options{FastExpiry: true, FIFO: true}

// A holder that stops renewing (a crash, a pause: its lease is never renewed nor
// released) is replaced soon after its TTL, by a waiter on another Locker, and
// never before its deadline by the holder's clock (P6). Each kind of holder: a
// lock, the permits of a full semaphore, and a shared lease that an exclusive
// waiter waits for. etcd alone would end a TTL of 1.5s when its etcd lease of 2s
// expires, 500ms to 1s after the deadline: the bound of 450ms (the expected figure
// is about 70ms, see BenchmarkExpiryHandoff) tells the two apart.
func TestLocker_FastExpiry_SilentHolderReplacedSoonAfterTTL(t *testing.T) {
	const (
		ttl   = 1500 * time.Millisecond
		bound = 450 * time.Millisecond
	)
	for _, c := range []struct {
		what   string
		holder []fence.AcquireOption
		holds  int
		waiter []fence.AcquireOption
	}{
		{"lock", nil, 1, nil},
		{"semaphore", []fence.AcquireOption{fence.WithLimit(2)}, 2, []fence.AcquireOption{fence.WithLimit(2)}},
		{"shared", []fence.AcquireOption{fence.WithShared()}, 1, nil},
	} {
		t.Run(c.what, func(t *testing.T) {
			ctx, _, name := setup(t, "fast-"+c.what)
			holder := etcd.NewLocker(client(t), fastOpts)
			waiter := etcd.NewLocker(client(t), fastOpts)
			var last *fence.Lease
			for range c.holds {
				last = mustAcquire(t, ctx, holder, name, ttl, c.holder...)
			}
			b, err := waiter.Acquire(ctx, name, 10*time.Second, append(c.waiter, fence.WithWait(10*time.Second))...)
			at := time.Now()
			if err != nil {
				t.Fatalf("waiter: Acquire = %v; want a lease", err)
			}
			t.Cleanup(func() { b.Release(context.Background()) })
			if !at.After(last.Deadline()) {
				t.Fatalf("waiter granted %v before the silent holder's deadline (P6)", last.Deadline().Sub(at))
			}
			if late := at.Sub(last.Deadline()); late > bound {
				t.Fatalf("waiter granted %v after the silent holder's deadline; want < %v (TTL %v)", late, bound, ttl)
			}
			if b.Token() <= last.Token() {
				t.Fatalf("waiter's token %d; want > %d", b.Token(), last.Token())
			}
			if err := last.Renew(ctx, ttl); !errors.Is(err, fence.ErrNotHeld) {
				t.Fatalf("silent holder's Renew = %v; want fence.ErrNotHeld", err)
			}
		})
	}
}

// A holder that keeps renewing is never ended by a waiter, however often it
// renews, and no lease is granted while an earlier one is live (P6): workers on
// their own Lockers take a lock in turn, renew it every 50ms (a TTL of 300ms),
// and then release it or fall silent. A renewal that a waiter's expiry beat would
// fail with fence.ErrNotHeld before the holder's deadline; a grant that overlapped
// an earlier lease would come, by token order, before that lease's end.
func TestLocker_FastExpiry_RenewedHolderNeverEnded(t *testing.T) {
	const (
		ttl     = 300 * time.Millisecond
		workers = 4
		run     = 6 * time.Second
	)
	ctx, _, name := setup(t, "fast-renewed")
	type held struct {
		token    fence.Token
		acquired time.Time // when Acquire returned: after the grant
		end      time.Time // the release call, or the last deadline of a silent holder
	}
	var (
		mu     sync.Mutex
		leases []held
		wg     sync.WaitGroup
		stop   = time.Now().Add(run)
	)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := etcd.NewLocker(client(t), fastOpts)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for n := 0; n < 1000 && time.Now().Before(stop); n++ {
				a, err := l.Acquire(ctx, name, ttl, fence.WithWait(5*time.Second))
				if err != nil {
					t.Errorf("worker %d: Acquire = %v", i, err)
					return
				}
				h := held{token: a.Token(), acquired: time.Now()}
				hold := time.Now().Add(time.Duration(rng.IntN(600)) * time.Millisecond)
				for time.Now().Before(hold) {
					time.Sleep(50 * time.Millisecond)
					err := a.Renew(ctx, ttl)
					if errors.Is(err, fence.ErrNotHeld) && time.Now().Before(a.Deadline()) {
						t.Errorf("worker %d: Renew = ErrNotHeld %v before the deadline: a live lease was ended (P6)", i, a.Deadline().Sub(time.Now()))
						return
					}
					if err != nil {
						break // expired by the holder's clock: a slow renewal, not a fault
					}
				}
				if rng.IntN(2) == 0 {
					h.end = time.Now()
					a.Release(ctx)
				} else {
					h.end = a.Deadline() // silent: the waiters must wait out its TTL
				}
				mu.Lock()
				leases = append(leases, h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(leases, func(a, b held) int { return int(a.token) - int(b.token) })
	for i := 1; i < len(leases); i++ {
		prev, cur := leases[i-1], leases[i]
		if !cur.acquired.After(prev.end) {
			t.Errorf("token %d granted %v before the end of token %d (P6)", cur.token, prev.end.Sub(cur.acquired), prev.token)
		}
	}
	if len(leases) < 10 {
		t.Fatalf("%d grants in %v; want at least 10", len(leases), run)
	}
	t.Logf("%d grants", len(leases))
}

// waiterKeys returns how many waiter keys name has.
func waiterKeys(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name+"\x00w", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("Get waiter keys = %v", err)
	}
	return resp.Count
}

// waitWaiters waits until name has n waiter keys, or fails t after 5s.
func waitWaiters(t *testing.T, ctx context.Context, cli *clientv3.Client, name string, n int64) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if waiterKeys(t, ctx, cli, name) == n {
			return
		}
	}
	t.Fatalf("name has %d waiter keys after 5s; want %d", waiterKeys(t, ctx, cli, name), n)
}

// Waiters are granted in the order they started to wait (P10), each on a Locker of
// its own; a waiter that gives up leaves the queue at once; an acquire that
// does not wait (a new arrival, trying all the while) is never granted before the
// queue is empty.
func TestLocker_FIFO_GrantedInArrivalOrder(t *testing.T) {
	const waiters = 5
	ctx, cli, name := setup(t, "fifo")
	h := mustAcquire(t, ctx, etcd.NewLocker(client(t), fastOpts), name, 10*time.Second)
	type grant struct {
		who   int
		token fence.Token
	}
	grants := make(chan grant, waiters)
	cancels := make([]context.CancelFunc, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		l := etcd.NewLocker(client(t), fastOpts)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := l.Acquire(wctx, name, 10*time.Second, fence.WithWait(20*time.Second))
			if err != nil {
				if wctx.Err() == nil {
					t.Errorf("waiter %d: Acquire = %v", i, err)
				}
				return
			}
			grants <- grant{i, a.Token()}
			time.Sleep(20 * time.Millisecond) // a new arrival tries meanwhile
			a.Release(ctx)
		}()
		waitWaiters(t, ctx, cli, name, int64(i+1))
	}
	// Waiter 2 gives up: its key goes as its Acquire returns, well before its
	// waiter lease could expire (etcd's minimum lease TTL, 1s here).
	gaveUp := time.Now()
	cancels[2]()
	waitWaiters(t, ctx, cli, name, waiters-1)
	if d := time.Since(gaveUp); d > 500*time.Millisecond {
		t.Fatalf("the waiter that gave up left the queue after %v; want < 500ms", d)
	}

	arrival := etcd.NewLocker(client(t), fastOpts)
	arrived := make(chan fence.Token, 1)
	go func() {
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
			if a, err := arrival.Acquire(ctx, name, time.Second); err == nil {
				arrived <- a.Token()
				a.Release(ctx)
				return
			}
		}
		arrived <- 0
	}()
	if err := h.Release(ctx); err != nil {
		t.Fatalf("holder: Release = %v", err)
	}
	wg.Wait()
	close(grants)
	var order []int
	var last fence.Token
	for g := range grants {
		order = append(order, g.who)
		last = max(last, g.token)
	}
	if want := []int{0, 1, 3, 4}; !slices.Equal(order, want) {
		t.Fatalf("grant order %v; want %v", order, want)
	}
	if tok := <-arrived; tok != 0 && tok < last {
		t.Fatalf("a new arrival was granted token %d, before the queue's last grant %d", tok, last)
	}
	for _, c := range cancels {
		c()
	}
}

// beatKey returns the beat key of name's lock key as etcd has it (nil: none).
func beatKey(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(ctx, etcd.DefaultPrefix+"beat/"+name)
	if err != nil {
		t.Fatalf("Get beat key = %v", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// Each renewal writes the beat (a new revision); a renewal to another TTL moves the
// beat with the lock key to the new etcd lease, and the TTL a beat holds rises
// but never falls (a shorter renewal whose reply is lost leaves the holder the
// longer deadline). A Locker without FastExpiry writes the beat of such a grant
// too; Release deletes it.
func TestLocker_FastExpiry_RenewWritesBeat(t *testing.T) {
	ctx, cli, name := setup(t, "fast-beat")
	l := etcd.NewLocker(client(t), fastOpts)
	a := mustAcquire(t, ctx, l, name, 2*time.Second)
	b0 := beatKey(t, ctx, cli, name)
	if b0 == nil || string(b0.Value) != "000000002000" || b0.Lease != lockKey(t, ctx, cli, name).Lease {
		t.Fatalf("beat after the grant = %v; want 000000002000 under the lock key's etcd lease", b0)
	}
	steps := []struct {
		l     *etcd.Locker
		ttl   time.Duration
		value string
	}{
		{l, 2 * time.Second, "000000002000"},
		{l, 5 * time.Second, "000000005000"}, // a new etcd lease
		{l, time.Second, "000000005000"},     // shorter: the beat keeps the longer TTL
		{etcd.NewLocker(client(t), nil), 5 * time.Second, "000000005000"},
	}
	prev := b0
	for i, s := range steps {
		if err := s.l.Renew(ctx, name, a.ID(), s.ttl); err != nil {
			t.Fatalf("step %d: Renew(%v) = %v", i, s.ttl, err)
		}
		b := beatKey(t, ctx, cli, name)
		lk := lockKey(t, ctx, cli, name)
		if b == nil || b.ModRevision <= prev.ModRevision || string(b.Value) != s.value || b.Lease != lk.Lease {
			t.Fatalf("step %d: beat after Renew(%v) = %v; want a newer revision than %d holding %s under the lock key's etcd lease %x",
				i, s.ttl, b, prev.ModRevision, s.value, lk.Lease)
		}
		prev = b
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if b := beatKey(t, ctx, cli, name); b != nil {
		t.Fatalf("beat after Release = %v; want none", b)
	}
}

// A waiter whose process dies (here its client closes under it, so that neither
// its keep-alives nor its clean-up reach etcd) leaves the queue when its short
// waiter lease expires (etcd's minimum lease TTL plus up to 500ms), not after the
// TTL it asked for: the waiter behind it is granted within a few seconds of the
// release, though the dead waiter asked for 30s.
func TestLocker_FIFO_DeadWaiterLeavesSoon(t *testing.T) {
	ctx, cli, name := setup(t, "fifo-dead")
	h := mustAcquire(t, ctx, etcd.NewLocker(client(t), fastOpts), name, 30*time.Second)
	dyingCli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dyingCli.Close() })
	dying := etcd.NewLocker(dyingCli, fastOpts)
	dead := make(chan error, 1)
	go func() {
		_, err := dying.Acquire(ctx, name, 30*time.Second, fence.WithWait(time.Minute))
		dead <- err
	}()
	waitWaiters(t, ctx, cli, name, 1)
	got := make(chan error, 1)
	go func() {
		a, err := etcd.NewLocker(client(t), fastOpts).Acquire(ctx, name, 30*time.Second, fence.WithWait(time.Minute))
		if err == nil {
			a.Release(ctx)
		}
		got <- err
	}()
	waitWaiters(t, ctx, cli, name, 2)
	time.Sleep(100 * time.Millisecond) // the first waiter's key is on its waiter lease by now
	died := time.Now()
	dyingCli.Close()
	if err := h.Release(ctx); err != nil {
		t.Fatalf("holder: Release = %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("second waiter: Acquire = %v", err)
		}
		if d := time.Since(died); d > 3*time.Second {
			t.Fatalf("second waiter granted %v after the first died; want < 3s", d)
		}
		t.Logf("granted %v after the first waiter died", time.Since(died))
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter not granted within 10s of the release: the dead waiter's key holds the queue")
	}
	if err := <-dead; err == nil {
		t.Fatal("the dying waiter was granted the lock")
	}
}

// A queued waiter sends a transaction only when its turn may have come (a waiter
// ahead of it left), not at every release and grant: a chain of handoffs through
// n waiters costs O(n) transactions, not one per waiter and handoff (O(n²)).
func TestLocker_FIFO_OnlyTheHeadTries(t *testing.T) {
	const waiters = 8
	ctx, cli, name := setup(t, "fifo-herd")
	h := mustAcquire(t, ctx, etcd.NewLocker(client(t), fastOpts), name, 10*time.Second)
	var counts []*countingKV
	txns := func() (n int64) {
		for _, c := range counts {
			n += c.txns.Load()
		}
		return n
	}
	var wg sync.WaitGroup
	for i := range waiters {
		wcli := client(t)
		counts = append(counts, countTxns(wcli))
		l := etcd.NewLocker(wcli, fastOpts)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := l.Acquire(ctx, name, 10*time.Second, fence.WithWait(20*time.Second))
			if err != nil {
				t.Errorf("waiter %d: Acquire = %v", i, err)
				return
			}
			time.Sleep(10 * time.Millisecond)
			a.Release(ctx)
		}()
		waitWaiters(t, ctx, cli, name, int64(i+1))
	}
	before := txns()
	if err := h.Release(ctx); err != nil {
		t.Fatalf("holder: Release = %v", err)
	}
	wg.Wait()
	// Per waiter: its grant, its release, and a try when the waiter ahead left
	// (at its grant) and one when it released; a herd would add a failed try per
	// waiter behind at each of them.
	got := txns() - before
	if limit := int64(5 * waiters); got > limit {
		t.Fatalf("%d transactions for %d handoffs; want at most %d", got, waiters, limit)
	}
	t.Logf("%d transactions for %d handoffs", got, waiters)
}
