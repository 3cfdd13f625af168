package mariadb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// dbServer is Server's core: a port and a directory fixed
// for the server's life, a data directory made from the template cache, the Lifecycle
// that crashes, restarts and closes the server on them, and statements run through
// the database/sql driver of its kind.
type dbServer struct {
	Port int
	Dir  string // holds data/, the socket and the log; removed by Close

	kind   string // "mariadb", "postgres": for messages
	driver string // the database/sql driver of ping and exec: "mysql", "pgx"
	life   servers.Lifecycle
}

// ping connects to the database at dsn and pings it, within 2s: the readiness check
// of launch.
func (s *dbServer) ping(dsn string) error {
	db, err := sql.Open(s.driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// exec runs query on the database at dsn, within 30s. It returns an error with the
// statement if it fails.
func (s *dbServer) exec(dsn, query string) error {
	db, err := sql.Open(s.driver, dsn)
	if err != nil {
		return fmt.Errorf("%s: %w", s.kind, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, query); err != nil {
		return fmt.Errorf("%s: %s: %w", s.kind, query, err)
	}
	return nil
}

func (s *dbServer) dataDir() string { return filepath.Join(s.Dir, "data") }

// startFresh makes the data directory from the template of key (build makes it when
// the cache has none) and starts the server on a free port. On failure it removes the
// server's directory and returns the error.
func (s *dbServer) startFresh(key string, build func(string) error) error {
	if err := servers.StartFromTemplate(key, s.dataDir(), build, func(port int) { s.Port = port }, s.life.Start); err != nil {
		os.RemoveAll(s.Dir)
		return err
	}
	return nil
}

// Kill stops the server with SIGKILL to its whole process group, like a crash. The port
// and directory are kept; Restart recovers. Killing a killed server does nothing.
func (s *dbServer) Kill() { s.life.Kill() }

// Restart stops the server if it runs (a clean shutdown: SIGTERM for MariaDB, SIGINT,
// a fast shutdown, for PostgreSQL) and starts it again on the same port and directory;
// after Kill it starts it again, running crash recovery. It returns an error with the
// log's tail if the server does not come back, or if it was closed.
func (s *dbServer) Restart() error { return s.life.Restart(s.kind + " :" + strconv.Itoa(s.Port)) }

// Close stops the server (MariaDB is killed, since nothing in its directory is kept;
// PostgreSQL shuts down fast) and removes its directory. It is safe to call more than
// once.
func (s *dbServer) Close() { s.life.Close() }
