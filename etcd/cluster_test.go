package etcd_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/internal/servers/etcdmember"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/internal/servers/servertest/etcdtest"
)

// grant is one lease a client of the cluster test held, by its own clock.
type grant struct {
	client   int
	token    fence.Token
	begin    time.Time // Acquire returned
	end      time.Time // the holder stopped relying on it: Release called, or its deadline
	deadline time.Time
}

// TestCluster_LeaderKilled_TokensIncreaseNoOverlap runs three clients acquiring one
// lock in a loop against a three-member cluster whose members are separate
// processes, kills the leader with SIGKILL in the middle, and checks every grant:
// ordered by token, each holder stopped relying on its lease (release or deadline)
// before the next one got it, and grants continued under the new leader. It runs
// with the default options and with those of cluster mode (fast expiry, FIFO).
func TestCluster_LeaderKilled_TokensIncreaseNoOverlap(t *testing.T) {
	servertest.SkipIfShort(t)
	t.Run("default", func(t *testing.T) { leaderKilledNoOverlap(t, nil) })
	t.Run("fast-expiry-fifo", func(t *testing.T) { leaderKilledNoOverlap(t, fastOpts) })
}

func leaderKilledNoOverlap(t *testing.T, opts *etcd.Options) {
	c := etcdtest.NewCluster(t, 3)
	endpoints := c.Endpoints()
	name := "cluster-" + driver.NewLeaseID()[:12]
	const ttl = 2 * time.Second

	var (
		mu      sync.Mutex
		grants  []grant
		errs    = map[string]int{}
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		killed  time.Time
		afterKl int
	)
	for i := 0; i < 3; i++ {
		l := etcd.NewLocker(newClient(t, endpoints), opts)
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				lease, err := l.Acquire(ctx, name, ttl, fence.WithWait(3*time.Second))
				cancel()
				if err != nil {
					mu.Lock()
					errs[kind(err)]++
					mu.Unlock()
					continue
				}
				g := grant{client: id, token: lease.Token(), begin: time.Now(), deadline: lease.Deadline()}
				time.Sleep(5 * time.Millisecond) // "work" under the lock
				g.end = time.Now()
				ctx, cancel = context.WithTimeout(context.Background(), 4*time.Second)
				if g.deadline.Before(g.end) {
					g.end = g.deadline
				}
				if err := lease.Release(ctx); err != nil {
					// ErrNotHeld: etcd had already dropped the lease, which it may do
					// only after the holder's deadline, so no one may have it before
					// then. A release whose outcome is unknown (ErrUnavailable while the
					// leader dies) may have taken effect: the next grant may come as soon
					// as it was sent, so g.end stays.
					if errors.Is(err, fence.ErrNotHeld) {
						g.end = g.deadline
					}
					mu.Lock()
					errs["release: "+kind(err)]++
					mu.Unlock()
				}
				cancel()
				mu.Lock()
				grants = append(grants, g)
				if !killed.IsZero() && g.begin.After(killed) {
					afterKl++
				}
				mu.Unlock()
			}
		}(i)
	}

	waitGrants := func(n int, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			mu.Lock()
			got := len(grants)
			if !killed.IsZero() {
				got = afterKl
			}
			mu.Unlock()
			if got >= n {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	if !waitGrants(20, 8*time.Second) {
		close(stop)
		wg.Wait()
		t.Fatalf("fewer than 20 grants in 8 s before the kill; errors: %v", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	leader, err := c.Leader(ctx)
	cancel()
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	mu.Lock()
	killed = time.Now()
	before := len(grants)
	mu.Unlock()
	leader.Kill()
	t.Logf("killed leader %s (SIGKILL) at %d grants", leader.Name, before)
	ok := waitGrants(20, 12*time.Second)
	close(stop)
	wg.Wait()
	if !ok {
		t.Fatalf("fewer than 20 grants in 12 s after killing the leader (%d); errors: %v", afterKl, errs)
	}
	t.Logf("%d grants, %d after the kill; errors by kind: %v", len(grants), afterKl, errs)

	sort.Slice(grants, func(i, j int) bool { return grants[i].token < grants[j].token })
	for i := 1; i < len(grants); i++ {
		prev, cur := grants[i-1], grants[i]
		if cur.token == prev.token {
			t.Fatalf("token %d granted twice (clients %d and %d)", cur.token, prev.client, cur.client)
		}
		if cur.begin.Before(prev.begin) {
			t.Errorf("token %d (client %d) granted at %v, before token %d (client %d) at %v: tokens must increase in grant order",
				cur.token, cur.client, cur.begin.Format(time.StampMicro), prev.token, prev.client, prev.begin.Format(time.StampMicro))
		}
		if cur.begin.Before(prev.end) {
			t.Errorf("leases overlap: token %d (client %d) held until %v, token %d (client %d) granted at %v",
				prev.token, prev.client, prev.end.Format(time.StampMicro), cur.token, cur.client, cur.begin.Format(time.StampMicro))
		}
	}
}

// kind names an error by the fence sentinel it matches, for the test log.
func kind(err error) string {
	for _, s := range []error{fence.ErrNotAcquired, fence.ErrUnavailable, fence.ErrNotHeld, fence.ErrClosed} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return err.Error()
}

// TestStore_TwoServersOneCluster_StaleWriteRejected plays the seed's race across two
// Stores (what two `fence serve` instances run) on one three-member cluster, each
// talking to a different member: A acquires through the first and pauses past its
// TTL, B acquires through the second once A's lease expired and writes, then A wakes
// and writes through the first: A's write is rejected with B's token as the highest,
// and B's value stays.
func TestStore_TwoServersOneCluster_StaleWriteRejected(t *testing.T) {
	servertest.SkipIfShort(t)
	c := etcdtest.NewCluster(t, 3)
	ctx := testCtx(t)
	open := func(endpoint string) *etcd.Store {
		s, err := etcd.Open(ctx, []string{endpoint}, nil)
		if err != nil {
			t.Fatalf("Open(%s) = %v", endpoint, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s1, s2 := open(c.Members[0].ClientURL), open(c.Members[1].ClientURL)
	name, key := uniq("seed"), uniq("payments")

	a, err := s1.Acquire(ctx, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A pauses (no renewal); B waits on the other server and gets the lock at expiry.
	b, err := s2.Acquire(ctx, name, time.Minute, fence.WithWait(30*time.Second))
	if err != nil {
		t.Fatalf("B's Acquire through the second server = %v; want a lease after A's expired", err)
	}
	defer b.Release(ctx)
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d; want > A's %d", b.Token(), a.Token())
	}
	if err := s2.Put(ctx, key, []byte("B"), b.Fence()); err != nil {
		t.Fatalf("B's Put through the second server = %v", err)
	}
	err = s1.Put(ctx, key, []byte("A, stale"), a.Fence())
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || st.Highest != b.Token() || st.Token != a.Token() {
		t.Fatalf("A's stale Put through the first server = %v; want a *fence.StaleTokenError with Token %d, Highest %d", err, a.Token(), b.Token())
	}
	it, err := s1.Get(ctx, key)
	if err != nil || string(it.Value) != "B" || it.Fence.Token != b.Token() {
		t.Fatalf("Get through the first server = %q (token %d), %v; want %q (token %d)", it.Value, it.Fence.Token, err, "B", b.Token())
	}
	// Both servers see the same lock.
	info, err := s1.Inspect(ctx, name)
	if err != nil || !info.Held || info.Token != b.Token() {
		t.Fatalf("Inspect through the first server = %+v, %v; want held with B's token %d", info, err, b.Token())
	}
}

// TestCluster_WaiterRidesOutLeaderKill_DoneClosesWhenQuorumLost: a waiter blocked
// while the leader is SIGKILLed still gets the lock when the holder releases under
// the new leader; then, with a second member killed (no quorum), the new holder's
// auto-renewal cannot reach etcd and its Done closes at its deadline, and a new
// Acquire gives up when its context ends (fence.ErrNotAcquired and the context's
// error: the Engine's wording of an acquire that ctx ended).
func TestCluster_WaiterRidesOutLeaderKill_DoneClosesWhenQuorumLost(t *testing.T) {
	servertest.SkipIfShort(t)
	c := etcdtest.NewCluster(t, 3)
	ctx := testCtx(t)
	endpoints := c.Endpoints()
	holder := etcd.NewLocker(newClient(t, endpoints), nil)
	waiter := etcd.NewLocker(newClient(t, endpoints), nil)
	name := uniq("ride")

	h, err := holder.Acquire(ctx, name, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *fence.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name, 2*time.Second, fence.WithWait(30*time.Second), fence.WithAutoRenew())
		got <- result{l, err}
	}()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	// The holder releases as soon as the new leader answers.
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := h.Release(rctx)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, fence.ErrUnavailable) {
			t.Fatalf("holder's Release after the leader was killed = %v; want nil or fence.ErrUnavailable", err)
		}
	}
	var w result
	select {
	case w = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("waiter not granted 20s after the holder released under the new leader")
	}
	if w.err != nil {
		t.Fatalf("waiter's Acquire across the leader kill = %v; want a lease", w.err)
	}
	if w.lease.Token() <= h.Token() {
		t.Fatalf("waiter's token %d; want > holder's %d", w.lease.Token(), h.Token())
	}

	// Lose quorum: the auto-renewed lease cannot be renewed and ends at its deadline.
	next, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	next.Kill()
	select {
	case <-w.lease.Done():
	case <-time.After(2*time.Second + 5*time.Second):
		t.Fatalf("Done of an auto-renewed 2s lease still open %v after quorum was lost", time.Since(lost))
	}
	if !errors.Is(w.lease.Err(), fence.ErrNotHeld) {
		t.Fatalf("lease.Err() after quorum loss = %v; want fence.ErrNotHeld", w.lease.Err())
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, err := waiter.Acquire(actx, uniq("noquorum"), time.Second)
	if l != nil || !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire without quorum = %v, %v; want nil, fence.ErrNotAcquired and context.DeadlineExceeded", l, err)
	}
}

// A watcher whose client reaches only one member: when that member loses its
// leader (the two others are killed), etcd ends the watch, which requires a leader,
// and the watcher is told fence.ErrUnavailable within a few election timeouts, well
// before its fallback read would have timed out. Once the members are back, the
// watch is made anew and a grant is seen.
func TestCluster_WatchedMemberLosesLeader_ErrUnavailableThenRecovers(t *testing.T) {
	servertest.SkipIfShort(t)
	c := etcdtest.NewCluster(t, 3)
	ctx := testCtx(t)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower *etcdmember.Member
	var others []*etcdmember.Member
	for _, m := range c.Members {
		if m != leader && follower == nil {
			follower = m
		} else {
			others = append(others, m)
		}
	}
	name := uniq("watch-noleader")
	states, _ := startWatch(t, etcd.NewLocker(newClient(t, []string{follower.ClientURL}), nil), name)
	first := waitFor(t, states, promptly, "the first state", false, isFree)
	for _, m := range others {
		m.Kill()
	}
	select {
	case s := <-states:
		if !errors.Is(s.err, fence.ErrUnavailable) {
			t.Fatalf("watch on a member without leader yielded %+v, %v; want an error matching fence.ErrUnavailable", s.info, s.err)
		}
		// The fallback read would give up after the poll and its 5s timeout.
		d := s.at.Sub(first.at)
		t.Logf("ErrUnavailable %v after the first state: %v", d.Round(time.Millisecond), s.err)
		if d > driver.DefaultWatchPoll+2*time.Second {
			t.Fatalf("ErrUnavailable yielded %v after the first state; want it from the watch's end, before the fallback read's timeout", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch on a member without leader yielded nothing within 20s; want fence.ErrUnavailable")
	}
	for _, m := range others {
		if err := c.Restart(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	a, err := etcd.NewLocker(newClient(t, c.Endpoints()), nil).Acquire(ctx, name, time.Minute, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	if got := waitFor(t, states, 10*time.Second, "the grant once the leader is back", true, isHeld); got.info.Token != a.Token() {
		t.Fatalf("state after recovery = %+v; want token %d", got.info, a.Token())
	}
}

// TestCluster_FastExpiry_SilentHolderAcrossLeaderKill: with cluster mode's options,
// a holder that falls silent is still replaced after its deadline, never before
// (P6), when the leader is SIGKILLed while the waiter waits: the waiter's watch
// breaks and is made anew, and its count of the holder's silence, on its own
// clock, goes on. The bound is loose: a request that reached a member as the leader
// died (the waiter's try, or its watch being created) waits for etcd's request
// timeout (5s plus two election timeouts) before it fails and is tried again, so
// the handoff comes about 4.5s after the deadline in most runs, not 70ms.
func TestCluster_FastExpiry_SilentHolderAcrossLeaderKill(t *testing.T) {
	servertest.SkipIfShort(t)
	c := etcdtest.NewCluster(t, 3)
	ctx := testCtx(t)
	endpoints := c.Endpoints()
	holder := etcd.NewLocker(newClient(t, endpoints), fastOpts)
	waiter := etcd.NewLocker(newClient(t, endpoints), fastOpts)
	name := uniq("silent-kill")
	const ttl = 1500 * time.Millisecond

	h, err := holder.Acquire(ctx, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *fence.Lease
		at    time.Time
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name, 10*time.Second, fence.WithWait(30*time.Second))
		got <- result{l, time.Now(), err}
	}()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	var w result
	select {
	case w = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("waiter not granted 20s after the leader was killed")
	}
	if w.err != nil {
		t.Fatalf("waiter's Acquire across the leader kill = %v; want a lease", w.err)
	}
	if !w.at.After(h.Deadline()) {
		t.Fatalf("waiter granted %v before the silent holder's deadline (P6)", h.Deadline().Sub(w.at))
	}
	if late := w.at.Sub(h.Deadline()); late > 10*time.Second {
		t.Fatalf("waiter granted %v after the silent holder's deadline; want < 10s", late)
	}
	if w.lease.Token() <= h.Token() {
		t.Fatalf("waiter's token %d; want > holder's %d", w.lease.Token(), h.Token())
	}
	t.Logf("granted %v after the silent holder's deadline, across the leader kill", w.at.Sub(h.Deadline()))
}
