// Package mariadb starts throwaway MariaDB servers for tests and tools: each on a free
// port of 127.0.0.1, its data directory copied from a cached template, in its own
// process group, stopped and removed by Close. It is apart from internal/servers so
// that only what starts MariaDB links the MySQL driver. It never imports testing;
// tests use the wrappers of internal/servers/servertest.
package mariadb

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence/internal/servers"
)

// Server is a throwaway MariaDB server on 127.0.0.1 whose root user has an empty
// password and ordinary (not unix-socket) authentication. Its fields are fixed for its
// whole life, across Kill and Restart.
type Server struct {
	dbServer // Port, Dir; Kill, Restart, Close

	bin      string // mariadbd
	rootUser bool   // running as root: pass --user=root, which mariadbd demands

}

// Start creates a fresh data directory (mariadb-install-db) in a temporary
// directory and starts mariadbd for it on a free port of 127.0.0.1, waiting until it
// accepts connections. The caller must Close it. It returns an error matching
// servers.ErrNotFound if MariaDB is not installed, or one with the tail of the log if the server
// does not start.
func Start() (*Server, error) {
	install, err := servers.FindAny("mariadb-server", "mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	bin, err := servers.FindAny("mariadb-server", "mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	dir, err := servers.MakeDir("mariadb")
	if err != nil {
		return nil, err
	}
	s := &Server{dbServer: dbServer{Dir: dir, kind: "mariadb", driver: "mysql"}, bin: bin, rootUser: os.Geteuid() == 0}
	s.life.Dir = dir
	s.life.Launch = s.launch
	s.life.StopSig = syscall.SIGTERM // a clean shutdown
	key := servers.TemplateKey("mariadb", []string{install, bin}, strings.Join(installOnlyArgs, " "), strings.Join(s.installArgs(), " "))
	build := func(string) error { return s.installDB(install) }
	if err := s.startFresh(key, build); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) logPath() string { return filepath.Join(s.Dir, "mariadb.log") }

// serverOptions are the mariadbd options shared by install and start.
func (s *Server) serverOptions() []string {
	return append([]string{"--datadir=" + s.dataDir(), "--tmpdir=" + s.Dir}, s.installArgs()...)
}

// installArgs are the options that shape the data directory, apart from its path (they
// are the template cache key).
func (s *Server) installArgs() []string {
	opts := []string{
		"--skip-name-resolve",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_bin",
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M",
		// Commits reach the OS at once: a killed server loses nothing; only an OS crash could.
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-doublewrite=0",
		// Startup speed: no buffer pool dump/load, a small temp tablespace, plain file I/O
		// (io_uring and libaio setup is slow, and unavailable in some sandboxes).
		"--innodb-buffer-pool-load-at-startup=0",
		"--innodb-buffer-pool-dump-at-shutdown=0",
		"--innodb-temp-data-file-path=ibtmp1:1M:autoextend",
		"--innodb-use-native-aio=0",
		"--skip-log-bin",
	}
	if s.rootUser {
		opts = append(opts, "--user=root")
	}
	return opts
}

// installOnlyArgs are mariadb-install-db's own options.
var installOnlyArgs = []string{"--auth-root-authentication-method=normal", "--skip-test-db"}

// installDB creates the system tables in s.Dir/data.
func (s *Server) installDB(install string) error {
	args := append([]string{"--no-defaults"}, // must come first
		append(installOnlyArgs, s.serverOptions()...)...)
	out, err := servers.RunTool(install, args, s.Dir, nil)
	if err != nil {
		return fmt.Errorf("mariadb: %s: %w:\n%s", filepath.Base(install), err, out)
	}
	return nil
}

// launch starts mariadbd on s.Port and waits until it accepts connections.
func (s *Server) launch() (*servers.Process, error) {
	args := append([]string{
		"--no-defaults", // must come first
		"--port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.Dir, "mariadb.sock"),
		"--pid-file=" + filepath.Join(s.Dir, "mariadb.pid"),
		"--max-connections=300",
	}, s.serverOptions()...)
	return servers.Launch("mariadbd", s.bin, args, s.logPath(), nil, func() error { return s.ping(s.DSN("")) })
}

// DSN returns a go-sql-driver/mysql DSN for database db as root, e.g.
// root@tcp(127.0.0.1:PORT)/db?clientFoundRows=true&parseTime=true&multiStatements=false.
// clientFoundRows makes UPDATE report matched rather than changed rows, so an update
// writing the same value still counts as applied. db may be "" for no default database.
func (s *Server) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	cfg.DBName = db
	cfg.ClientFoundRows = true
	cfg.ParseTime = true
	cfg.MultiStatements = false
	return cfg.FormatDSN()
}

// Exec runs query (e.g. a CREATE or ALTER statement) as root with no default database.
// It returns an error with the statement if it fails.
func (s *Server) Exec(query string) error { return s.exec(s.DSN(""), query) }

// CreateDatabase creates the database name and returns its DSN (see DSN). It returns
// Exec's error if the database cannot be created.
func (s *Server) CreateDatabase(name string) (string, error) {
	if err := s.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		return "", err
	}
	return s.DSN(name), nil
}

// DropDatabase drops the database name if it exists. It returns Exec's error.
func (s *Server) DropDatabase(name string) error {
	return s.Exec("DROP DATABASE IF EXISTS `" + name + "`")
}

// Running reports whether the server runs: false after Kill (until Restart) and
// after Close.
func (s *Server) Running() bool { return s.life.Running() }
