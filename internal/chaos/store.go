package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/etcdmember"
	fenceredis "github.com/fencelock/fence/redis"
)

// Store names accepted by Config.Store: what grants the workers' locks. A new store is
// one type that implements store, one name in Stores, one entry in newStore and its
// row in storeNemeses.
const (
	// StoreBolt is fence serve's embedded store: the locks and the counter in one
	// process (the default).
	StoreBolt = "bolt"
	// StoreRedis is a Redis primary with a replica, behind a proxy: the workers lock
	// through redis.Locker, and the counter stays in fence serve's KV.
	StoreRedis = "redis"
	// StoreEtcd is fence serve --store etcd:// on a 3-member etcd cluster whose members
	// are processes of the fence binary (`fence chaos etcd-member`).
	StoreEtcd = "etcd"
)

// Stores lists the implemented stores.
var Stores = []string{StoreBolt, StoreRedis, StoreEtcd, StoreZooKeeper, StorePostgres, StoreCluster}

// storeNemeses lists, per store, the nemeses that apply to it: the ones that act on
// what that store runs. pause, kill and link act on the workers and fence serve,
// which every store has; clock steps the workers' clocks on every store, and fence
// serve's only where it judges expiry itself (bolt).
var storeNemeses = map[string][]string{
	StoreBolt:  {NemesisPause, NemesisKill, NemesisLink, NemesisDisk, NemesisClock, NemesisPartition},
	StoreRedis: {NemesisPause, NemesisKill, NemesisLink, NemesisFailover, NemesisClock, NemesisPartition},
	StoreEtcd:  {NemesisPause, NemesisKill, NemesisLink, NemesisMember, NemesisClock, NemesisPartition},
	// crash kills the database server (PostgreSQL, the ZooKeeper leader).
	StorePostgres:  {NemesisPause, NemesisKill, NemesisLink, NemesisCrash, NemesisClock},
	StoreZooKeeper: {NemesisPause, NemesisKill, NemesisLink, NemesisCrash, NemesisClock},
	// On the cluster, kill, pause, link and partition act on its nodes (one at a
	// time, the leader or any); clock on the workers.
	StoreCluster: {NemesisPause, NemesisKill, NemesisLink, NemesisClock, NemesisPartition},
}

// Applies reports whether the nemesis acts on something the store runs, so that a run
// of the two together means something.
func Applies(store, nemesis string) bool {
	return slices.Contains(storeNemeses[store], nemesis)
}

// store is what grants the workers' locks. A run calls setup before any nemesis's
// setup: it starts the store's servers (registering their shutdown with r.onClose)
// and sets where fence serve keeps its state (r.srv.store), who grants the workers'
// locks (r.locks, r.inspector, r.workerArgs) and the handles its nemeses act on.
type store interface {
	name() string
	// label is the store in Summary.Backend: "bolt", "etcd x3".
	label() string
	setup(ctx context.Context, r *run) error
}

// newStore returns the store of the given name, nil for an unknown name.
func newStore(name string) store {
	switch name {
	case StoreBolt:
		return boltStore{}
	case StoreRedis:
		return &redisStore{}
	case StoreEtcd:
		return &etcdStore{}
	case StorePostgres:
		return postgresStore{}
	case StoreZooKeeper:
		return zookeeperStore{}
	case StoreCluster:
		return clusterStore{}
	}
	return nil
}

// resolveStore fills c.Store when it is empty (the store the nemeses need: redis for
// failover, etcd for member, postgres for crash (the later of Stores that a nemesis
// applies to), else bolt) and checks that every nemesis applies to it.
func (c *Config) resolveStore() error {
	if c.Store == "" {
		c.Store = StoreBolt
		for _, n := range c.Nemeses {
			for _, s := range Stores {
				if s != StoreBolt && Applies(s, n) && !Applies(StoreBolt, n) {
					c.Store = s
				}
			}
		}
	}
	if newStore(c.Store) == nil {
		return fmt.Errorf("chaos: %w: unknown store %q (have %s)", fence.ErrInvalid, c.Store, strings.Join(Stores, ", "))
	}
	for _, n := range c.Nemeses {
		if !Applies(c.Store, n) {
			return fmt.Errorf("chaos: %w: nemesis %q does not apply to store %q (it does to %s)", fence.ErrInvalid, n, c.Store, strings.Join(storesOf(n), ", "))
		}
	}
	return nil
}

// storesOf returns the stores the nemesis applies to.
func storesOf(nemesis string) []string {
	var out []string
	for _, s := range Stores {
		if Applies(s, nemesis) {
			out = append(out, s)
		}
	}
	return out
}

