package chaos

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/faultclock"
	"github.com/fencelock/fence/internal/faultclock/offset"
)

// checkClean fails t unless the fenced run sum shows no violation, a linearizable
// history and progress.
func checkClean(t *testing.T, sum *Summary) {
	t.Helper()
	wantNoViolation(t, sum)
	r := sum.Report
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
	controlFinds(t, "clock", 3, Config{Workers: 4, Duration: 12 * time.Second, Interval: 800 * time.Millisecond, MaxFaults: 10,
		Hold: 60 * time.Millisecond, Nemeses: []string{NemesisClock}, Fencing: false, Seed: 13})
}

// controlFinds runs the control run cfg up to attempts times, with seeds cfg.Seed,
// cfg.Seed+1, ..., until one finds a stale write accepted or a write lost; it fails
// t if none does, since the fenced runs of what (the faults) then prove nothing.
func controlFinds(t *testing.T, what string, attempts int, cfg Config) {
	t.Helper()
	first := cfg.Seed
	for i := range attempts {
		cfg.Seed = first + uint64(i)
		sum := runChaos(t, cfg)
		if r := sum.Report; r.Found() && r.StaleAccepted+r.Lost > 0 {
			return
		}
		t.Logf("control run %d of %d (seed %d) found no violation", i+1, attempts, cfg.Seed)
	}
	t.Errorf("control run: %d runs without fencing found no violation; the fenced %s runs prove nothing", attempts, what)
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

// What the clock nemesis does to a lock, step by step on a real fence serve (bolt):
// a forward step of fence serve's clock, and a backward step of the holder's, each
// make the holder A believe it still holds the lock, by its own clock, while B has
// been granted it; A's write with its lease's fence is then refused. Without the
// step, A's lease ends by its clock before B could get the lock. The chaos worker
// writes without looking at its lease's deadline, so this belief is shown here.
func TestClock_StepMakesStaleHolder_FenceRefusesIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fence serve; skipped under -short")
	}
	dir := t.TempDir()
	addr, err := freeAddr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serveClock := filepath.Join(dir, "serve.offset")
	if err := offset.Write(serveClock, 0); err != nil {
		t.Fatal(err)
	}
	srv := newServer(fenceBin, addr, filepath.Join(dir, "data"), filepath.Join(dir, "server.log"))
	srv.env = []string{offset.Env + "=" + serveClock}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	// stepServe steps fence serve's clock to off and waits until fence serve logged
	// that it followed (it looks every faultclock.PollInterval).
	followed := 0
	stepServe := func(off time.Duration) {
		if err := offset.Write(serveClock, off); err != nil {
			t.Fatal(err)
		}
		followed++
		for range 200 {
			if n, _ := steps(t, dir); n >= followed {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("fence serve did not follow step %d to %v within 2s", followed, off)
	}
	ctx := t.Context()
	const ttl = time.Second
	late := ttl + 300*time.Millisecond // how long A is held up before it writes
	for _, tc := range []struct {
		name string
		step func(a *faultclock.Clock) // steps a clock, returns once A's lease ended at the server
		heal func()
	}{
		{"none", func(*faultclock.Clock) { time.Sleep(late) }, func() {}},
		{"serve-forward", func(*faultclock.Clock) { stepServe(4 * ttl) }, func() { stepServe(0) }},
		{"holder-backward", func(a *faultclock.Clock) { a.Step(-4 * ttl); time.Sleep(late) }, func() {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lock, key := "clock-"+tc.name, "clock/"+tc.name
			aClock := faultclock.New()
			a, err := fencehttp.NewClient(srv.url(), &fencehttp.ClientOptions{Clock: aClock})
			if err != nil {
				t.Fatal(err)
			}
			b, err := fencehttp.NewClient(srv.url(), nil)
			if err != nil {
				t.Fatal(err)
			}
			la, err := a.Acquire(ctx, lock, ttl)
			if err != nil {
				t.Fatal(err)
			}
			tc.step(aClock)
			defer tc.heal()
			if tc.name == "none" {
				select { // its expiry timer may run a little late on a busy machine
				case <-la.Done():
				case <-time.After(2 * time.Second):
					t.Fatalf("without a step A believes it holds %v after a %v grant", late+2*time.Second, ttl)
				}
				return
			}
			believes := la.Err() == nil
			if !believes {
				t.Fatalf("A's lease ended by its own clock (%v); want the step to make it believe it holds", la.Err())
			}
			lb, err := b.Acquire(ctx, lock, ttl, fence.WithWait(100*time.Millisecond))
			if err != nil {
				t.Fatalf("B's acquire while A's lease is over at the server: %v, want granted", err)
			}
			defer lb.Release(ctx)
			if err := b.Put(ctx, key, []byte("b"), lb.Fence()); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			err = a.Put(ctx, key, []byte("a"), la.Fence())
			if !errors.Is(err, fence.ErrStaleToken) {
				t.Errorf("A's write with its lease's fence after B's: %v, want fence.ErrStaleToken", err)
			}
			if item, err := b.Get(ctx, key); err != nil || string(item.Value) != "b" {
				t.Errorf("key after A's refused write = %v, %v; want B's value", item, err)
			}
		})
	}
}
