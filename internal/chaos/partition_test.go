package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// The test binary doubles as the netns test's processes: with netnsHelperEnv set to
// "listen ADDR" it serves a greeting on ADDR; with "dial ADDR" it connects to ADDR
// within 1.5 s, reads the greeting and exits 0, or prints the error and exits 1.
const netnsHelperEnv = "FENCE_CHAOS_NETNS_HELPER"

func init() {
	mode, addr, ok := strings.Cut(os.Getenv(netnsHelperEnv), " ")
	if !ok {
		return
	}
	switch mode {
	case "listen":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			fmt.Fprintln(c, "hello")
			c.Close()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", addr, 1500*time.Millisecond)
		if err == nil {
			c.SetDeadline(time.Now().Add(1500 * time.Millisecond))
			var line string
			line, err = bufio.NewReader(c).ReadString('\n')
			if err == nil && line != "hello\n" {
				err = fmt.Errorf("greeting %q", line)
			}
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// dialFrom runs the test binary as a dialer of addr in the namespace of host and
// returns its error and output.
func dialFrom(n *netLayer, host, addr string) (string, error) {
	cmd := n.command(host, os.Args[0])
	cmd.Env = append(os.Environ(), netnsHelperEnv+"=dial "+addr)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// namesOf returns the namespaces and links of the machine's namespace whose names
// contain s.
func namesOf(t *testing.T, s string) []string {
	t.Helper()
	var found []string
	for _, args := range [][]string{{"netns", "list"}, {"-o", "link", "show"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			t.Fatalf("ip %s: %v", strings.Join(args, " "), err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, s) {
				found = append(found, strings.TrimSpace(line))
			}
		}
	}
	return found
}

// The network layer itself: two hosts in namespaces of their own reach each other
// (and the harness reaches them); a cut between them makes a connect time out while
// the harness still reaches both; heal restores the path; close leaves no namespace
// or link of the layer behind.
func TestNetLayer_CutTimesOutHealRestores(t *testing.T) {
	if testing.Short() {
		t.Skip("creates network namespaces; skipped under -short")
	}
	n, err := newNetLayer()
	if err != nil {
		t.Fatalf("newNetLayer: %v (it needs root and iproute2)", err)
	}
	closed := false
	defer func() {
		if !closed {
			n.close()
		}
	}()
	aIP, err := n.host("a")
	if err != nil {
		t.Fatal(err)
	}
	bIP, err := n.host("b")
	if err != nil {
		t.Fatal(err)
	}
	if aIP == bIP || aIP == n.gateway() {
		t.Fatalf("addresses a %s, b %s, gateway %s; want distinct", aIP, bIP, n.gateway())
	}
	bAddr := net.JoinHostPort(bIP, "7070")
	lis := n.command("b", os.Args[0])
	lis.Env = append(os.Environ(), netnsHelperEnv+"=listen "+bAddr)
	p, err := servers.StartCommand("listener", lis, t.TempDir()+"/listener.log")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	// Wait (at most 5 s) for the listener; from a's namespace, through the bridge.
	var out string
	for i := 0; i < 50; i++ {
		if out, err = dialFrom(n, "a", bAddr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("dial b from a before any cut: %v: %s", err, out)
	}
	if c, err := net.DialTimeout("tcp", bAddr, time.Second); err != nil {
		t.Fatalf("dial b from the harness: %v", err)
	} else {
		c.Close()
	}

	if err := n.cut([]string{"a"}, []string{"b"}); err != nil {
		t.Fatalf("cut: %v", err)
	}
	began := time.Now()
	out, err = dialFrom(n, "a", bAddr)
	if err == nil || !strings.Contains(out, "timeout") {
		t.Errorf("dial b from a across the cut = %v: %q; want a timeout", err, out)
	}
	if d := time.Since(began); d < time.Second {
		t.Errorf("dial across the cut failed after %v; want it to time out (1.5 s), not fail at once", d)
	}
	if c, err := net.DialTimeout("tcp", bAddr, time.Second); err != nil {
		t.Errorf("dial b from the harness during the a|b cut: %v; want it to work", err)
	} else {
		c.Close()
	}

	if err := n.heal(); err != nil {
		t.Fatalf("heal: %v", err)
	}
	if out, err = dialFrom(n, "a", bAddr); err != nil {
		t.Errorf("dial b from a after heal: %v: %s", err, out)
	}

	p.Kill()
	n.close()
	closed = true
	if left := namesOf(t, n.id); len(left) > 0 {
		t.Errorf("after close, left of %s: %q", n.id, left)
	}
	if left := namesOf(t, n.gwLink); len(left) > 0 {
		t.Errorf("after close, gateway link left: %q", left)
	}
}

// A new layer sweeps what a killed run left behind: namespaces and gateway links of
// the prefix whose pid no longer runs; and a run with the partition nemesis leaves
// none of its own.
func TestNetLayer_SweepsStaleAndRunLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("creates network namespaces; skipped under -short")
	}
	// A pid that ran and is gone (tried a few times, in case one is reused at once).
	pid := 0
	for i := 0; i < 10 && pid == 0; i++ {
		dead := exec.Command("true")
		if err := dead.Run(); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(dead.Process.Pid, 0); errors.Is(err, syscall.ESRCH) {
			pid = dead.Process.Pid
		}
	}
	if pid == 0 {
		t.Fatal("no exited pid stayed free")
	}
	pid36 := strconv.FormatInt(int64(pid), 36)
	staleNS := netnsPrefix + "-" + pid36 + "-0-br"
	staleLink := netnsPrefix + pid36 + "-0"
	if err := ipCmd("netns", "add", staleNS); err != nil {
		t.Fatal(err)
	}
	if err := ipCmd("-n", staleNS, "link", "add", "gw", "type", "veth", "peer", "name", staleLink, "netns", strconv.Itoa(os.Getpid())); err != nil {
		ipCmd("netns", "del", staleNS)
		t.Fatal(err)
	}
	sum := runChaos(t, Config{Workers: 2, Duration: 3 * time.Second, Interval: time.Second, MaxFaults: 1,
		Nemeses: []string{NemesisPartition}, Fencing: true, Seed: 21})
	if left := namesOf(t, staleNS); len(left) > 0 {
		ipCmd("netns", "del", staleNS)
		t.Errorf("stale namespace not swept: %q", left)
	}
	removeLink(staleLink)
	if sum.Faults[NemesisPartition] < 1 {
		t.Errorf("faults = %v, want a partition", sum.Faults)
	}
	own := netnsPrefix + "-" + strconv.FormatInt(int64(os.Getpid()), 36) + "-"
	if left := namesOf(t, own); len(left) > 0 {
		t.Errorf("after the run, namespaces of this process left: %q", left)
	}
	if left := namesOf(t, netnsPrefix+strconv.FormatInt(int64(os.Getpid()), 36)+"-"); len(left) > 0 {
		t.Errorf("after the run, gateway links of this process left: %q", left)
	}
}

// checkFenced fails t unless the fenced run sum has no violation, a linearizable
// history, at least min partitions, progress, and operations stalled over ttl (the
// run's lease TTL) by them.
func checkFenced(t *testing.T, sum *Summary, min int, ttl time.Duration) {
	t.Helper()
	wantNoViolation(t, sum)
	r := sum.Report
	if sum.Faults[NemesisPartition] < min {
		t.Errorf("faults injected = %v, want at least %d partitions", sum.Faults, min)
	}
	if r.Writes < 10 {
		t.Errorf("accepted writes = %d, want at least 10 (workers made no progress?)", r.Writes)
	}
	if n := stalled(t, sum.Dir, ttl); n < 1 {
		t.Errorf("operations on fence serve that took over a TTL (%v) = 0, want at least 1 (the partitions never reached the workers?)", ttl)
	} else {
		t.Logf("operations stalled over a TTL: %d", n)
	}
}

// Partitions on bolt: fence serve cut off from the workers, or the holder cut off
// from fence serve, for 3 TTLs at a time, leave no stale write accepted, nothing
// lost and a linearizable history.
func TestRun_FencingOn_PartitionBolt_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 4, Duration: 10 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 4,
		Nemeses: []string{NemesisPartition}, Fencing: true, Seed: 22})
	checkFenced(t, sum, 2, 400*time.Millisecond)
	if sum.Faults["partition/serve"] < 1 || sum.Faults["partition/holder"] < 1 || sum.Faults["partition/serve"]+sum.Faults["partition/holder"] != sum.Faults[NemesisPartition] {
		t.Errorf("faults = %v, want serve and holder partitions, and no other", sum.Faults)
	}
}

