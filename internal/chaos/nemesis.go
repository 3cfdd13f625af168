package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// nemesis is one kind of fault. A new kind (a partition, a clock step, a full disk) is
// one type that implements it, one name in Nemeses and one entry in newNemesis.
//
// A run calls setup for every configured nemesis before it starts fence serve and the
// workers, then, in a goroutine per nemesis, calls inject about every Config.Interval
// (at most Config.MaxFaults times), counts each fault, keeps it for its hold and heals
// it, until the run's time is up.
type nemesis interface {
	// name returns the nemesis's name: its value in Config.Nemeses and its key in
	// Summary.Faults.
	name() string
	// setup prepares the run for the nemesis: it may start what the nemesis acts on
	// (registering its shutdown with r.onClose) and set where fence serve keeps its
	// state, where the workers connect and who grants their locks. It returns an error
	// if what it needs does not start.
	setup(ctx context.Context, r *run) error
	// inject injects one fault, drawing its random choices from rng, and returns it. It
	// returns a nil fault and no error if ctx ended before anything was injected; an
	// error ends the run.
	inject(ctx context.Context, rng *rand.Rand) (*fault, error)
}

// fault is one injected fault.
type fault struct {
	kind string        // a sub-kind, also counted as "<nemesis>/<kind>" ("link/cut"); "" for none
	hold time.Duration // how long it lasts before heal, not cut short by the end of the run
	heal func() error  // ends it; nil if it ends by itself
}

// newNemesis returns the nemesis of the given name, nil for an unknown name.
func newNemesis(name string) nemesis {
	switch name {
	case NemesisPause:
		return &pauseNemesis{}
	case NemesisKill:
		return &killNemesis{}
	case NemesisLink:
		return &linkNemesis{}
	case NemesisFailover:
		return &failoverNemesis{}
	case NemesisMember:
		return &memberNemesis{}
	case NemesisDisk:
		return &diskNemesis{}
	case NemesisClock:
		return &clockNemesis{}
	case NemesisPartition:
		return &partitionNemesis{}
	case NemesisCrash:
		return &crashNemesis{}
	}
	return nil
}

// runNemesis injects n's faults until ctx ends or cfg.MaxFaults were injected, calling
// count with the name of each fault (and of its kind). It returns the error of a fault
// that could not be injected or healed.
func runNemesis(ctx context.Context, cfg Config, n nemesis, rng *rand.Rand, count func(string)) error {
	for i := 0; cfg.MaxFaults == 0 || i < cfg.MaxFaults; i++ {
		if !sleepCtx(ctx, jitter(rng, cfg.Interval)) {
			return nil
		}
		f, err := n.inject(ctx, rng)
		if err != nil || f == nil {
			return err
		}
		count(n.name())
		if f.kind != "" {
			count(n.name() + "/" + f.kind)
		}
		time.Sleep(f.hold)
		if f.heal != nil {
			if err := f.heal(); err != nil {
				return err
			}
		}
	}
	return nil
}

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter returns a duration uniformly in [d/2, 3d/2).
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)+1))
}

// pauseNemesis SIGSTOPs the lock holder (see holder) for 3 TTLs, so its lease expires
// and another worker takes the lock, then SIGCONTs it. On the cluster store with
// fencing on, every second fault ("node", counted as "pause/node"; the holder's is
// "pause/worker") stops a node instead, drawn at random, for 3 TTLs: a leader stopped
// loses its term to the others, and a node's requests in flight and its own timers
// carry on late when it wakes. The control run (fencing off) pauses the
// holder every time: its pauses are there to make stale writes, which a node's pause
// does not.
type pauseNemesis struct {
	r *run
	n int // faults injected
}

func (*pauseNemesis) name() string { return NemesisPause }

func (n *pauseNemesis) setup(_ context.Context, r *run) error { n.r = r; return nil }

func (n *pauseNemesis) inject(ctx context.Context, rng *rand.Rand) (*fault, error) {
	n.n++
	if len(n.r.nodes) > 0 && n.r.cfg.Fencing && n.n%2 == 0 {
		return n.pauseNode(rng)
	}
	target := n.r.holder(ctx, rng)
	if err := target.proc.Signal(syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("chaos: pause worker %d: %w", target.id, err)
	}
	kind := ""
	if len(n.r.nodes) > 0 {
		kind = "worker"
	}
	return &fault{kind: kind, hold: 3 * n.r.cfg.TTL, heal: func() error {
		if err := target.proc.Signal(syscall.SIGCONT); err != nil {
			return fmt.Errorf("chaos: resume worker %d: %w", target.id, err)
		}
		return nil
	}}, nil
}

