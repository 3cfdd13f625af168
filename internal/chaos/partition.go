package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"time"
)

// NemesisPartition puts every host of the run in a network namespace of its own and
// partitions them (netns.go).
const NemesisPartition = "partition"

// partitionNemesis cuts hosts of the run off from each other for 3 TTLs (silently
// dropped frames, so connects time out and open connections stall), then heals the
// partition. What it cuts depends on the store, one kind picked at random per fault,
// counted as "partition/<kind>" (the two kinds of a store alternate, the first one
// picked at random, so every run of two faults or more has both):
//
//   - bolt: "serve", fence serve cut off from every worker; "holder", the lock
//     holder cut off from fence serve;
//   - etcd: "leader", the etcd leader cut off from the other members and from fence
//     serve (a minority partition: the majority elects a new leader while fence
//     serve goes on with it); "split", the leader cut off from the other members
//     alone, so fence serve still reaches an isolated member that cannot commit;
//   - redis: "primary", the Redis primary cut off from its replica, the workers and
//     the proxy they reach it through;
//   - cluster: "leader", the leader node cut off from the other nodes while the
//     workers still reach it; "follower", a follower likewise; "leader-all", the
//     leader cut off from the other nodes and the workers (see clusterCut; three
//     kinds in turn).
//
// When the workers reach fence serve through the link nemesis's proxy (or Redis
// through the redis store's), which runs in the harness, the harness is on the
// workers' side of the cut.
type partitionNemesis struct {
	r     *run
	hold  time.Duration
	odd   bool // which of the store's two kinds is next; set at random at the first fault
	first int  // the cluster store's first kind, drawn at the first fault
	n     int  // faults injected
}

func (*partitionNemesis) name() string { return NemesisPartition }

func (n *partitionNemesis) setup(_ context.Context, r *run) error {
	if r.net == nil {
		return fmt.Errorf("chaos: partition: the run has no network namespaces")
	}
	n.r, n.hold = r, 3*r.cfg.TTL
	return nil
}

func (n *partitionNemesis) inject(ctx context.Context, rng *rand.Rand) (*fault, error) {
	if n.n == 0 {
		n.odd = rng.IntN(2) == 0
	}
	n.n++
	n.odd = !n.odd
	var kind string
	var a, b []string
	switch n.r.cfg.Store {
	case StoreEtcd:
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := n.r.etcd.Leader(lctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil // the run ended while a leader was being elected
			}
			return nil, fmt.Errorf("chaos: partition: etcd leader: %w", err)
		}
		a = []string{"etcd-" + m.Name}
		for _, o := range n.r.etcd.Members {
			if o != m {
				b = append(b, "etcd-"+o.Name)
			}
		}
		kind = "split"
		if n.odd {
			kind = "leader"
			b = append(b, "serve")
		}
	case StoreCluster:
		var err error
		if kind, a, b, err = n.clusterCut(ctx, rng); err != nil || kind == "" {
			return nil, err
		}
	case StoreRedis:
		// The primary is where the proxy sends the workers (the failover nemesis
		// retargets it, and swaps the pair's fields in its own goroutine).
		kind = "primary"
		host, _, _ := net.SplitHostPort(n.r.redis.proxy.targetAddr())
		a = []string{n.r.net.hostOf(host)}
		b = append(n.r.workerHosts(), hostHarness, "redis-0", "redis-1")
	default:
		if n.odd {
			kind = "serve"
			a, b = []string{"serve"}, n.r.workerHosts()
		} else {
			kind = "holder"
			a, b = []string{fmt.Sprintf("worker-%d", n.r.holder(ctx, rng).id)}, []string{"serve"}
		}
		if n.r.viaHarness() {
			b = append(b, hostHarness)
		}
	}
	if err := n.r.net.cut(a, b); err != nil {
		_ = n.r.net.heal()
		return nil, fmt.Errorf("chaos: partition %s: %w", kind, err)
	}
	return &fault{kind: kind, hold: n.hold, heal: func() error {
		if err := n.r.net.heal(); err != nil {
			return fmt.Errorf("chaos: heal partition %s: %w", kind, err)
		}
		return nil
	}}, nil
}

// clusterCut returns the kind and sides of a partition of the cluster store, the
// kinds in turn from a random one: "leader", the leader cut off from the other nodes
// (the workers still reach it, and must be refused, not granted); "follower", a
// follower drawn at random cut off from the other nodes (likewise); "leader-all", the
// leader cut off from the other nodes and from the workers (their requests to it time
// out). It returns an empty kind and no error if ctx ended while a leader was being
// elected.
func (n *partitionNemesis) clusterCut(ctx context.Context, rng *rand.Rand) (kind string, a, b []string, err error) {
	kinds := []string{"leader", "follower", "leader-all"}
	if n.n == 1 {
		n.first = rng.IntN(len(kinds))
	}
	kind = kinds[(n.first+n.n-1)%len(kinds)]
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	leader, err := n.r.leader(lctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, nil, nil
		}
		return "", nil, nil, fmt.Errorf("chaos: partition: %w", err)
	}
	target := leader
	if kind == "follower" {
		var followers []*node
		for _, m := range n.r.nodes {
			if m != leader {
				followers = append(followers, m)
			}
		}
		target = followers[rng.IntN(len(followers))]
	}
	a = []string{target.host}
	for _, m := range n.r.nodes {
		if m != target {
			b = append(b, m.host)
		}
	}
	if kind == "leader-all" {
		b = append(b, n.r.workerHosts()...)
		if n.r.viaHarness() {
			b = append(b, hostHarness)
		}
	}
	return kind, a, b, nil
}

// workerHosts returns the host names of the workers.
func (r *run) workerHosts() []string {
	out := make([]string, len(r.workers))
	for i := range out {
		out[i] = fmt.Sprintf("worker-%d", i)
	}
	return out
}

// viaHarness reports whether the workers reach fence serve (or the cluster's nodes)
// through proxies of the harness rather than at its own address.
func (r *run) viaHarness() bool {
	u, err := url.Parse(r.workerURLs[0])
	if err != nil {
		return false
	}
	host, _, _ := net.SplitHostPort(u.Host)
	return host == r.harnessAddr()
}

// targetAddr returns where the proxy forwards to.
func (p *linkProxy) targetAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}
