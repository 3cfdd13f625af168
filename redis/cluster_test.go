package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// cluster is a real Redis Cluster of three masters, no replicas.
type cluster struct {
	nodes  []*servers.Redis
	client *goredis.ClusterClient
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	servertest.SkipIfShort(t)
	servertest.RequireBinary(t, "redis-cli", "redis-tools")
	c := &cluster{}
	var addrs []string
	for i := 0; i < 3; i++ {
		n := servertest.Redis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		c.nodes = append(c.nodes, n)
		addrs = append(addrs, n.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := c.nodes[0].CLI(args...); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Wait until every node sees all slots served by three masters.
	for _, n := range c.nodes {
		waitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			info, err := n.CLI("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				return fmt.Errorf("cluster node %s not ok: %v\n%s", n.Addr, err, info)
			}
			return nil
		})
	}
	c.client = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.client.Close() })
	return c
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	id    string
	port  int
	slots [][2]int
}

func (c *cluster) topology(t *testing.T) []clusterNode {
	t.Helper()
	out, err := c.nodes[0].CLI("CLUSTER", "NODES")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []clusterNode
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		hostport, _, _ := strings.Cut(f[1], "@")
		_, p, _ := strings.Cut(hostport, ":")
		port, _ := strconv.Atoi(p)
		n := clusterNode{id: f[0], port: port}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a migration in progress
			}
			lo, hi, found := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if found {
				b, _ = strconv.Atoi(hi)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes
}

func (c *cluster) server(port int) *servers.Redis {
	for _, n := range c.nodes {
		if n.Port == port {
			return n
		}
	}
	return nil
}

// owner returns the node serving slot.
func (c *cluster) owner(t *testing.T, slot int) clusterNode {
	t.Helper()
	for _, n := range c.topology(t) {
		for _, r := range n.slots {
			if slot >= r[0] && slot <= r[1] {
				return n
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return clusterNode{}
}

// keySlot asks the server (CLUSTER KEYSLOT) which slot key hashes to.
func (c *cluster) keySlot(t *testing.T, key string) int {
	t.Helper()
	slot, err := c.client.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	return int(slot)
}

// moveSlot migrates slot and the given keys from its owner to another master, the way
// redis-cli --cluster reshard does, and returns the new owner's port.
func (c *cluster) moveSlot(t *testing.T, slot int, keys ...string) int {
	t.Helper()
	src := c.owner(t, slot)
	var dst clusterNode
	for _, n := range c.topology(t) {
		if n.id != src.id {
			dst = n
			break
		}
	}
	s, d := c.server(src.port), c.server(dst.port)
	sl := strconv.Itoa(slot)
	steps := []struct {
		on   *servers.Redis
		args []string
	}{
		{d, []string{"CLUSTER", "SETSLOT", sl, "IMPORTING", src.id}},
		{s, []string{"CLUSTER", "SETSLOT", sl, "MIGRATING", dst.id}},
		{s, append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.port), "", "0", "5000", "KEYS"}, keys...)},
		{d, []string{"CLUSTER", "SETSLOT", sl, "NODE", dst.id}},
		{s, []string{"CLUSTER", "SETSLOT", sl, "NODE", dst.id}},
	}
	for _, st := range steps {
		out, err := st.on.CLI(st.args...)
		if err != nil || out != "OK" {
			t.Fatalf("%s on %s = %q, %v; want OK", strings.Join(st.args, " "), st.on.Addr, out, err)
		}
	}
	for _, n := range c.nodes {
		if n != s && n != d {
			if out, err := n.CLI("CLUSTER", "SETSLOT", sl, "NODE", dst.id); err != nil || out != "OK" {
				t.Fatalf("SETSLOT NODE on %s = %q, %v", n.Addr, out, err)
			}
		}
	}
	return dst.port
}