// pauseNode stops a node of the cluster store (SIGSTOP) for 3 TTLs: one drawn at
// random among those running (the kill nemesis may have one down). The heal resumes
// that process, unless the kill nemesis killed it meanwhile (a stopped process dies
// of SIGKILL too), when there is nothing left to resume.
func (n *pauseNemesis) pauseNode(rng *rand.Rand) (*fault, error) {
	var (
		target  *node
		stopped *servers.Process
	)
	for _, i := range rng.Perm(len(n.r.nodes)) {
		m := n.r.nodes[i]
		err := m.life.WithProcess(func(p *servers.Process) error {
			if p == nil {
				return nil
			}
			if err := p.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
			stopped = p
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("chaos: pause node %s: %w", m.name, err)
		}
		if stopped != nil {
			target = m
			break
		}
	}
	if target == nil {
		return nil, fmt.Errorf("chaos: pause node: no node runs")
	}
	return &fault{kind: "node", hold: 3 * n.r.cfg.TTL, heal: func() error {
		return target.life.WithProcess(func(p *servers.Process) error {
			if p != stopped {
				return nil // killed meanwhile: gone, or a new process
			}
			if err := p.Signal(syscall.SIGCONT); err != nil {
				return fmt.Errorf("chaos: resume node %s: %w", target.name, err)
			}
			return nil
		})
	}}, nil
}

// holder returns the lock holder inside its critical section: the worker whose latest
// acquisition has the token the lock's inspector reports as held, and whose latest
// recorded operation is that acquisition, its fence or its read. A holder caught
// there wakes up to a write its lease no longer covers; one caught in its release
// (its write done) or waiting for the lock proves nothing, and on a slow store (etcd:
// grants and releases take longer than the critical section) that is where a single
// look mostly finds it. So holder looks again every 10ms for up to a TTL (at least
// 500ms), then takes the holder wherever it is, or a random worker (drawn from rng)
// if none matches.
func (r *run) holder(ctx context.Context, rng *rand.Rand) *worker {
	target := r.workers[rng.IntN(len(r.workers))]
	deadline := time.Now().Add(max(r.cfg.TTL, 500*time.Millisecond))
	for try := 0; try < 100 && ctx.Err() == nil; try++ {
		ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		info, err := r.inspector.Inspect(ictx, runLock)
		cancel()
		if err == nil && info.Held {
			for _, w := range r.workers {
				w.tail()
				w.mu.Lock()
				inside := w.token == info.Token && w.critical
				if w.token == info.Token {
					target = w
				}
				w.mu.Unlock()
				if inside {
					return w
				}
			}
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 10*time.Millisecond) {
			break
		}
	}
	return target
}

// killNemesis SIGKILLs `fence serve`, leaves it down for a moment, and restarts it
// on the same port and data directory. On the cluster store it kills one node, the
// leader ("leader", found through GET /v1/cluster) or any node ("node", drawn at
// random), the two kinds in turn from a random one, keeps it down for about 2 TTLs
// (1 to 3), so that the others elect a leader if need be and leases outlive their
// holders' deadlines, and restarts it with the same flags and data, waiting until it
// is healthy again.
type killNemesis struct {
	r   *run
	odd bool // which kind is next on the cluster store; set at random at the first fault
	n   int  // faults injected
}

func (*killNemesis) name() string { return NemesisKill }

func (n *killNemesis) setup(_ context.Context, r *run) error { n.r = r; return nil }

func (n *killNemesis) inject(ctx context.Context, rng *rand.Rand) (*fault, error) {
	if len(n.r.nodes) > 0 {
		return n.killNode(ctx, rng)
	}
	srv := n.r.srv
	srv.kill()
	return &fault{hold: jitter(rng, 200*time.Millisecond), heal: func() error {
		if err := srv.start(); err != nil {
			return fmt.Errorf("chaos: restart after kill: %w", err)
		}
		return nil
	}}, nil
}

// killNode kills a node of the cluster store: the leader or a random one.
func (n *killNemesis) killNode(ctx context.Context, rng *rand.Rand) (*fault, error) {
	if n.n == 0 {
		n.odd = rng.IntN(2) == 0
	}
	n.n++
	n.odd = !n.odd
	kind, target := "node", n.r.nodes[rng.IntN(len(n.r.nodes))]
	if n.odd {
		kind = "leader"
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := n.r.leader(lctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil // the run ended while a leader was being elected
			}
			return nil, err
		}
		target = m
	}
	target.kill()
	return &fault{kind: kind, hold: jitter(rng, 2*n.r.cfg.TTL), heal: func() error {
		if err := target.start(); err != nil {
			return fmt.Errorf("chaos: restart node %s after kill: %w", target.name, err)
		}
		return nil
	}}, nil
}

// linkNemesis puts a linkProxy between the workers and the server (on the cluster
// store one per node), and injects one link fault at a time, picked at random:
// latency (0.5 to 1.5 TTL on every chunk, for 3 TTLs, so a write can arrive after its
// lease expired), reset (every open connection aborted) or cut (a black hole for 3
// TTLs, then a reset). On the cluster store latency and cuts hit the proxy of one node
// drawn at random (its clients time out and go to another), resets every proxy.
// Faults are counted as "link" and by kind ("link/latency", ...).
type linkNemesis struct {
	pxs []*linkProxy // in the order of r.servers()
	ttl time.Duration
}

func (*linkNemesis) name() string { return NemesisLink }

func (n *linkNemesis) setup(_ context.Context, r *run) error {
	for i, s := range r.servers() {
		px, err := startLinkProxy(r.harnessAddr(), s.addr)
		if err != nil {
			return err
		}
		r.onClose(func() { px.close() })
		r.workerURLs[i] = "http://" + px.addr()
		n.pxs = append(n.pxs, px)
	}
	n.ttl = r.cfg.TTL
	return nil
}

func (n *linkNemesis) inject(_ context.Context, rng *rand.Rand) (*fault, error) {
	// one draws the proxy of a latency or a cut; with one proxy it draws nothing, so
	// that a seed makes the same faults as before the cluster store had proxies.
	one := func() *linkProxy {
		if len(n.pxs) == 1 {
			return n.pxs[0]
		}
		return n.pxs[rng.IntN(len(n.pxs))]
	}
	switch rng.IntN(3) {
	case 0:
		px := one()
		px.setLatency(jitter(rng, n.ttl))
		return &fault{kind: "latency", hold: 3 * n.ttl, heal: func() error { px.setLatency(0); return nil }}, nil
	case 1:
		for _, px := range n.pxs {
			px.reset()
		}
		return &fault{kind: "reset"}, nil
	default:
		px := one()
		px.setCut(true)
		return &fault{kind: "cut", hold: 3 * n.ttl, heal: func() error { px.setCut(false); return nil }}, nil
	}
}
