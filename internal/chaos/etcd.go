package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// NemesisMember kills the etcd leader (SIGKILL) under `fence serve --store etcd://`
// and restarts it on the same data directory.
const NemesisMember = "member"

// etcdMinTTL is etcd's minimum lease TTL with the members' Raft timing.
const etcdMinTTL = etcdmember.MinLeaseTTL

// EtcdMemberConfig is what one etcd member process needs (the flags of the hidden
// `fence chaos etcd-member` mode); the members run internal/servers/etcdmember's embedded
// configuration, the same as the test helpers' clusters.
type EtcdMemberConfig = etcdmember.Config

// RunEtcdMember runs one embedded etcd member until ctx ends (then it closes the
// member and returns nil) or the member fails. It returns a fence.ErrInvalid error for
// a bad config, or the error that stopped the member.
func RunEtcdMember(ctx context.Context, m EtcdMemberConfig) error {
	cfg, err := m.Embed()
	if err != nil {
		return fmt.Errorf("chaos: %w: %w", fence.ErrInvalid, err)
	}
	if err := etcdmember.Serve(ctx, cfg); err != nil {
		return fmt.Errorf("chaos: etcd member %s: %w", m.Name, err)
	}
	return nil
}

// memberNemesis acts on the etcd store's 3-member cluster. It SIGKILLs the etcd
// leader (found through Status), keeps it down for about 2 TTLs (at least etcd's
// minimum lease TTL), so the others elect a new leader and leases outlive their
// holders' deadlines, then restarts it on the same data directory (initial cluster
// state existing) and waits until it serves again.
type memberNemesis struct {
	c    *etcdmember.Cluster
	down time.Duration
}

func (*memberNemesis) name() string { return NemesisMember }

func (n *memberNemesis) setup(_ context.Context, r *run) error {
	if r.etcd == nil {
		return fmt.Errorf("chaos: member: the run has no etcd store")
	}
	n.c, n.down = r.etcd, max(2*r.cfg.TTL, etcdMinTTL)
	return nil
}

func (n *memberNemesis) inject(ctx context.Context, rng *rand.Rand) (*fault, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	m, err := n.c.Leader(lctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil // the run ended while a leader was being elected
		}
		return nil, fmt.Errorf("chaos: etcd leader: %w", err)
	}
	m.Kill()
	return &fault{hold: jitter(rng, n.down), heal: func() error {
		if err := n.c.Restart(context.Background(), m); err != nil {
			return fmt.Errorf("chaos: restart after member kill: %w", err)
		}
		return nil
	}}, nil
}
