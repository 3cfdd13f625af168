package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// fenceBin is the fence binary built once for the package's runs ("" under -short).
var fenceBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(func() int {
		if !testing.Short() {
			dir, err := os.MkdirTemp("", "chaos-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, "chaos: temp dir:", err)
				return 1
			}
			defer os.RemoveAll(dir)
			fenceBin = filepath.Join(dir, "fence")
			out, err := exec.Command("go", "build", "-tags", FaultClockTag, "-o", fenceBin, "../../cmd/fence").CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "chaos: go build ./cmd/fence: %v\n%s", err, out)
				return 1
			}
		}
		return m.Run()
	}())
}

// wantNoViolation fails t unless the fenced run sum accepted no stale write, lost
// no acknowledged write, never let a rejected value be read, and left a linearizable
// history.
func wantNoViolation(t *testing.T, sum *Summary) {
	t.Helper()
	r := sum.Report
	if r.StaleAccepted != 0 || r.Lost != 0 || r.RejectedSeen != 0 {
		t.Errorf("stale accepted, lost, rejected seen = %d, %d, %d; want 0, 0, 0; violations %q", r.StaleAccepted, r.Lost, r.RejectedSeen, r.Violations)
	}
	if r.Linearizable != porcupine.Ok {
		t.Errorf("Linearizable = %v, want Ok; history in %v", r.Linearizable, sum.Saved)
	}
}

func runChaos(t *testing.T, cfg Config) *Summary {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos runs start real processes; skipped under -short")
	}
	cfg.Binary = fenceBin
	cfg.Results = t.TempDir()
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := sum.Report
	t.Logf("%s fencing=%v faults=%v: ops %d, acquisitions %d, rejected %d, stale accepted %d, lost %d, overlaps %d, unknown %d, linearizable %v",
		sum.Nemeses, sum.Fencing, sum.Faults, r.Operations, r.Acquisitions, r.StaleRejected, r.StaleAccepted, r.Lost, r.Overlaps, r.Unknown, r.Linearizable)
	return sum
}

// The CI pass: with fencing on, pauses past the TTL, kill -9 of the server and link
// faults (latency, resets, cuts), and Redis failovers to a replica that missed
// increments (regressed tokens, refused and healed) leave
// no stale write accepted, no acknowledged write lost, and a linearizable history.
func TestRun_FencingOn_AllNemeses_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 4, Duration: 12 * time.Second, Interval: 2 * time.Second, MaxFaults: 4,
		Nemeses: []string{NemesisPause, NemesisKill, NemesisLink, NemesisFailover}, Fencing: true, Seed: 1})
	wantNoViolation(t, sum)
	r := sum.Report
	if sum.Faults[NemesisPause] < 1 || sum.Faults[NemesisKill] < 1 || sum.Faults[NemesisLink] < 1 || sum.Faults[NemesisFailover] < 1 {
		t.Errorf("faults injected = %v, want at least one of each nemesis", sum.Faults)
	}
	if r.Writes < 10 {
		t.Errorf("accepted writes = %d, want at least 10 (workers made no progress?)", r.Writes)
	}
	if !sum.Passed() {
		t.Errorf("Passed() = false, want true")
	}
}

// The member-loss pass: `fence serve` on a 3-member etcd cluster whose leader is
// killed with SIGKILL and restarted on its data, together with pauses of the lock
// holder, leaves no stale write accepted, no acknowledged write lost, and a
// linearizable history.
func TestRun_FencingOn_EtcdMemberLoss_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 3, Duration: 10 * time.Second, Interval: 2 * time.Second, MaxFaults: 3,
		Nemeses: []string{NemesisMember, NemesisPause}, Fencing: true, Seed: 4})
	r := sum.Report
	if sum.Backend != "fence serve (etcd x3)" {
		t.Errorf("Backend = %q, want %q", sum.Backend, "fence serve (etcd x3)")
	}
	if r.StaleAccepted != 0 || r.Lost != 0 || r.RejectedSeen != 0 {
		t.Errorf("stale accepted, lost, rejected seen = %d, %d, %d; want 0, 0, 0; violations %q", r.StaleAccepted, r.Lost, r.RejectedSeen, r.Violations)
	}
	if r.Linearizable != porcupine.Ok {
		t.Errorf("Linearizable = %v, want Ok; history in %v", r.Linearizable, sum.Saved)
	}
	if sum.Faults[NemesisMember] < 1 || sum.Faults[NemesisPause] < 1 {
		t.Errorf("faults injected = %v, want at least one member kill and one pause", sum.Faults)
	}
	if r.Writes < 10 {
		t.Errorf("accepted writes = %d, want at least 10 (workers made no progress?)", r.Writes)
	}
}

