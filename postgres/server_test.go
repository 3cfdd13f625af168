package postgres_test

import "github.com/fencelock/fence/internal/servers/servertest"

// startPostgres starts the package's throwaway PostgreSQL (initdb in a temp dir,
// a free port of 127.0.0.1). A missing binary fails with the package to install.
func startPostgres() (pgServer, error) { return servertest.StartPostgres() }
