package testserv

import (
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// ZooKeeper timing of every server started here (servers'): the session timeouts a
// client may ask for are clamped by the server to [ZooKeeperMinSession,
// ZooKeeperMaxSession].
const (
	// ZooKeeperMinSession is the shortest session timeout the servers grant.
	ZooKeeperMinSession = servers.ZooKeeperMinSession
	// ZooKeeperMaxSession is the longest session timeout the servers grant.
	ZooKeeperMaxSession = servers.ZooKeeperMaxSession
)

// ZooKeeperServer is a throwaway standalone ZooKeeper on a free port of 127.0.0.1
// (servers.ZooKeeper).
type ZooKeeperServer = servers.ZooKeeper

// ZooKeeperEnsemble is a throwaway ZooKeeper ensemble on 127.0.0.1
// (servers.ZooKeeperEnsemble): Members, Servers, Leader, Close.
type ZooKeeperEnsemble = servers.ZooKeeperEnsemble

// ZooKeeperMember is one server of a ZooKeeperEnsemble (servers.ZooKeeperMember): ID,
// Addr, Kill, Restart, Alive.
type ZooKeeperMember = servers.ZooKeeperMember

// StartZooKeeper is servers.StartZooKeeper: a standalone ZooKeeper, returned once it
// serves clients. The caller must Close it. It returns an error matching ErrNotFound
// if java or the ZooKeeper jar is missing.
func StartZooKeeper() (*ZooKeeperServer, error) { return servers.StartZooKeeper() }

// ZooKeeper starts a standalone ZooKeeper for one test (see StartZooKeeper) and closes
// it at the test's cleanup. It fails the test if the server does not start.
func ZooKeeper(t testing.TB) *ZooKeeperServer {
	t.Helper()
	return ForTest(t, StartZooKeeper)
}

// StartZooKeeperEnsemble is servers.StartZooKeeperEnsemble with the members run
// directly: an n-server ensemble, returned once every member serves. The caller must
// Close it.
func StartZooKeeperEnsemble(n int) (*ZooKeeperEnsemble, error) {
	return servers.StartZooKeeperEnsemble(n, nil)
}

// NewZooKeeperEnsemble starts an n-server ensemble for one test (see
// StartZooKeeperEnsemble) and closes it at the test's cleanup. It fails the test if the
// ensemble does not start.
func NewZooKeeperEnsemble(t testing.TB, n int) *ZooKeeperEnsemble {
	t.Helper()
	return ForTest(t, func() (*ZooKeeperEnsemble, error) { return StartZooKeeperEnsemble(n) })
}

// ZooKeeperCommand is servers.ZooKeeperCommand: the whole answer of the server at addr
// to a four-letter command (srvr, stat, ruok, wchp or mntr).
func ZooKeeperCommand(addr, cmd string) (string, error) { return servers.ZooKeeperCommand(addr, cmd) }

// ZooKeeperMode is servers.ZooKeeperMode: the mode the server at addr reports
// ("standalone", "leader" or "follower"), or an error if it does not serve.
func ZooKeeperMode(addr string) (string, error) { return servers.ZooKeeperMode(addr) }
