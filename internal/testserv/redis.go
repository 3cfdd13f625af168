package testserv

import (
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// RedisServer is a throwaway redis-server on 127.0.0.1 (servers.Redis): Addr, Port and
// Dir are fixed for its whole life, across Kill and Restart.
type RedisServer = servers.Redis

// StartRedis is servers.StartRedis: a redis-server on a free port with a fresh temporary
// directory and no persistence, args overriding the defaults. The caller must Close it.
func StartRedis(args ...string) (*RedisServer, error) { return servers.StartRedis(args...) }

// StartRedisReplica is servers.StartRedisReplica: a redis-server replicating primary,
// returned once the initial sync is done. The caller must Close it.
func StartRedisReplica(primary *RedisServer, args ...string) (*RedisServer, error) {
	return servers.StartRedisReplica(primary, args...)
}

// Redis starts a redis-server like StartRedis for the test t, and stops it and removes
// its directory when t ends. It fails t if the server cannot start.
func Redis(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	return ForTest(t, func() (*RedisServer, error) { return StartRedis(args...) })
}

// RedisReplica is StartRedisReplica for the test t, with cleanup registered.
func RedisReplica(t testing.TB, primary *RedisServer, args ...string) *RedisServer {
	t.Helper()
	return ForTest(t, func() (*RedisServer, error) { return StartRedisReplica(primary, args...) })
}
