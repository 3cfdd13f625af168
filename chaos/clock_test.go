package chaos

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fence"
)

// checkClean fails t unless the fenced run sum shows no violation, a linearizable
// history and progress.
func checkClean(t *testing.T, sum *Summary) {
	t.Helper()
	r := sum.Report
	if r.StaleAccepted != 0 || r.Lost != 0 || r.RejectedSeen != 0 {
		t.Errorf("stale accepted, lost, rejected seen = %d, %d, %d; want 0, 0, 0; violations %q", r.StaleAccepted, r.Lost, r.RejectedSeen, r.Violations)
	}
	if r.Linearizable != porcupine.Ok {
		t.Errorf("Linearizable = %v, want Ok; history in %v", r.Linearizable, sum.Saved)
	}
	if r.Writes < 10 {
		t.Errorf("accepted writes = %d, want at least 10 (workers made no progress?)", r.Writes)
	}
}

// steps returns how many steps the processes of the run in dir reported having
// followed ("faultclock: stepped" in fence serve's log and the workers' stderr).
func steps(t *testing.T, dir string) (serve, workers int) {
	t.Helper()
	count := func(pattern string) int {
		files, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			n += strings.Count(string(b), "faultclock: stepped")
		}
		return n
	}
	return count("server.log"), count("worker-*.err")
}

// Clock steps on the bolt store: fence serve's clock forward and backward while it
// runs and across a kill and restart (the store restores its leases from the
// wall-clock expiries in its file), and the lock holder's clock forward and
// backward, leave no stale write accepted, no acknowledged write lost and a
// linearizable history; every step reached the process it was meant for.
func TestRun_FencingOn_Clock_Bolt_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 4, Duration: 15 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 6,
		Nemeses: []string{NemesisClock}, Fencing: true, Seed: 11})
	checkClean(t, sum)
	f := sum.Faults
	store := f["clock/"+clockStoreForward] + f["clock/"+clockStoreBackward]
	restart := f["clock/"+clockStoreRestartForward] + f["clock/"+clockStoreRestartBackward]
	worker := f["clock/"+clockWorkerForward] + f["clock/"+clockWorkerBackward]
	if store < 1 || restart < 1 || worker < 1 {
		t.Errorf("faults %v: want at least one step of the running store, one across a restart and one of a worker", f)
	}
	// Each fault is a step and its heal; a restart step is read at start, not followed.
	serve, workers := steps(t, sum.Dir)
	if serve < 2*store+restart || workers < 2*worker {
		t.Errorf("steps followed by fence serve, workers = %d, %d; want at least %d, %d", serve, workers, 2*store+restart, 2*worker)
	}
}

// On the redis and etcd stores the clock steps the workers' clocks (those stores
// judge expiry by their own servers' clocks): the fenced runs stay clean.
func TestRun_FencingOn_Clock_WorkerSteps_RedisEtcd(t *testing.T) {
	for _, store := range []string{StoreRedis, StoreEtcd} {
		t.Run(store, func(t *testing.T) {
			sum := runChaos(t, Config{Workers: 3, Duration: 8 * time.Second, Interval: time.Second, MaxFaults: 3,
				Store: store, Nemeses: []string{NemesisClock}, Fencing: true, Seed: 12})
			checkClean(t, sum)
			if n := sum.Faults["clock/"+clockWorkerForward] + sum.Faults["clock/"+clockWorkerBackward]; n < 2 || n != sum.Faults[NemesisClock] {
				t.Errorf("faults %v: want at least two, all worker steps", sum.Faults)
			}
			if serve, workers := steps(t, sum.Dir); serve != 0 || workers < 2 {
				t.Errorf("steps followed by fence serve, workers = %d, %d; want 0 (not stepped on %s), at least 2", serve, workers, store)
			}
		})
	}
}

// The clock control run: without fencing, a forward step of the store's clock
// expires the holder's lease while it goes on, and the next holder's write and
// its own both land, so increments are lost (a backward step's heal, a forward
// step, does the same). Up to three seeded runs, as a short run makes few steps.
func TestRun_FencingOff_Clock_ControlFindsViolations(t *testing.T) {
	const attempts = 3
	for i := range attempts {
		sum := runChaos(t, Config{Workers: 4, Duration: 10 * time.Second, Interval: time.Second, MaxFaults: 8, Hold: 60 * time.Millisecond,
			Nemeses: []string{NemesisClock}, Fencing: false, Seed: uint64(13 + i)})
		if r := sum.Report; r.Found() && r.StaleAccepted+r.Lost > 0 {
			return
		}
		t.Logf("control run %d of %d (seed %d) found no violation", i+1, attempts, 13+i)
	}
	t.Errorf("control run: %d runs without fencing found no violation; the fenced clock runs prove nothing", attempts)
}

// The clock nemesis needs a binary built with the fault clock: the one TestMain
// built has it; anything else is refused before the run starts.
func TestCheckFaultClock(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the fence binary TestMain builds")
	}
	if err := checkFaultClock(fenceBin); err != nil {
		t.Errorf("checkFaultClock(tagged build) = %v, want nil", err)
	}
	notGo := filepath.Join(t.TempDir(), "fence")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bins := []string{notGo}
	// This test binary is a Go binary, built without the tag unless go test had it.
	tagged := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			tagged = tagged || s.Key == "-tags" && strings.Contains(s.Value, FaultClockTag)
		}
	}
	if self, err := os.Executable(); err == nil && !tagged {
		bins = append(bins, self)
	}
	for _, bin := range bins {
		_, err := Run(t.Context(), Config{Binary: bin, Nemeses: []string{NemesisClock}})
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "go build -tags faultclock ./cmd/fence") {
			t.Errorf("Run with clock on %s = %v, want fence.ErrInvalid saying how to build", bin, err)
		}
	}
}
