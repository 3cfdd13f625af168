package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// acquirePut acquires name, writes value under its fence to g, releases, and returns
// the token and the guard's error.
func acquirePut(t *testing.T, ctx context.Context, l *Locker, g *inmem.Guard, name, value string) (fence.Token, error) {
	t.Helper()
	lease, err := l.Acquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer func() {
		if err := lease.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}()
	return lease.Token(), g.Put(ctx, "account", []byte(value), lease.Fence())
}

// waitCounter waits until the server's counter of name reads want (replication).
func waitCounter(t *testing.T, s *servers.Redis, l *Locker, name, want string) {
	t.Helper()
	waitFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if got, err := s.CLI("GET", l.keysFor(name).token); err != nil || got != want {
			return fmt.Errorf("counter on %s = %q, %v; want %s", s.Addr, got, err, want)
		}
		return nil
	})
}

// replicated starts a primary and its replica for a failover test, and returns them
// with a context that ends after 25s. It skips the test under -short.
func replicated(t *testing.T) (context.Context, *servers.Redis, *servers.Redis) {
	t.Helper()
	servertest.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	t.Cleanup(cancel)
	primary := servertest.Redis(t, "--repl-diskless-sync-delay", "0") // no 5s wait for the full sync
	return ctx, primary, servertest.RedisReplica(t, primary)
}

// lockerAt returns a Locker with opts on its own client of s, closed when t ends.
func lockerAt(t *testing.T, s *servers.Redis, opts *Options) *Locker {
	t.Helper()
	l, err := NewLocker(newClient(t, s.Addr), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// detach makes replica a primary of its own, so it misses what follows.
func detach(t *testing.T, replica *servers.Redis) {
	t.Helper()
	if out, err := replica.CLI("REPLICAOF", "NO", "ONE"); err != nil || out != "OK" {
		t.Fatalf("REPLICAOF NO ONE = %q, %v", out, err)
	}
}

// TestFailover_LostIncrements_GuardRejects_HealRecovers makes a replica miss the last
// INCRs, promotes it, and shows the guard catching the regressed token and Heal
// repairing the counter (P4).
func TestFailover_LostIncrements_GuardRejects_HealRecovers(t *testing.T) {
	ctx, primary, replica := replicated(t)
	l := lockerAt(t, primary, nil)
	g := inmem.NewGuard()
	const name = "ledger"

	for i := 0; i < 3; i++ {
		if _, err := acquirePut(t, ctx, l, g, name, "before"); err != nil {
			t.Fatalf("write %d before the failover: %v", i, err)
		}
	}
	waitCounter(t, replica, l, name, "3") // the replica has tokens up to 3

	// Detach the replica, so it misses the next increments.
	detach(t, replica)
	var highest fence.Token
	for i := 0; i < 2; i++ {
		tok, err := acquirePut(t, ctx, l, g, name, "acknowledged")
		if err != nil {
			t.Fatalf("write with token %d before the failover: %v", tok, err)
		}
		highest = tok
	}

	// The primary dies; the client is pointed at the promoted replica.
	primary.Kill()
	l2 := lockerAt(t, replica, nil)
	regressed, err := acquirePut(t, ctx, l2, g, name, "stale")
	t.Logf("guard accepted up to token %d; after failover the new primary issued %d", highest, regressed)
	if regressed > highest {
		t.Fatalf("token after failover %d is above %d: the replica did not miss the increments", regressed, highest)
	}
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != highest {
		t.Fatalf("guard on regressed token %d = %v; want a *StaleTokenError with Highest %d", regressed, err, highest)
	}
	if item, err := g.Get(ctx, "account"); err != nil || string(item.Value) != "acknowledged" || item.Fence.Token != highest {
		t.Fatalf("guarded value = %q with token %d, %v; want the acknowledged write with token %d kept", item.Value, item.Fence.Token, err, highest)
	}

	// Heal with what the guard reported, then the next grant is accepted.
	if err := fence.Heal(ctx, l2, name, err); err != nil {
		t.Fatalf("Heal: %v", err)
	}
	healed, err := acquirePut(t, ctx, l2, g, name, "after heal")
	t.Logf("after Heal(%d) the next token is %d", stale.Highest, healed)
	if err != nil || healed != highest+1 {
		t.Fatalf("write after heal: token %d, %v; want token %d accepted", healed, err, highest+1)
	}
}

// TestFailover_WaitReplicas_TokenSurvivesPromotion hands out a token only after the
// replica acknowledged it, kills the primary at once, and shows the promoted replica
// continuing above it.
func TestFailover_WaitReplicas_TokenSurvivesPromotion(t *testing.T) {
	ctx, primary, replica := replicated(t)
	pc := newClient(t, primary.Addr)
	l, err := NewLocker(pc, &Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g := inmem.NewGuard()
	const name = "durable"
	// Empty the script cache first: the pipelined EVALSHA+WAIT must fall back to EVAL.
	if err := pc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var last fence.Token
	for i := 0; i < 3; i++ {
		lease, err := l.Acquire(ctx, name, 2*time.Second)
		if err != nil {
			t.Fatalf("durable Acquire %d: %v", i, err)
		}
		if err := g.Put(ctx, "account", []byte("v"), lease.Fence()); err != nil {
			t.Fatalf("write with token %d: %v", lease.Token(), err)
		}
		last = lease.Token()
		if i < 2 {
			_ = lease.Release(ctx)
		}
	}
	// Crash the primary right after the grant returned: nothing more replicates.
	primary.Kill()
	detach(t, replica)
	l2 := lockerAt(t, replica, &Options{PollInterval: 50 * time.Millisecond})
	// The last lease (2s) was replicated too: the promoted replica still honours it.
	if _, err := l2.Acquire(ctx, name, time.Second); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire on the promoted replica while the replicated lease lives = %v, want ErrNotAcquired", err)
	}
	info, err := l2.Inspect(ctx, name)
	if err != nil || info.LastToken != last || info.Token != last {
		t.Fatalf("promoted replica: %+v, %v; want the lease with token %d and counter %d", info, err, last, last)
	}
	if err := l2.Heal(ctx, name, last); err != nil { // a no-op: nothing was lost
		t.Fatal(err)
	}
	lease, err := l2.Acquire(ctx, name, 10*time.Second, fence.WithWait(15*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the replicated lease expired: %v", err)
	}
	defer lease.Release(ctx)
	t.Logf("last token handed out with WAIT 1: %d; first token from the promoted replica: %d", last, lease.Token())
	if lease.Token() != last+1 {
		t.Errorf("token after failover %d, want %d", lease.Token(), last+1)
	}
	if err := g.Put(ctx, "account", []byte("after"), lease.Fence()); err != nil {
		t.Errorf("guard after failover with WAIT: %v, want accepted", err)
	}
}
