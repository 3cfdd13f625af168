package servertest

import (
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// ZooKeeper starts a standalone ZooKeeper for one test (servers.StartZooKeeper) and
// closes it at the test's cleanup. It fails the test if the server does not start.
func ZooKeeper(t testing.TB) *servers.ZooKeeper {
	t.Helper()
	return ForTest(t, servers.StartZooKeeper)
}

// NewZooKeeperEnsemble starts an n-server ensemble for one test
// (servers.StartZooKeeperEnsemble, members run directly) and closes it at the test's
// cleanup. It fails the test if the ensemble does not start.
func NewZooKeeperEnsemble(t testing.TB, n int) *servers.ZooKeeperEnsemble {
	t.Helper()
	return ForTest(t, func() (*servers.ZooKeeperEnsemble, error) { return servers.StartZooKeeperEnsemble(n, nil) })
}
