package servertest

import (
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// Redis starts a redis-server like servers.StartRedis for the test t, and stops it
// and removes its directory when t ends. It fails t if the server cannot start.
func Redis(t testing.TB, args ...string) *servers.Redis {
	t.Helper()
	return ForTest(t, func() (*servers.Redis, error) { return servers.StartRedis(args...) })
}

// RedisReplica is servers.StartRedisReplica for the test t, with cleanup registered.
func RedisReplica(t testing.TB, primary *servers.Redis, args ...string) *servers.Redis {
	t.Helper()
	return ForTest(t, func() (*servers.Redis, error) { return servers.StartRedisReplica(primary, args...) })
}
