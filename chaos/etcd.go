package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencelock/fence/internal/etcdmember"
)

// NemesisMember kills the etcd leader (SIGKILL) under `fence serve --store etcd://`
// and restarts it on the same data directory.
const NemesisMember = "member"

// etcdMinTTL is etcd's minimum lease TTL with the members' Raft timing.
const etcdMinTTL = etcdmember.MinLeaseTTL

// EtcdMemberConfig is what one etcd member process needs (the flags of the hidden
// `fence chaos etcd-member` mode); the members run internal/etcdmember's embedded
// configuration, the same as the test helpers' clusters.
type EtcdMemberConfig = etcdmember.Config

// RunEtcdMember runs one embedded etcd member until ctx ends (then it closes the
// member and returns nil) or the member fails. It returns a fence.ErrInvalid error for
// a bad config, or the error that stopped the member.
func RunEtcdMember(ctx context.Context, m EtcdMemberConfig) error {
	cfg, err := m.Embed()
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if err := etcdmember.Serve(ctx, cfg); err != nil {
		return fmt.Errorf("chaos: etcd member %s: %w", m.Name, err)
	}
	return nil
}

// memberNemesis runs `fence serve` on a 3-member etcd cluster whose members are
// processes of the fence binary (`fence chaos etcd-member`). It SIGKILLs the etcd
// leader (found through Status), keeps it down for about 2 TTLs (at least etcd's
// minimum lease TTL), so the others elect a new leader and leases outlive their
// holders' deadlines, then restarts it on the same data directory (initial cluster
// state existing) and waits until it serves again.
type memberNemesis struct {
	c    *etcdmember.Cluster
	down time.Duration
}

func (*memberNemesis) name() string { return NemesisMember }

func (n *memberNemesis) setup(ctx context.Context, r *run) error {
	dir := filepath.Join(r.dir, "etcd")
	command := func(m etcdmember.Config) *exec.Cmd {
		state := "new"
		if m.Existing {
			state = "existing"
		}
		return exec.Command(r.cfg.Binary, "chaos", "etcd-member", "--name", m.Name, "--dir", m.Dir,
			"--client-url", m.ClientURL, "--peer-url", m.PeerURL, "--initial-cluster", m.InitialCluster,
			"--cluster-token", m.ClusterToken, "--state", state)
	}
	c, err := etcdmember.StartCluster(ctx, dir, "chaos-"+filepath.Base(dir), 3, command)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	r.onClose(c.Close)
	var hosts []string
	for _, m := range c.Members {
		hosts = append(hosts, strings.TrimPrefix(m.ClientURL, "http://"))
	}
	r.srv.store = "etcd://" + strings.Join(hosts, ",") + "/chaos/"
	r.storeName = "etcd x3"
	n.c, n.down = c, max(2*r.cfg.TTL, etcdMinTTL)
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