// command returns the command that runs bin with args as a process of the run's host
// named host ("serve", "worker-0", "etcd-1", "redis-primary", ...). Every process the
// harness starts goes through it, so that a nemesis that puts hosts in network
// namespaces of their own has one place to do it: with the partition nemesis the
// command runs in the host's namespace (netLayer.command), else it is exec.Command;
// either way with the host's extra environment (r.hostEnv) if it has one.
func (r *run) command(host, bin string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if r.net != nil {
		cmd = r.net.command(host, bin, args...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	if env := r.hostEnv[host]; len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	return cmd
}

// hostAddr returns the IPv4 address the named host listens on and is reached at:
// 127.0.0.1, or its own address with the partition nemesis (its namespace made at
// the first call). It returns an error if the namespace cannot be made.
func (r *run) hostAddr(host string) (string, error) {
	if r.net != nil {
		return r.net.host(host)
	}
	return "127.0.0.1", nil
}

// boltStore is fence serve's embedded store: nothing to start.
type boltStore struct{}

func (boltStore) name() string                      { return StoreBolt }
func (boltStore) label() string                     { return "bolt" }
func (boltStore) setup(context.Context, *run) error { return nil }

// redisStore runs a Redis primary with a replica behind a proxy whose address the
// workers use, so that a failover is a retarget of the proxy.
type redisStore struct{ redis *redisPair }

// redisPair is the redis store's servers, for the failover nemesis.
type redisPair struct {
	primary, replica *servers.Redis
	proxy            *linkProxy
}

func (*redisStore) name() string  { return StoreRedis }
func (*redisStore) label() string { return "redis" }

func (s *redisStore) setup(_ context.Context, r *run) error {
	opts := func(host string) (servers.RedisOptions, error) {
		ip, err := r.hostAddr(host)
		command := func(bin string, args ...string) *exec.Cmd { return r.command(host, bin, args...) }
		return servers.RedisOptions{Host: ip, Command: command}, err
	}
	po, err := opts("redis-0")
	if err != nil {
		return err
	}
	ro, err := opts("redis-1")
	if err != nil {
		return err
	}
	p, err := servers.StartRedisWith(po)
	if err != nil {
		return fmt.Errorf("chaos: redis primary: %w", err)
	}
	rep, err := servers.StartRedisReplicaWith(ro, p)
	if err != nil {
		p.Close()
		return fmt.Errorf("chaos: redis replica: %w", err)
	}
	px, err := startLinkProxy(r.harnessAddr(), p.Addr)
	if err != nil {
		p.Close()
		rep.Close()
		return err
	}
	pair := &redisPair{primary: p, replica: rep, proxy: px}
	r.onClose(func() {
		pair.proxy.close()
		pair.primary.Close()
		pair.replica.Close()
	})
	rc := goredis.NewClient(&goredis.Options{Addr: px.addr(), MaxRetries: -1})
	r.onClose(func() { rc.Close() })
	rl, err := fenceredis.NewLocker(rc, nil)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	r.redis = pair
	r.inspector = rl
	r.locks = "redis"
	r.workerArgs = append(r.workerArgs, "--redis", px.addr())
	// The workers lock on Redis and write to fence serve's KV, whose embedded store
	// never issued their tokens: it checks them by the guard rule alone.
	r.srv.flags = append(r.srv.flags, "--external-locks")
	return nil
}

// etcdStore runs fence serve on a 3-member etcd cluster of fence-binary members.
type etcdStore struct{}

func (*etcdStore) name() string  { return StoreEtcd }
func (*etcdStore) label() string { return "etcd x3" }

func (*etcdStore) setup(ctx context.Context, r *run) error {
	dir := filepath.Join(r.dir, "etcd")
	command := func(m etcdmember.Config) *exec.Cmd {
		state := "new"
		if m.Existing {
			state = "existing"
		}
		return r.command("etcd-"+m.Name, r.cfg.Binary, "chaos", "etcd-member", "--name", m.Name, "--dir", m.Dir,
			"--client-url", m.ClientURL, "--peer-url", m.PeerURL, "--initial-cluster", m.InitialCluster,
			"--cluster-token", m.ClusterToken, "--state", state)
	}
	hosts := make([]string, 3)
	for i := range hosts {
		var err error
		if hosts[i], err = r.hostAddr(fmt.Sprintf("etcd-m%d", i)); err != nil {
			return err
		}
	}
	c, err := etcdmember.StartClusterOn(ctx, dir, "chaos-"+filepath.Base(dir), hosts, command)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	r.onClose(c.Close)
	hosts = hosts[:0]
	for _, m := range c.Members {
		hosts = append(hosts, strings.TrimPrefix(m.ClientURL, "http://"))
	}
	r.srv.store = "etcd://" + strings.Join(hosts, ",") + "/chaos/"
	r.etcd = c
	return nil
}
