package testserv_test

import (
	"testing"

	"github.com/fencelock/fence/internal/testserv"
)

// The cost of one server for a test package: start (from the cached template for the
// SQL servers) until it answers, then Close.
// go test -run '^$' -bench Start -benchtime 5x ./internal/testserv/

func BenchmarkStartRedis(b *testing.B) {
	for b.Loop() {
		s, err := testserv.StartRedis()
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

func BenchmarkStartPostgres(b *testing.B) {
	for b.Loop() {
		s, err := testserv.StartPostgres()
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

func BenchmarkStartMariaDB(b *testing.B) {
	for b.Loop() {
		s, err := testserv.StartMariaDB()
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
