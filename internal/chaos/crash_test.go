package chaos

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// wantFencedPass fails t unless the fenced run sum shows no stale write accepted, no
// acknowledged write lost, no rejected value read, a linearizable history, progress,
// and at least one fault of each of nemeses.
func wantFencedPass(t *testing.T, sum *Summary, nemeses ...string) {
	t.Helper()
	wantNoViolation(t, sum)
	r := sum.Report
	for _, n := range nemeses {
		if sum.Faults[n] < 1 {
			t.Errorf("faults injected = %v, want at least one %s", sum.Faults, n)
		}
	}
	if r.Writes < 10 {
		t.Errorf("accepted writes = %d, want at least 10 (workers made no progress?)", r.Writes)
	}
	if !sum.Passed() {
		t.Errorf("Passed() = false, want true")
	}
}

// wantControlFinds runs the control run cfg (fencing off) with up to three seeds from
// cfg.Seed on, and fails t unless one of them finds a stale write accepted or an
// acknowledged write lost. A short run makes only a few pauses, and a crash stalls
// every worker while the database is down (about half the time at these rates), so a
// pause may by chance land where nobody overtakes the paused holder; three runs
// without a violation mean the checker proves nothing on that store.
func wantControlFinds(t *testing.T, cfg Config) {
	t.Helper()
	const attempts = 3
	for i := 0; i < attempts; i++ {
		sum := runChaos(t, cfg)
		if r := sum.Report; r.Found() && r.StaleAccepted+r.Lost > 0 {
			return
		}
		t.Logf("%s control run %d of %d (seed %d) found no violation", cfg.Store, i+1, attempts, cfg.Seed)
		cfg.Seed++
	}
	t.Errorf("%s control run: %d runs without fencing found no violation; the fenced run proves nothing", cfg.Store, attempts)
}

// The stores with a database server that crash kills: fence serve --store postgres://
// on the run's own PostgreSQL (the counter a row of the same database written through
// postgres.Guard), and fence serve --store zk:// on a 3-server ensemble (the counter
// in fence serve's KV on it). kill -9 of PostgreSQL (every backend with it) while the
// workers write, or of the ZooKeeper leader (found by its mode), kept down about 2
// TTLs and restarted on its data, together with pauses of the lock holder, leave no
// stale write accepted, no acknowledged write lost, and a linearizable history; the
// control run on each store finds violations, or the fenced run proves nothing.
func TestRun_CrashStores_FencedPassesControlFails(t *testing.T) {
	for _, tc := range []struct {
		store, backend, kind string
		hold                 time.Duration // long enough that pauses land between a read and its write
		seed                 uint64
	}{
		{StorePostgres, "fence serve (postgres) + postgres", "postgres", 100 * time.Millisecond, 11},
		{StoreZooKeeper, "fence serve (zookeeper x3)", "zookeeper-leader", 20 * time.Millisecond, 13},
	} {
		t.Run(tc.store+"/fenced", func(t *testing.T) {
			sum := runChaos(t, Config{Store: tc.store, Workers: 3, Duration: 10 * time.Second, Interval: 2 * time.Second, MaxFaults: 3, Hold: tc.hold,
				Nemeses: []string{NemesisCrash, NemesisPause}, Fencing: true, Seed: tc.seed})
			if sum.Backend != tc.backend {
				t.Errorf("Backend = %q, want %q", sum.Backend, tc.backend)
			}
			wantFencedPass(t, sum, NemesisCrash, NemesisPause, NemesisCrash+"/"+tc.kind)
		})
		t.Run(tc.store+"/control", func(t *testing.T) {
			wantControlFinds(t, Config{Store: tc.store, Workers: 4, Duration: 8 * time.Second, Interval: 1200 * time.Millisecond, MaxFaults: 5, Hold: 100 * time.Millisecond,
				Nemeses: []string{NemesisCrash, NemesisPause}, Fencing: false, Seed: tc.seed + 1})
		})
	}
}

// The postgres store puts the counter on its own database unless told otherwise, and
// crash applies to the stores with a database server only.
func TestConfig_CrashStores(t *testing.T) {
	c := Config{Binary: "fence", Store: StorePostgres, Nemeses: []string{NemesisCrash}}
	if err := c.defaults(); err != nil || c.Resource != ResourcePostgres || c.Postgres != "" {
		t.Errorf("postgres store: resource %q, dsn %q, err %v; want %q, \"\" (the store's own), nil", c.Resource, c.Postgres, err, ResourcePostgres)
	}
	c = Config{Binary: "fence", Store: StorePostgres, Resource: ResourceServe}
	if err := c.defaults(); err != nil || c.Resource != ResourceServe {
		t.Errorf("postgres store, serve resource: resource %q, err %v; want %q, nil", c.Resource, err, ResourceServe)
	}
	c = Config{Binary: "fence", Store: StoreZooKeeper, Resource: ResourcePostgres}
	if err := c.defaults(); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("zookeeper store, postgres resource without a DSN: err %v, want fence.ErrInvalid", err)
	}
	c = Config{Nemeses: []string{NemesisPause, NemesisCrash}}
	if err := c.resolveStore(); err != nil || c.Store != StorePostgres {
		t.Errorf("nemeses pause,crash: store %q, err %v; want %q (the cheaper of the two crash applies to)", c.Store, err, StorePostgres)
	}
	for _, s := range Stores {
		want := s == StorePostgres || s == StoreZooKeeper
		if got := Applies(s, NemesisCrash); got != want {
			t.Errorf("Applies(%q, crash) = %v, want %v", s, got, want)
		}
		c := Config{Binary: "fence", Store: s, Nemeses: []string{NemesisCrash}}
		if err := c.defaults(); (err == nil) != want || (err != nil && !errors.Is(err, fence.ErrInvalid)) {
			t.Errorf("store %q with crash: err %v, want an error matching fence.ErrInvalid: %v", s, err, !want)
		}
	}
}
