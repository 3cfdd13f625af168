package servertest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// A backend package starts one server for all its tests in TestMain. (Examples without
// an Output comment are compiled, not run.)
func Example_testMain() {
	var m *testing.M // the argument of TestMain

	srv, err := servers.StartRedis("--appendonly", "yes")
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // e.g. "redis-server not found: apt-get install redis-server"
		os.Exit(1)
	}
	code := m.Run() // tests dial srv.Addr; srv.Kill and srv.Restart inject crashes
	srv.Close()
	os.Exit(code)
}

// Each test gets its own database on the package's shared server.
func ExamplePostgresServer_CreateDatabase() {
	var srv *servertest.PostgresServer // started in TestMain with StartPostgres
	var t *testing.T                   // the test

	dsn := srv.CreateDatabase(t) // dropped when t ends
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
}
