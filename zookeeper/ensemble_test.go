package zookeeper_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/zookeeper"
)

// Clients acquire one lock in a loop on a three-server ensemble while its leader is
// SIGKILLed: the tokens they are granted keep increasing across the new leader's
// epoch, no two holders are ever inside at once, and grants go on after the failover.
func TestLocker_EnsembleLeaderKilled_TokensIncreaseNoOverlap(t *testing.T) {
	servertest.SkipIfShort(t)
	e := servertest.NewZooKeeperEnsemble(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const clients = 4
	lockers := make([]*zookeeper.Locker, clients)
	for i := range lockers {
		l, err := zookeeper.Open(e.Servers(), &zookeeper.Options{SessionTimeout: 6 * time.Second})
		if err != nil {
			t.Fatalf("Open(%v) = %v", e.Servers(), err)
		}
		t.Cleanup(func() { l.Close() })
		lockers[i] = l
	}

	var (
		mu        sync.Mutex
		tokens    []fence.Token // in grant order, appended while inside
		inside    atomic.Int32
		overlaps  atomic.Int32
		afterKill atomic.Int32
		killed    atomic.Bool
		errCount  atomic.Int32
		wg        sync.WaitGroup
	)
	// The workers run until enough grants came through the new leader, or for at
	// most afterKillMax after the kill: how long the ensemble takes to elect a leader
	// and the clients to move their sessions to it depends on the machine's load,
	// so a fixed window would fail a slow but correct failover.
	const (
		beforeKill    = 3 * time.Second
		wantAfterKill = 20
		afterKillMax  = 30 * time.Second
	)
	var stop atomic.Bool
	name := "leader-kill-" + driver.NewLeaseID()[:8]
	for _, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				lease, err := l.Acquire(ctx, name, 3*time.Second, fence.WithWait(2*time.Second))
				if err != nil {
					if !errors.Is(err, fence.ErrNotAcquired) && !errors.Is(err, fence.ErrUnavailable) {
						t.Errorf("Acquire = %v; want a lease, ErrNotAcquired or ErrUnavailable", err)
						return
					}
					errCount.Add(1)
					time.Sleep(20 * time.Millisecond) // back off while the ensemble elects
					continue
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				if killed.Load() {
					afterKill.Add(1)
				}
				inside.Add(-1)
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				err = lease.Release(rctx)
				rcancel()
				if err != nil && !errors.Is(err, fence.ErrUnavailable) && !errors.Is(err, fence.ErrNotHeld) {
					t.Errorf("Release = %v", err)
				}
			}
		}()
	}

	// Kill the leader once grants are flowing.
	leader, err := e.Leader(ctx)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatal(err)
	}
	time.Sleep(beforeKill)
	mu.Lock()
	before := len(tokens)
	mu.Unlock()
	leader.Kill()
	killed.Store(true)
	killedAt := time.Now()
	newLeader, lerr := e.Leader(ctx)
	elected := time.Since(killedAt)
	for time.Since(killedAt) < afterKillMax && afterKill.Load() < wantAfterKill {
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	if lerr != nil {
		t.Fatalf("no new leader after killing server %d: %v", leader.ID, lerr)
	}
	t.Logf("killed leader %d at grant %d; server %d leads after %v; %d grants in all, %d after the kill (in %v), %d failed tries",
		leader.ID, before, newLeader.ID, elected.Round(time.Millisecond), len(tokens), afterKill.Load(), time.Since(killedAt).Round(time.Millisecond), errCount.Load())
	if before == 0 {
		t.Fatalf("no grant in the %v before the kill; want grants flowing", beforeKill)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d grants overlapped another holder; want none", n)
	}
	if afterKill.Load() == 0 {
		t.Errorf("no grant in the %v after the leader was killed; want the lock usable through the new leader", afterKillMax)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d got token %d after %d; want strictly increasing tokens across the failover", i, tokens[i], tokens[i-1])
		}
	}
	// The new leader starts a new epoch (the high 32 bits of a zxid).
	last := tokens[len(tokens)-1]
	if first := tokens[0]; last>>32 <= first>>32 {
		t.Errorf("epoch of the last token %#x = %d, of the first %#x = %d; want a later epoch after the leader change", uint64(last), last>>32, uint64(first), first>>32)
	}
}