func TestCluster_ThreeMasters(t *testing.T) {
	c := startCluster(t)
	l, err := NewLocker(c.client, &Options{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	t.Run("HashTagRouting_NamesWithBraces", func(t *testing.T) {
		owners := map[int]bool{}
		for i, name := range []string{"plain", "a{b}c", "{", "}", "}{", "{}", "%7B", "x{y", "pay{ments}/42", "ünï{cødé}", "q", "r", "s"} {
			k := l.keysFor(name)
			ls, ts, ws := c.keySlot(t, k.lock), c.keySlot(t, k.token), c.keySlot(t, k.wake)
			if ls != ts || ls != ws {
				t.Errorf("%q: slots lock %d token %d wake %d, want all equal", name, ls, ts, ws)
			}
			owner := c.owner(t, ls).port
			owners[owner] = true
			lease, err := l.Acquire(ctx, name, time.Minute)
			if err != nil {
				t.Fatalf("%q: Acquire: %v", name, err)
			}
			if err := lease.Renew(ctx, time.Minute); err != nil {
				t.Errorf("%q: Renew: %v", name, err)
			}
			// The keys are on the slot's owner.
			direct := goredis.NewClient(&goredis.Options{Addr: c.server(owner).Addr})
			out, err := direct.Get(ctx, k.token).Result()
			_ = direct.Close()
			if err != nil || out != lease.Token().String() {
				t.Errorf("%q (#%d): counter on owner = %q, %v; want %s", name, i, out, err, lease.Token())
			}
			if err := lease.Release(ctx); err != nil {
				t.Errorf("%q: Release: %v", name, err)
			}
		}
		infos, err := l.List(ctx, fence.ListOptions{All: true})
		if err != nil {
			t.Fatalf("List on the cluster: %v", err)
		}
		listed := map[string]bool{}
		for _, i := range infos {
			listed[i.Name] = true
		}
		for _, name := range []string{"plain", "a{b}c", "{}", "ünï{cødé}", "q"} {
			if !listed[name] {
				t.Errorf("List on the cluster (every master scanned) lacks %q: %v", name, infos)
			}
		}
		if len(owners) < 2 {
			t.Errorf("names landed on %d masters, want at least 2 to show routing", len(owners))
		}
	})

	t.Run("SemaphoreAndShared_KeysOnOneSlot", func(t *testing.T) {
		for _, name := range []string{"cluster-sem", "a{b}c-sem", "}{"} {
			k := l.keysFor(name)
			for _, key := range []string{k.holders, k.expiry, k.slots} {
				if got, want := c.keySlot(t, key), c.keySlot(t, k.lock); got != want {
					t.Errorf("%q: slot of %s = %d; want the lock key's, %d", name, key, got, want)
				}
			}
			a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
			b := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
			if a.Slot() != 0 || b.Slot() != 1 {
				t.Errorf("%q: slots %d, %d; want 0, 1", name, a.Slot(), b.Slot())
			}
			if info, err := l.Inspect(ctx, name); err != nil || len(info.Holders) != 2 {
				t.Errorf("%q: Inspect = %+v, %v; want 2 holders", name, info, err)
			}
			if err := a.Renew(ctx, time.Minute); err != nil {
				t.Errorf("%q: Renew: %v", name, err)
			}
			for _, lease := range []*fence.Lease{a, b} {
				if err := lease.Release(ctx); err != nil {
					t.Errorf("%q: Release: %v", name, err)
				}
			}
			r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
			if err := l.Revoke(ctx, name); err != nil {
				t.Errorf("%q: Revoke of a shared lease: %v", name, err)
			}
			if err := r.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
				t.Errorf("%q: Release after Revoke = %v; want ErrNotHeld", name, err)
			}
		}
	})

	t.Run("IssuedKV_ChecksTheNamesSlotFirst", func(t *testing.T) {
		kv, err := NewIssuedKV(c.client, nil)
		if err != nil {
			t.Fatal(err)
		}
		name, key := "cluster-issued", "cluster-issued-key"
		if c.keySlot(t, l.keysFor(name).token) == c.keySlot(t, kv.recordKey(key)) {
			t.Fatalf("the counter of %q and the record of %q share a slot; pick names on two", name, key)
		}
		lease := mustAcquire(t, ctx, l, name, time.Minute)
		defer lease.Release(ctx)
		if err := kv.Put(ctx, key, []byte("v"), lease.Fence()); err != nil {
			t.Fatalf("holder's Put = %v", err)
		}
		var ue *fence.UnissuedTokenError
		for _, f := range []fence.Fence{
			{Name: name, Token: lease.Token() + 1},
			{Name: "cluster-never", Token: 1},
			{Name: name, Token: lease.Token(), LeaseID: driver.NewLeaseID()},
		} {
			if err := kv.Put(ctx, key, []byte("forged"), f); !errors.As(err, &ue) {
				t.Errorf("Put with %+v = %v; want a *fence.UnissuedTokenError", f, err)
			}
			if err := kv.Delete(ctx, key, f); !errors.As(err, &ue) {
				t.Errorf("Delete with %+v = %v; want a *fence.UnissuedTokenError", f, err)
			}
		}
		var le *fence.LeaseRequiredError
		bare := fence.Fence{Name: name, Token: lease.Token()}
		if err := kv.Put(ctx, "cluster-issued-fresh", []byte("bare"), bare); !errors.As(err, &le) {
			t.Errorf("Put with the live token and no lease id = %v; want a *fence.LeaseRequiredError", err)
		}
		if it, err := kv.Get(ctx, key); err != nil || string(it.Value) != "v" {
			t.Errorf("Get after the refusals = %q, %v; want %q", it.Value, err, "v")
		}
		if err := kv.Delete(ctx, key, lease.Fence()); err != nil {
			t.Errorf("holder's Delete = %v", err)
		}
	})

	// The record and the lock's keys are on different slots: kv_issued runs
	// first, and kv_put's attempt section on the record's slot alone (P3).
	t.Run("IssuedKV_WriteAttempts", func(t *testing.T) {
		kv, err := NewIssuedKV(c.client, nil)
		if err != nil {
			t.Fatal(err)
		}
		fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return kv }, fencetest.WithIssuer(l))
	})

	t.Run("WaiterWokenBySharedPubSub", func(t *testing.T) {
		wakesOnRelease(t, ctx, l, c.client, mustAcquire(t, ctx, l, "cluster-wake", time.Hour))
	})

	t.Run("RevokeWakesWaiterOnTheSlotsMaster", func(t *testing.T) {
		wakesOnRevoke(t, ctx, l, c.client, mustAcquire(t, ctx, l, "cluster-revoke", time.Hour, fence.WithOwner("cluster owner")))
	})

	t.Run("WaitReplicas_PipelineOnSlotOwner", func(t *testing.T) {
		dl, err := NewLocker(c.client, &Options{WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer dl.Close()
		// Names on different masters: the script and WAIT go, pipelined, to each
		// name's own master (a wrong node would answer MOVED, not run WAIT).
		owners := map[int]bool{}
		for _, name := range []string{"durable-a", "durable-b", "durable-c", "durable-d"} {
			owners[c.owner(t, c.keySlot(t, l.keysFor(name).lock)).port] = true
			_, err := dl.Acquire(ctx, name, time.Minute)
			if !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("%q: Acquire with WaitReplicas 1 and no replicas = %v, want ErrNotReplicated", name, err)
			}
			info, err := l.Inspect(ctx, name)
			if err != nil || info.Held || info.LastToken != 1 {
				t.Errorf("%q: Inspect = %+v, %v; want released, counter 1", name, info, err)
			}
			// Revoke pipelines its WAIT on the slot's master too: the lease ends,
			// and the missing acknowledgement is reported.
			mustAcquire(t, ctx, l, name, time.Minute)
			if err := dl.Revoke(ctx, name); !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrNotHeld) {
				t.Fatalf("%q: Revoke with WaitReplicas 1 and no replicas = %v, want fence.ErrUnavailable", name, err)
			}
			if info, err := l.Inspect(ctx, name); err != nil || info.Held {
				t.Errorf("%q: Inspect after Revoke = %+v, %v; want not held", name, info, err)
			}
		}
		if len(owners) < 2 {
			t.Errorf("durable names on %d masters, want at least 2", len(owners))
		}
	})

	t.Run("WatchOneConnectionPerSlot", func(t *testing.T) {
		slots := map[int]bool{}
		var ws []*watchStream
		for _, name := range []string{"watch-a", "watch-b", "watch-c", "w{x}%", "ünï{cødé}"} {
			slot := c.keySlot(t, l.keysFor(name).wake)
			if g := l.relay.group(name); g != 1+slot {
				t.Errorf("%q: relay group %d, want 1 + slot %d (CLUSTER KEYSLOT)", name, g, slot)
			}
			slots[slot] = true
			for range 2 {
				w := startWatching(t, l, name)
				w.first()
				ws = append(ws, w)
			}
		}
		if n := relayConns(l); n != len(slots) {
			t.Errorf("relay connections for watchers on %d slots = %d, want one per slot", len(slots), n)
		}
		for i, w := range ws {
			if i%2 == 1 {
				continue
			}
			lease := mustAcquire(t, ctx, l, w.name, time.Minute)
			w.await(promptly, "the grant", held(lease.Token()))
			ws[i+1].await(promptly, "the grant", held(lease.Token()))
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w.await(promptly, "the release", free)
		}
		for _, w := range ws {
			w.stop()
		}
		waitFor(t, 5*time.Second, time.Millisecond, func() error {
			if n := relayConns(l); n != 0 {
				return fmt.Errorf("relay connections after the watches ended = %d, want 0", n)
			}
			return nil
		})
	})

	// The slot's old owner drops the watch's channel (sunsubscribe): the watch
	// subscribes again at the new owner and sees the release there.
	t.Run("WatchFollowsSlotMove", func(t *testing.T) {
		name := "watched{moves}"
		k := l.keysFor(name)
		w := startWatching(t, l, name)
		w.first()
		lease := mustAcquire(t, ctx, l, name, time.Minute) // both keys exist: MIGRATE needs them
		w.await(promptly, "the grant", held(lease.Token()))
		slot := c.keySlot(t, k.lock)
		from := c.owner(t, slot).port
		to := c.moveSlot(t, slot, k.lock, k.token)
		moved := time.Now()
		waitFor(t, promptly, time.Millisecond, func() error {
			old, _ := c.server(from).CLI("PUBSUB", "SHARDNUMSUB", k.wake)
			now, _ := c.server(to).CLI("PUBSUB", "SHARDNUMSUB", k.wake)
			if !strings.HasSuffix(old, "\n0") || !strings.HasSuffix(now, "\n1") {
				return fmt.Errorf("subscribers of %s: %q at the old owner, %q at the new; want 0 and 1", k.wake, old, now)
			}
			return nil
		})
		t.Logf("slot %d of %q moved from :%d to :%d; subscribed at the new owner after %v", slot, name, from, to, time.Since(moved).Round(time.Millisecond))
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release after the move: %v", err)
		}
		w.await(promptly, "the release at the slot's new owner", free)
	})

	t.Run("LockSurvivesMOVED", func(t *testing.T) {
		name := "moving{slot}"
		k := l.keysFor(name)
		lease := mustAcquire(t, ctx, l, name, time.Minute)
		slot := c.keySlot(t, k.lock)
		from := c.owner(t, slot).port
		waiter := make(chan error, 1)
		go func() {
			next, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(20*time.Second))
			if err == nil {
				if next.Token() != lease.Token()+1 {
					err = fmt.Errorf("waiter token %d, want %d", next.Token(), lease.Token()+1)
				}
				_ = next.Release(ctx)
			}
			waiter <- err
		}()
		waitSubscribers(t, c.client, l, name, 1)
		// A durable Locker on its own client, whose slot map predates the move.
		stale := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{c.nodes[0].Addr}})
		defer stale.Close()
		dl, err := NewLocker(stale, &Options{WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer dl.Close()
		if _, err := dl.Inspect(ctx, name); err != nil {
			t.Fatal(err)
		}
		to := c.moveSlot(t, slot, k.lock, k.token)
		t.Logf("slot %d of %q moved from :%d to :%d", slot, name, from, to)
		if out, _ := c.server(to).CLI("EXISTS", k.lock, k.token); out != "2" {
			t.Fatalf("keys on the new owner: EXISTS = %q, want 2", out)
		}
		// The client's slot map is stale: it gets MOVED and follows it.
		if err := lease.Renew(ctx, time.Minute); err != nil {
			t.Fatalf("Renew after MOVED: %v", err)
		}
		info, err := l.Inspect(ctx, name)
		if err != nil || !info.Held || info.Token != lease.Token() {
			t.Fatalf("Inspect after MOVED = %+v, %v; want held with token %d", info, err, lease.Token())
		}
		if _, err := l.Acquire(ctx, name, time.Minute); !errorsIsNotAcquired(err) {
			t.Fatalf("second Acquire after MOVED = %v, want ErrNotAcquired (still held)", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release after MOVED: %v", err)
		}
		if err := <-waiter; err != nil {
			t.Errorf("waiter across the slot move (poll 1h): %v", err)
		}
		// The durable path pipelines to the master it knew; after MOVED it refreshes
		// the slot map and runs on the new owner (no replicas there: ErrNotReplicated,
		// not ErrUnavailable).
		if _, err := dl.Acquire(ctx, name, time.Minute); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("durable Acquire with a stale slot map = %v, want ErrNotReplicated from the new owner", err)
		}
		if info, err := l.Inspect(ctx, name); err != nil || info.Held || info.LastToken != lease.Token()+2 {
			t.Errorf("after the durable attempt: %+v, %v; want released, counter %d", info, err, lease.Token()+2)
		}
	})
}

func errorsIsNotAcquired(err error) bool {
	var h *fence.HeldError
	return err != nil && asHeld(err, &h)
}

func asHeld(err error, target **fence.HeldError) bool { return errors.As(err, target) }
