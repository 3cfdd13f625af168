package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// failoverNemesis fails the redis store's primary over to a replica that missed the
// latest increments: the replica is cut off from replication (REPLICAOF NO ONE)
// while the workers go on acquiring on the primary for about 2 TTLs; then the primary
// is killed (SIGKILL) and the workers are sent to the old replica, whose counters are
// behind. The old primary comes back as a replica of the new one, ready for the next
// round.
type failoverNemesis struct {
	*redisPair
	ttl time.Duration
}

func (*failoverNemesis) name() string { return NemesisFailover }

func (n *failoverNemesis) setup(_ context.Context, r *run) error {
	if r.redis == nil {
		return fmt.Errorf("chaos: failover: the run has no redis store")
	}
	n.redisPair, n.ttl = r.redis, r.cfg.TTL
	return nil
}
func (n *failoverNemesis) inject(context.Context, *rand.Rand) (*fault, error) {
	if _, err := n.replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		return nil, fmt.Errorf("chaos: failover: detach replica: %w", err)
	}
	time.Sleep(2 * n.ttl) // increments the replica misses
	n.primary.Kill()
	n.proxy.retarget(n.replica.Addr)
	old := n.primary
	n.primary, n.replica = n.replica, old
	return &fault{heal: func() error { return n.rejoin(old) }}, nil
}

// rejoin restarts old, the killed primary, as a replica of the new primary and waits
// until it is in sync.
func (n *failoverNemesis) rejoin(old *servers.Redis) error {
	if err := old.Restart(); err != nil {
		return fmt.Errorf("chaos: failover: restart old primary: %w", err)
	}
	if _, err := old.Do("REPLICAOF", n.primary.Host, strconv.Itoa(n.primary.Port)); err != nil {
		return fmt.Errorf("chaos: failover: old primary as replica: %w", err)
	}
	if err := old.WaitReplicaSynced(10 * time.Second); err != nil {
		return fmt.Errorf("chaos: failover: resync: %w", err)
	}
	return nil
}
