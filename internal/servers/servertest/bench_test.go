package servertest_test

import (
	"testing"

	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// The cost of one server for a test package: start (from the cached template for the
// SQL servers) until it answers, then Close.
// go test -run '^$' -bench Start -benchtime 5x ./internal/servers/servertest/

func BenchmarkStartRedis(b *testing.B) {
	benchStart(b, func() (*servers.Redis, error) { return servers.StartRedis() })
}

func BenchmarkStartPostgres(b *testing.B) { benchStart(b, servertest.StartPostgres) }

func BenchmarkStartMariaDB(b *testing.B) { benchStart(b, servertest.StartMariaDB) }

// benchStart times start and Close of the server start returns.
func benchStart[S interface{ Close() }](b *testing.B, start func() (S, error)) {
	for b.Loop() {
		s, err := start()
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// CreateDatabase on a running server, the per-test cost (the drops run after timing).
func BenchmarkPostgresCreateDatabase(b *testing.B) {
	s := servertest.Postgres(b)
	for b.Loop() {
		s.CreateDatabase(b)
	}
}

func BenchmarkMariaDBCreateDatabase(b *testing.B) {
	s := servertest.MariaDB(b)
	for b.Loop() {
		s.CreateDatabase(b)
	}
}
