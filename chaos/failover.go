package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence/internal/servers"
	fenceredis "github.com/fencelock/fence/redis"
)

// failoverNemesis makes the locks come from a Redis primary with a replica, behind a
// proxy whose address the workers use, so that a failover is a retarget of the proxy.
// It fails the locks' Redis over to a replica that missed the latest increments: the
// replica is cut off from replication (REPLICAOF NO ONE) while the workers go on
// acquiring on the primary for about 2 TTLs; then the primary is killed (SIGKILL)
// and the workers are sent to the old replica, whose counters are behind. The old
// primary comes back as a replica of the new one, ready for the next round.
type failoverNemesis struct {
	primary, replica *servers.Redis
	proxy            *linkProxy
	ttl              time.Duration
}

func (*failoverNemesis) name() string { return NemesisFailover }

func (n *failoverNemesis) setup(_ context.Context, r *run) error {
	p, err := servers.StartRedis()
	if err != nil {
		return fmt.Errorf("chaos: redis primary: %w", err)
	}
	rep, err := servers.StartRedisReplica(p)
	if err != nil {
		p.Close()
		return fmt.Errorf("chaos: redis replica: %w", err)
	}
	px, err := startLinkProxy(p.Addr)
	if err != nil {
		p.Close()
		rep.Close()
		return err
	}
	n.primary, n.replica, n.proxy, n.ttl = p, rep, px, r.cfg.TTL
	r.onClose(func() {
		n.proxy.close()
		n.primary.Close()
		n.replica.Close()
	})
	rc := goredis.NewClient(&goredis.Options{Addr: px.addr(), MaxRetries: -1})
	r.onClose(func() { rc.Close() })
	rl, err := fenceredis.NewLocker(rc, nil)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	r.inspector = rl
	r.locks = "redis"
	r.workerArgs = append(r.workerArgs, "--redis", px.addr())
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
	if _, err := old.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(n.primary.Port)); err != nil {
		return fmt.Errorf("chaos: failover: old primary as replica: %w", err)
	}
	if err := old.WaitReplicaSynced(10 * time.Second); err != nil {
		return fmt.Errorf("chaos: failover: resync: %w", err)
	}
	return nil
}