// Partitions on etcd: the leader cut off from the other members and fence serve (a
// minority partition), or from the other members alone.
func TestRun_FencingOn_PartitionEtcd_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 3, Duration: 12 * time.Second, Interval: 2 * time.Second, MaxFaults: 3,
		Nemeses: []string{NemesisPartition}, Store: StoreEtcd, Fencing: true, Seed: 23})
	checkFenced(t, sum, 2, etcdMinTTL)
	if sum.Faults["partition/leader"] < 1 || sum.Faults["partition/split"] < 1 || sum.Faults["partition/leader"]+sum.Faults["partition/split"] != sum.Faults[NemesisPartition] {
		t.Errorf("faults = %v, want leader and split partitions, and no other", sum.Faults)
	}
}

// Partitions on redis: the primary cut off from its replica and the workers.
func TestRun_FencingOn_PartitionRedis_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 3, Duration: 10 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 3,
		Nemeses: []string{NemesisPartition}, Store: StoreRedis, Fencing: true, Seed: 24})
	checkFenced(t, sum, 2, 400*time.Millisecond)
	if sum.Faults["partition/primary"] != sum.Faults[NemesisPartition] {
		t.Errorf("faults = %v, want every partition a primary one", sum.Faults)
	}
}

// The partition control run: without fencing, partitions alone (no pause) must
// produce violations, or the fenced runs above proved nothing of the namespaced
// setup. They do: a request of the holder stalled by a partition of fence serve
// outlives the lease, and arrives, retransmitted once the partition heals, after
// the next holder's; with fencing off it is accepted. A run of a few faults may by
// chance have none of these, so up to three seeded runs are allowed, and the test
// fails if none of them finds a violation.
func TestRun_FencingOff_Partition_ControlFindsViolations(t *testing.T) {
	const attempts = 3
	for i := 0; i < attempts; i++ {
		sum := runChaos(t, Config{Workers: 4, Duration: 8 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 4,
			Nemeses: []string{NemesisPartition}, Fencing: false, Seed: uint64(41 + i)})
		if sum.Faults[NemesisPartition] < 1 {
			t.Fatalf("faults injected = %v, want at least one partition", sum.Faults)
		}
		if r := sum.Report; r.Found() && r.StaleAccepted+r.Lost > 0 {
			return
		}
		t.Logf("control run %d of %d (seed %d) found no violation", i+1, attempts, 41+i)
	}
	t.Errorf("control run: %d runs of partitions without fencing found no violation; the fenced partition runs prove nothing", attempts)
}

