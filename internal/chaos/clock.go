package chaos

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/faultclock/offset"
)

// NemesisClock steps the clock of one process forward or backward by several
// seconds: fence serve's (the embedded bolt store judges lease expiry by it) or a
// worker's (its leases' local deadlines and its acquisitions' waits), through the
// fault clock of a fence binary built with -tags faultclock.
const NemesisClock = "clock"

// FaultClockTag is the build tag of a fence binary whose processes take a clock the
// clock nemesis can step.
const FaultClockTag = "faultclock"

// checkFaultClock returns an error matching fence.ErrInvalid unless bin is a fence
// binary built with FaultClockTag (as its build information says): without it the
// processes would ignore every step.
func checkFaultClock(bin string) error {
	why := "has none"
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		why = "is not a Go binary whose build can be read"
	} else {
		for _, s := range bi.Settings {
			if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), FaultClockTag) {
				return nil
			}
		}
	}
	return fmt.Errorf("chaos: %w: nemesis clock needs a fence binary with the fault clock, and %s %s: build it with go build -tags %s ./cmd/fence", fence.ErrInvalid, bin, why, FaultClockTag)
}

// The kinds of clock faults, counted as "clock/<kind>".
const (
	clockStoreForward         = "store-forward"          // fence serve's clock steps forward while it runs
	clockStoreBackward        = "store-backward"         // ... backward
	clockStoreRestartForward  = "store-restart-forward"  // fence serve is killed, its clock steps forward, it restarts
	clockStoreRestartBackward = "store-restart-backward" // ... backward
	clockWorkerForward        = "worker-forward"         // the lock holder's clock steps forward
	clockWorkerBackward       = "worker-backward"        // ... backward
)

// clockNemesis steps one process's clock at each fault, by a multiple of the TTL of
// at least 2 s, holds the step for 2 TTLs, and heals it by stepping back to the real
// time. It goes through the kinds in turn, from a random one, so a run of as many
// faults as kinds makes each once:
//
//   - store-forward: fence serve's store sees its holder's lease expire at once and
//     grants the lock to the next worker while the holder goes on;
//   - store-backward: the store keeps leases longer by the step; the heal, a forward
//     step, then expires them early;
//   - store-restart-forward and -backward: fence serve is killed (SIGKILL), its clock
//     stepped while it is down, and it restarts on its data, restoring the held
//     leases from the wall-clock expiries in its file (shortened or lengthened by
//     the step);
//   - worker-forward and -backward: the holder's (or a random worker's) leases end
//     early or late by its clock, and its waits for the lock are cut short or drawn out.
//
// The store kinds apply to the bolt store only (etcd and Redis judge expiry by their
// own servers' clocks), and the restart kinds only without the kill nemesis, which
// restarts fence serve on its own schedule.
type clockNemesis struct {
	r     *run
	dir   string
	kinds []string
	next  int // the kind of the next fault, an index into kinds; -1 before the first
}

func (*clockNemesis) name() string { return NemesisClock }

func (n *clockNemesis) setup(_ context.Context, r *run) error {
	n.r, n.dir, n.next = r, filepath.Join(r.dir, "clock"), -1
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return fmt.Errorf("chaos: clock: %w", err)
	}
	if r.hostEnv == nil {
		r.hostEnv = map[string][]string{}
	}
	for i := range r.cfg.Workers {
		host := fmt.Sprintf("worker-%d", i)
		if err := n.set(host, 0); err != nil {
			return err
		}
		r.hostEnv[host] = append(r.hostEnv[host], offset.Env+"="+n.path(host))
	}
	n.kinds = []string{clockWorkerForward, clockWorkerBackward}
	if r.cfg.Store != StoreBolt {
		return nil
	}
	if err := n.set("serve", 0); err != nil {
		return err
	}
	r.srv.env = append(r.srv.env, offset.Env+"="+n.path("serve"))
	// Interleaved, so that any three faults in a row step a worker, the running
	// store and (without kill) the store across a restart.
	n.kinds = []string{clockWorkerForward, clockStoreForward, clockWorkerBackward, clockStoreBackward}
	if !slices.Contains(r.cfg.Nemeses, NemesisKill) {
		n.kinds = []string{clockWorkerForward, clockStoreForward, clockStoreRestartForward,
			clockWorkerBackward, clockStoreBackward, clockStoreRestartBackward}
	}
	return nil
}

// path is the offset file of host's clock.
func (n *clockNemesis) path(host string) string { return filepath.Join(n.dir, host+".offset") }

// set steps host's clock to off from the real time; the process follows within a few
// milliseconds (faultclock.PollInterval), or reads it when it starts.
func (n *clockNemesis) set(host string, off time.Duration) error {
	if err := offset.Write(n.path(host), off); err != nil {
		return fmt.Errorf("chaos: clock: %w", err)
	}
	return nil
}

func (n *clockNemesis) inject(ctx context.Context, rng *rand.Rand) (*fault, error) {
	if n.next < 0 {
		n.next = rng.IntN(len(n.kinds))
	}
	kind := n.kinds[n.next%len(n.kinds)]
	n.next++
	ttl := n.r.cfg.TTL
	step := ttl * time.Duration(max(3, int((2*time.Second+ttl-1)/ttl))+rng.IntN(3))
	if strings.HasSuffix(kind, "-backward") {
		step = -step
	}
	host := "serve"
	if kind == clockWorkerForward || kind == clockWorkerBackward {
		host = fmt.Sprintf("worker-%d", n.r.holder(ctx, rng).id)
	}
	restart := kind == clockStoreRestartForward || kind == clockStoreRestartBackward
	if restart {
		n.r.srv.kill()
	}
	if err := n.set(host, step); err != nil {
		return nil, err
	}
	if restart {
		if err := n.r.srv.start(); err != nil {
			return nil, fmt.Errorf("chaos: clock: restart after a step: %w", err)
		}
	}
	return &fault{kind: kind, hold: 2 * ttl, heal: func() error { return n.set(host, 0) }}, nil
}
