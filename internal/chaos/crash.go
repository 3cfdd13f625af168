package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// NemesisCrash kills the store's database server with SIGKILL (PostgreSQL; the
// ZooKeeper leader) and restarts it on its data.
const NemesisCrash = "crash"

// crashNemesis acts on the store's crashTarget: each fault kills it with SIGKILL (for
// PostgreSQL the postmaster and every backend, while the workers write through
// postgres.Guard; for ZooKeeper the leader, found by its mode), keeps it down for
// about 2 TTLs (1 to 3), so leases granted before the crash expire meanwhile, and
// restarts it on the same port and data, waiting until it serves again (bounded by
// servers.StartTimeout). Acknowledged writes must survive: PostgreSQL recovers them
// from its WAL, ZooKeeper from its transaction log and the quorum that accepted them.
type crashNemesis struct{ r *run }

func (*crashNemesis) name() string { return NemesisCrash }

func (n *crashNemesis) setup(_ context.Context, r *run) error {
	if r.crash == nil {
		return fmt.Errorf("chaos: crash: store %q has no database server to crash", r.cfg.Store)
	}
	n.r = r
	return nil
}

func (n *crashNemesis) inject(ctx context.Context, rng *rand.Rand) (*fault, error) {
	kind, restart, err := n.r.crash.crash(ctx)
	if err != nil || restart == nil {
		return nil, err
	}
	return &fault{kind: kind, hold: jitter(rng, 2*n.r.cfg.TTL), heal: restart}, nil
}