// stalled counts the workers' operations in dir, other than acquisitions (which
// wait for the lock by design), that took d or longer or never completed: what a
// partition between a worker and what it talks to does to them.
func stalled(t *testing.T, dir string, d time.Duration) int {
	t.Helper()
	n := 0
	for _, o := range workerOps(t, dir) {
		if o.Kind != KindAcquire && (o.Return == Never || o.Return-o.Call >= int64(d)) {
			n++
		}
	}
	return n
}

// workerOps returns the operations of every worker log in the run folder dir.
func workerOps(t *testing.T, dir string) []Op {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "worker-*.jsonl"))
	var all []Op
	for _, f := range files {
		ops, err := ReadHistoryFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ops...)
	}
	return all
}

// The etcd partitions reach etcd: with the leader cut off from the other members
// (and fence serve), those two elect a new leader among themselves; once healed, the
// three agree on a leader again.
func TestPartition_EtcdLeaderCut_MajorityElectsNewLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members in network namespaces; skipped under -short")
	}
	r := &run{cfg: Config{Binary: fenceBin, Store: StoreEtcd, TTL: etcdMinTTL}, dir: t.TempDir(), srv: &server{}}
	defer r.close()
	n, err := newNetLayer()
	if err != nil {
		t.Fatalf("newNetLayer: %v", err)
	}
	r.net = n
	r.onClose(n.close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := (&etcdStore{}).setup(ctx, r); err != nil {
		t.Fatal(err)
	}
	p := &partitionNemesis{}
	if err := p.setup(ctx, r); err != nil {
		t.Fatal(err)
	}
	old, err := r.etcd.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.n, p.odd = 1, false // the next fault is the leader kind
	f, err := p.inject(ctx, rand.New(rand.NewPCG(1, 2)))
	if err != nil || f == nil || f.kind != "leader" {
		t.Fatalf("inject = %+v, %v; want a leader partition", f, err)
	}
	var others []string
	for _, m := range r.etcd.Members {
		if m != old {
			others = append(others, m.ClientURL)
		}
	}
	// etcdmember.Leader succeeds only when the members asked agree on a leader that
	// is one of them: here, a new leader of the majority.
	for try := 0; try < 100; try++ { // at most about 10 s with the 1 s status timeouts
		if _, err = etcdmember.Leader(ctx, others); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the majority elected no leader of its own while %s was cut off: %v", old.Name, err)
	}
	if err := f.heal(); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(ctx, 15*time.Second)
	defer lcancel()
	if _, err := r.etcd.Leader(lctx); err != nil {
		t.Errorf("after heal the three members agree on no leader: %v", err)
	}
}

