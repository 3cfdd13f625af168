package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// Stores whose database servers the crash nemesis kills.
const (
	// StorePostgres is fence serve --store postgres:// on the run's own PostgreSQL; the
	// counter is a row of that same database written through postgres.Guard
	// (ResourcePostgres), unless Config.Resource says otherwise.
	StorePostgres = "postgres"
	// StoreZooKeeper is fence serve --store zk:// on a 3-server ZooKeeper ensemble; the
	// counter is in fence serve's KV, persistent znodes on that ensemble.
	StoreZooKeeper = "zookeeper"
)

// zkSessionTimeout is fence serve's ZooKeeper session timeout on the zookeeper store:
// ten times the ensemble's minimum (servers.ZooKeeperMinSession), so that the session
// outlives a leader's crash and the election after it (the ensemble serves again
// once two servers agree, well within it), while a lost session still ends within a
// few seconds of a run.
const zkSessionTimeout = 10 * servers.ZooKeeperMinSession

// zkRoot is the lock root of the zookeeper store; its KV sibling holds the counter.
const zkRoot = "/fence-chaos/locks"

// crashTarget is what the crash nemesis kills on a store: its database server, or for
// an ensemble its leader.
type crashTarget interface {
	// crash kills it with SIGKILL and returns the fault's kind ("postgres",
	// "zookeeper-leader") and how to restart it on its data. It returns an error if
	// there is nothing to kill (no leader elected within the bound), or a nil restart
	// and no error if ctx ended first.
	crash(ctx context.Context) (kind string, restart func() error, err error)
}

// postgresStore runs fence serve on a PostgreSQL of its own, which the crash nemesis
// kills and restarts.
type postgresStore struct{}

func (postgresStore) name() string  { return StorePostgres }
func (postgresStore) label() string { return "postgres" }

func (postgresStore) setup(_ context.Context, r *run) error {
	pg, err := servers.StartPostgres(r.command)
	if err != nil {
		return fmt.Errorf("chaos: postgres: %w", err)
	}
	r.onClose(pg.Close)
	dsn, err := pg.CreateDatabase("fence_chaos")
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	r.srv.store = dsn
	if r.cfg.Resource == ResourcePostgres && r.cfg.Postgres == "" {
		r.cfg.Postgres = dsn // the counter on the store's own database
	}
	r.crash = pgCrash{pg}
	return nil
}

// pgCrash kills the postgres store's server: the postmaster and every backend.
type pgCrash struct{ pg *servers.Postgres }

func (c pgCrash) crash(context.Context) (string, func() error, error) {
	c.pg.Kill()
	return "postgres", func() error {
		if err := c.pg.Restart(); err != nil {
			return fmt.Errorf("chaos: restart postgres after crash: %w", err)
		}
		return nil
	}, nil
}

// zookeeperStore runs fence serve on a 3-server ZooKeeper ensemble, whose leader the
// crash nemesis kills and restarts.
type zookeeperStore struct{}

func (zookeeperStore) name() string  { return StoreZooKeeper }
func (zookeeperStore) label() string { return "zookeeper x3" }

func (zookeeperStore) setup(_ context.Context, r *run) error {
	e, err := servers.StartZooKeeperEnsemble(3, r.command)
	if err != nil {
		return fmt.Errorf("chaos: zookeeper: %w", err)
	}
	r.onClose(e.Close)
	r.srv.store = "zk://" + strings.Join(e.Servers(), ",") + zkRoot + "?session_timeout=" + zkSessionTimeout.String()
	r.crash = zkCrash{e}
	return nil
}

// zkCrash kills the zookeeper store's leader, found by the mode its srvr command
// reports.
type zkCrash struct{ e *servers.ZooKeeperEnsemble }

func (c zkCrash) crash(ctx context.Context) (string, func() error, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	m, err := c.e.Leader(lctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, nil // the run ended during an election
		}
		return "", nil, fmt.Errorf("chaos: zookeeper leader: %w", err)
	}
	m.Kill()
	return "zookeeper-leader", func() error {
		if err := m.Restart(); err != nil {
			return fmt.Errorf("chaos: restart zookeeper %d after crash: %w", m.ID, err)
		}
		return nil
	}, nil
}