// The PostgreSQL resource: the counter is a table row written through
// postgres.Guard (the resource fence advanced in the row update's transaction);
// pauses of the lock holder and kills of the server leave no stale write accepted,
// no acknowledged write lost, and a linearizable history; the control run on it
// finds violations.
func TestRun_PostgresResource_FencedPassesControlFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	pg := servertest.Postgres(t)
	dsn := pg.CreateDatabase(t)
	sum := runChaos(t, Config{Workers: 3, Duration: 6 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 3,
		Nemeses: []string{NemesisPause, NemesisKill}, Fencing: true, Seed: 5, Resource: ResourcePostgres, Postgres: dsn})
	r := sum.Report
	if !strings.HasSuffix(sum.Backend, "+ postgres") {
		t.Errorf("Backend = %q, want it to end in %q", sum.Backend, "+ postgres")
	}
	if r.StaleAccepted != 0 || r.Lost != 0 || r.RejectedSeen != 0 || r.Linearizable != porcupine.Ok {
		t.Errorf("stale accepted, lost, rejected seen, linearizable = %d, %d, %d, %v; want 0, 0, 0, Ok; violations %q", r.StaleAccepted, r.Lost, r.RejectedSeen, r.Linearizable, r.Violations)
	}
	if sum.Faults[NemesisPause] < 1 || r.Writes < 10 {
		t.Errorf("pauses, accepted writes = %d, %d; want >= 1, >= 10", sum.Faults[NemesisPause], r.Writes)
	}
	// The control run on the same server (a fresh database): without fencing the
	// pauses must produce violations in the table, or the checker proved nothing there.
	dsn = pg.CreateDatabase(t)
	sum = runChaos(t, Config{Workers: 4, Duration: 6 * time.Second, Interval: 700 * time.Millisecond, MaxFaults: 5, Hold: 60 * time.Millisecond,
		Nemeses: []string{NemesisPause}, Fencing: false, Seed: 6, Resource: ResourcePostgres, Postgres: dsn})
	if r := sum.Report; !r.Found() || r.StaleAccepted+r.Lost == 0 {
		t.Errorf("postgres control run: Found() = %v, stale accepted %d, lost %d; want violations", r.Found(), r.StaleAccepted, r.Lost)
	}
}

// RunEtcdMember passes on the config checks of internal/servers/etcdmember (whose tests cover
// every bad field) as fence.ErrInvalid, before it starts anything.
func TestRunEtcdMember_BadConfig_Invalid(t *testing.T) {
	m := EtcdMemberConfig{Name: "m0", Dir: t.TempDir(), ClientURL: "127.0.0.1:1", PeerURL: "http://127.0.0.1:2", InitialCluster: "m0=http://127.0.0.1:2"}
	err := RunEtcdMember(context.Background(), m)
	if !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "chaos: ") {
		t.Errorf("RunEtcdMember with a bad client url = %v, want a chaos: error matching fence.ErrInvalid", err)
	}
}

// A nemesis picks its store when none is given; every store lists what applies to it.
func TestConfig_ResolveStore(t *testing.T) {
	for nemeses, want := range map[string]string{"": StoreBolt, "pause,kill": StoreBolt, "failover": StoreRedis, "pause,member": StoreEtcd, "disk": StoreBolt} {
		c := Config{}
		if nemeses != "" {
			c.Nemeses = strings.Split(nemeses, ",")
		}
		if err := c.resolveStore(); err != nil || c.Store != want {
			t.Errorf("nemeses %q: store %q, err %v; want %q", nemeses, c.Store, err, want)
		}
	}
	for _, s := range Stores {
		if newStore(s) == nil || len(storeNemeses[s]) == 0 {
			t.Errorf("store %q: no implementation or no nemesis applies", s)
		}
		for _, n := range storeNemeses[s] {
			if newNemesis(n) == nil {
				t.Errorf("store %q lists unknown nemesis %q", s, n)
			}
		}
	}
}

func TestRun_BadConfig_Invalid(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no binary":       {},
		"unknown nemesis": {Binary: "fence", Nemeses: []string{"flood"}},
		"twice":           {Binary: "fence", Nemeses: []string{"pause", "pause"}},
		"one worker":      {Binary: "fence", Workers: 1},
		"tiny ttl":        {Binary: "fence", TTL: time.Millisecond},
		"bad resource":    {Binary: "fence", Resource: "mysql"},
		"postgres no dsn": {Binary: "fence", Resource: ResourcePostgres},
		"dsn no postgres": {Binary: "fence", Postgres: "postgres://x@127.0.0.1:1/db"},
		"unknown store":   {Binary: "fence", Store: "mongo"},
		"not on store":    {Binary: "fence", Store: StoreBolt, Nemeses: []string{NemesisFailover}},
		"two stores":      {Binary: "fence", Nemeses: []string{NemesisFailover, NemesisMember}},
	} {
		_, err := Run(context.Background(), cfg)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: Run error = %v, want fence.ErrInvalid", name, err)
		}
	}
}

func TestWorkerConfig_Validate(t *testing.T) {
	good := WorkerConfig{Server: "http://127.0.0.1:1", Lock: "chaos", Key: "k", TTL: time.Second}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(good) = %v, want nil", err)
	}
	for name, mut := range map[string]func(*WorkerConfig){
		"no server": func(c *WorkerConfig) { c.Server = "" },
		"bad lock":  func(c *WorkerConfig) { c.Lock = "" },
		"no key":    func(c *WorkerConfig) { c.Key = "" },
		"zero ttl":  func(c *WorkerConfig) { c.TTL = 0 },
		"neg id":    func(c *WorkerConfig) { c.ID = -1 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want fence.ErrInvalid", name, err)
		}
	}
}

// A worker against a server that is not there records failed acquisitions and
// stops when its context ends.
func TestRunWorker_NoServer_RecordsFailuresAndStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	addr, err := freeAddr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "w.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	err = RunWorker(ctx, WorkerConfig{Server: "http://" + addr, Lock: "chaos", Key: "k", TTL: time.Second, Start: MonoNow()}, f)
	f.Close()
	if err != nil {
		t.Fatalf("RunWorker = %v, want nil at the end of its context", err)
	}
	ops, err := ReadHistoryFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) == 0 {
		t.Fatalf("recorded 0 ops, want failed acquisitions")
	}
	for _, o := range ops {
		if o.Kind != KindAcquire || o.Result != ResultFailed {
			t.Errorf("op %+v, want a failed acquire", o)
		}
	}
}