// Partitions compose with the other nemeses of their store: on bolt with pauses,
// kills and link faults (the workers then reach fence serve through the harness's
// proxy, which a partition cuts too), and on redis with failovers (a partition cuts
// whichever server is the primary at the time).
func TestRun_FencingOn_PartitionWithOthers_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 4, Duration: 12 * time.Second, Interval: 2 * time.Second, MaxFaults: 3,
		Nemeses: []string{NemesisPartition, NemesisPause, NemesisKill, NemesisLink}, Fencing: true, Seed: 26})
	checkFenced(t, sum, 2, 400*time.Millisecond)
	sum = runChaos(t, Config{Workers: 3, Duration: 12 * time.Second, Interval: 2 * time.Second, MaxFaults: 3,
		Nemeses: []string{NemesisPartition, NemesisFailover}, Fencing: true, Seed: 27})
	checkFenced(t, sum, 2, 400*time.Millisecond)
	if sum.Faults[NemesisFailover] < 1 {
		t.Errorf("faults injected = %v, want at least one failover", sum.Faults)
	}
}

// The partition nemesis applies to the bolt, redis, etcd and cluster stores, runs on bolt when no
// store is given, and refuses the postgres resource, whose server on this machine's
// loopback the namespaced workers could not reach.
func TestConfig_Partition(t *testing.T) {
	c := Config{Nemeses: []string{NemesisPartition}}
	if err := c.resolveStore(); err != nil || c.Store != StoreBolt {
		t.Errorf("partition alone: store %q, err %v; want bolt", c.Store, err)
	}
	for _, s := range []string{StoreBolt, StoreRedis, StoreEtcd, StoreCluster} {
		if !Applies(s, NemesisPartition) {
			t.Errorf("Applies(%q, partition) = false, want true", s)
		}
	}
	_, err := Run(context.Background(), Config{Binary: "fence", Nemeses: []string{NemesisPartition}, Resource: ResourcePostgres, Postgres: "postgres://x@127.0.0.1:1/db"})
	if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "partition") {
		t.Errorf("partition with the postgres resource: Run error = %v, want fence.ErrInvalid naming the partition", err)
	}
}
