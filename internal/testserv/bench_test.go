package testserv_test

import (
	"testing"

	"github.com/fencelock/fence/internal/testserv"
)

// The cost of one server for a test package: start (from the cached template for the
// SQL servers) until it answers, then Close.
// go test -run '^$' -bench Start -benchtime 5x ./internal/testserv/

func BenchmarkStartRedis(b *testing.B) {
	benchStart(b, func() (*testserv.RedisServer, error) { return testserv.StartRedis() })
}

func BenchmarkStartPostgres(b *testing.B) { benchStart(b, testserv.StartPostgres) }

func BenchmarkStartMariaDB(b *testing.B) { benchStart(b, testserv.StartMariaDB) }

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
	s := testserv.Postgres(b)
	for b.Loop() {
		s.CreateDatabase(b)
	}
}

func BenchmarkMariaDBCreateDatabase(b *testing.B) {
	s := testserv.MariaDB(b)
	for b.Loop() {
		s.CreateDatabase(b)
	}
}
