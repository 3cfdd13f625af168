package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// The cluster store's kill of the leader reaches the cluster: with the leader killed,
// the two others elect a new leader among themselves; the killed node, restarted
// with the same flags and data, serves again and the three agree on one leader.
func TestCluster_KillLeader_SurvivorsElectRestartedRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fence serve nodes; skipped under -short")
	}
	r := &run{cfg: Config{Binary: fenceBin, Store: StoreCluster, TTL: etcdMinTTL}, dir: t.TempDir()}
	defer r.close()
	ctx, old := startCluster(t, r)
	k := &killNemesis{}
	if err := k.setup(ctx, r); err != nil {
		t.Fatal(err)
	}
	k.n, k.odd = 1, false // the next fault is the leader kind
	f, err := k.inject(ctx, rand.New(rand.NewPCG(1, 2)))
	if err != nil || f == nil || f.kind != "leader" {
		t.Fatalf("inject = %+v, %v; want a leader kill", f, err)
	}
	if old.life.Alive() {
		t.Fatalf("node %s, the leader, still runs after its kill", old.name)
	}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	now, err := r.leader(lctx) // asks the live nodes only
	lcancel()
	if err != nil {
		t.Fatalf("the survivors elected no leader while %s was down: %v", old.name, err)
	}
	if now == old {
		t.Fatalf("leader after the kill = %s, the killed node", now.name)
	}
	if err := f.heal(); err != nil {
		t.Fatal(err)
	}
	if !old.life.Alive() {
		t.Fatalf("node %s not running after the heal", old.name)
	}
	if err := old.healthy(); err != nil {
		t.Errorf("node %s after its restart: %v", old.name, err)
	}
	// Each node, the restarted one included, names the same leader.
	wantOneLeader(ctx, t, r)
}

// Every nemesis of the cluster store together, as the soak runs them (a short run
// here): kills of the leader and of any node, pauses of the holder and of a node,
// link faults on one node's proxy, partitions of the leader or a follower and worker
// clock steps leave no stale write accepted, nothing lost and a linearizable
// history, and each nemesis injected its faults.
func TestRun_FencingOn_Cluster_AllNemeses_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 4, Duration: 14 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 3,
		Store: StoreCluster, Nemeses: []string{NemesisKill, NemesisPause, NemesisLink, NemesisPartition, NemesisClock}, Fencing: true, Seed: 31})
	wantNoViolation(t, sum)
	if sum.Backend != "fence serve (cluster x3)" {
		t.Errorf("Backend = %q, want %q", sum.Backend, "fence serve (cluster x3)")
	}
	for _, n := range []string{NemesisKill, NemesisPause, NemesisLink, NemesisPartition, NemesisClock} {
		if sum.Faults[n] < 1 {
			t.Errorf("faults injected = %v, want at least one %s", sum.Faults, n)
		}
	}
	if sum.Faults["kill/leader"] < 1 || sum.Faults["kill/node"] < 1 || sum.Faults["pause/node"] < 1 {
		t.Errorf("faults injected = %v, want a leader kill, a node kill and a node pause among them", sum.Faults)
	}
	if sum.Report.Writes < 10 {
		t.Errorf("accepted writes = %d, want at least 10 (workers made no progress?)", sum.Report.Writes)
	}
}

// The cluster store's leader partition reaches the cluster: the two other nodes
// elect a leader of their own; the cut-off node, which the workers still reach,
// refuses a grant as unavailable within a bound rather than granting it; and once
// healed the three nodes agree on one leader again.
func TestCluster_LeaderPartition_MajorityElectsIsolatedRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fence serve nodes in network namespaces; skipped under -short")
	}
	r := &run{cfg: Config{Binary: fenceBin, Store: StoreCluster, TTL: etcdMinTTL}, dir: t.TempDir()}
	defer r.close()
	layer, err := newNetLayer()
	if err != nil {
		t.Fatalf("newNetLayer: %v", err)
	}
	r.net = layer
	r.onClose(layer.close)
	ctx, old := startCluster(t, r)
	p := &partitionNemesis{}
	if err := p.setup(ctx, r); err != nil {
		t.Fatal(err)
	}
	p.n, p.first = 1, 2 // clusterCut sees n 2: kind (2+2-1)%3, "leader"
	f, err := p.inject(ctx, rand.New(rand.NewPCG(1, 2)))
	if err != nil || f == nil || f.kind != "leader" {
		t.Fatalf("inject = %+v, %v; want a leader partition", f, err)
	}
	var others []*node
	for _, m := range r.nodes {
		if m != old {
			others = append(others, m)
			if !slices.Contains(layer.cuts, [2]string{old.host, m.host}) {
				t.Fatalf("cuts %v: the leader %s is not cut off from %s (leadership moved before the fault?)", layer.cuts, old.host, m.host)
			}
		}
	}
	// The two others agree on a leader among themselves (at most about 10 s).
	var now [2]*node
	for try := 0; try < 100; try++ {
		now[0], _ = r.leaderOf(ctx, others[0])
		now[1], _ = r.leaderOf(ctx, others[1])
		if now[0] != nil && now[0] == now[1] && now[0] != old {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if now[0] == nil || now[0] != now[1] || now[0] == old {
		t.Fatalf("while %s was cut off, the others name leaders %v and %v; want one of them", old.name, now[0], now[1])
	}
	// The cut-off node, asked directly, refuses a grant.
	c, err := fencehttp.NewClient(old.url(), &fencehttp.ClientOptions{RequestTimeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	l, err := c.Acquire(ctx, "partitioned", 5*time.Second, fence.WithWait(0))
	took := time.Since(began)
	if err == nil {
		t.Fatalf("the cut-off node %s granted token %d", old.name, l.Token())
	}
	if !errors.Is(err, fence.ErrUnavailable) || took > 10*time.Second {
		t.Errorf("acquire on the cut-off node: %v after %v; want fence.ErrUnavailable within 10s", err, took)
	}
	t.Logf("the cut-off node refused a grant after %v: %v", took.Round(time.Millisecond), err)
	if err := f.heal(); err != nil {
		t.Fatal(err)
	}
	wantOneLeader(ctx, t, r)
}

// wantOneLeader fails the test unless every node of r names the same leader,
// asking each again for up to 10 s while a restarted or healed node catches up.
// startCluster sets up and starts r's three nodes and returns a context of a
// minute, ended at t's cleanup, and their leader.
func startCluster(t *testing.T, r *run) (context.Context, *node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := (clusterStore{}).setup(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := r.startServers(); err != nil {
		t.Fatal(err)
	}
	leader, err := r.leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, leader
}

func wantOneLeader(ctx context.Context, t *testing.T, r *run) {
	t.Helper()
	var leaders []string
	for _, n := range r.nodes {
		var l *node
		var err error
		for try := 0; try < 100; try++ {
			if l, err = r.leaderOf(ctx, n); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("node %s after the heal: %v", n.name, err)
		}
		leaders = append(leaders, l.name)
	}
	if leaders[0] != leaders[1] || leaders[1] != leaders[2] {
		t.Errorf("leaders the nodes name after the heal = %q, want one", leaders)
	}
}
