package servers

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway PostgreSQL server on 127.0.0.1 with trust authentication
// for the superuser "postgres". Its fields are fixed for its whole life, across Kill
// and Restart.
type Postgres struct {
	Port int
	Dir  string // holds data/, the socket and the log; removed by Close

	bin     string // the postgres executable
	cred    *syscall.Credential
	command CommandFunc
	life    Lifecycle
}

// PostgresHost is the host name StartPostgres passes to its CommandFunc.
const PostgresHost = "postgres"

// StartPostgres creates a fresh cluster in a temporary directory (initdb, or a copy of
// a cached one) and starts a postgres server for it on a free port of 127.0.0.1,
// waiting until it accepts connections. command, if not nil, builds the server's
// command (host PostgresHost), every time it starts. Running as root, the server runs
// as the "postgres" user (or "nobody"), since PostgreSQL refuses to run as root. The
// caller must Close it. It returns an error matching ErrNotFound if PostgreSQL is not
// installed, or one with the tail of the log if the server does not start.
func StartPostgres(command CommandFunc) (*Postgres, error) {
	initdb, err := FindBinary("initdb", "postgresql")
	if err != nil {
		return nil, err
	}
	bin, err := postgresNextTo(initdb)
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential("postgres")
	if err != nil {
		return nil, err
	}
	dir, err := MakeDir("pg")
	if err != nil {
		return nil, err
	}
	s := &Postgres{Dir: dir, bin: bin, cred: cred, command: command}
	s.life.Dir = dir
	s.life.Launch = s.launch
	s.life.StopSig = syscall.SIGINT // a fast shutdown
	s.life.GracefulClose = true
	if err := chownTo(s.Dir, s.cred); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("servers: postgres: %w", err)
	}
	key := postgresTemplateKey(initdb, bin, cred)
	build := func(string) error { return s.initdb(initdb) }
	if err := StartFromTemplate(key, s.dataDir(), build, func(port int) { s.Port = port }, s.life.Start); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// postgresTemplateKey returns the template cache key for a cluster made by initdb for
// the postgres binary bin, owned by cred's user.
func postgresTemplateKey(initdb, bin string, cred *syscall.Credential) string {
	uid := "-"
	if cred != nil {
		uid = strconv.FormatUint(uint64(cred.Uid), 10)
	}
	return TemplateKey("pg", []string{initdb, bin}, uid, strings.Join(initdbArgs, " "))
}

// initdbArgs are initdb's arguments after -D DATADIR.
var initdbArgs = []string{"-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"}

// postgresNextTo returns the postgres executable of the same installation as initdb
// (initdb is often a symlink into /usr/lib/postgresql/N/bin).
func postgresNextTo(initdb string) (string, error) {
	candidates := []string{filepath.Join(filepath.Dir(initdb), "postgres")}
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		candidates = append([]string{filepath.Join(filepath.Dir(real), "postgres")}, candidates...)
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return FindBinary("postgres", "postgresql")
}

// serverCredential returns nil when not running as root, else the credential of the
// named user (or of "nobody" if it does not exist), for servers that refuse root.
func serverCredential(name string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return nil, fmt.Errorf("servers: running as root and neither user %q nor nobody exists to run the server", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("servers: user %q has a non-numeric uid %q or gid %q", u.Username, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// chownTo gives path to cred's user, if any.
func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

func (s *Postgres) dataDir() string { return filepath.Join(s.Dir, "data") }

func (s *Postgres) logPath() string { return filepath.Join(s.Dir, "postgres.log") }

// initdb creates the cluster in s.Dir/data.
func (s *Postgres) initdb(initdb string) error {
	out, err := RunTool(initdb, append([]string{"-D", s.dataDir()}, initdbArgs...), s.Dir, s.cred)
	if err != nil {
		return fmt.Errorf("servers: postgres: initdb: %w:\n%s", err, out)
	}
	return nil
}

// launch starts postgres on s.Port and waits until it accepts connections.
func (s *Postgres) launch() (*Process, error) {
	// The log file is opened by us (root) and inherited; create it now so the server user
	// could reopen it too.
	if f, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		f.Close()
		_ = chownTo(s.logPath(), s.cred)
	}
	args := []string{
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.Port),
		"-k", s.Dir,
		"-c", "listen_addresses=127.0.0.1",
		// Throwaway servers are killed, never the OS under them: a commit's WAL is
		// written before the commit returns, so nothing acknowledged is lost without
		// fsync.
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	}
	return launchWith(s.command, PostgresHost, "postgres", s.bin, args, s.logPath(), s.cred, func() error { return s.ping() })
}

// ping connects to the postgres database and pings it, within 2s: the readiness check
// of launch.
func (s *Postgres) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// DSN returns a pgx connection URL for database db as the superuser postgres, e.g.
// postgres://postgres@127.0.0.1:PORT/db?sslmode=disable.
func (s *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// Exec runs sql (e.g. a CREATE or ALTER statement) on database db as the superuser,
// within 30s. It returns an error with the statement if it fails.
func (s *Postgres) Exec(db, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN(db))
	if err != nil {
		return fmt.Errorf("servers: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("servers: postgres: %s: %w", sql, err)
	}
	return nil
}

// CreateDatabase creates the database name (an SQL identifier the caller chose, e.g.
// from UniqueName) and returns its DSN. It returns an error with the statement if
// the database cannot be created.
func (s *Postgres) CreateDatabase(name string) (string, error) {
	create := "CREATE DATABASE " + name
	if s.majorVersion() >= 15 {
		// The default WAL_LOG strategy writes the whole template to the WAL; with fsync
		// off, a file copy is about twice as fast.
		create += " STRATEGY FILE_COPY"
	}
	if err := s.Exec("postgres", create); err != nil {
		return "", err
	}
	return s.DSN(name), nil
}

// DropDatabase drops the database name if it exists, closing the connections left on
// it (WITH (FORCE)). It returns an error with the statement if that fails.
func (s *Postgres) DropDatabase(name string) error {
	return s.Exec("postgres", "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// majorVersion returns the cluster's major version (PG_VERSION), or 0 if unknown.
func (s *Postgres) majorVersion() int {
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "PG_VERSION"))
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

// PauseWALWriter stops the server's WAL writer process with SIGSTOP, so that the WAL
// of commits made with synchronous_commit = off stays in shared memory (until a
// synchronous commit or a full WAL buffer writes it) and a Kill loses those commits
// for certain, not only when it happens to come within the writer's delay. Call the
// returned resume (SIGCONT) unless Kill follows; Kill ends the pause either way. It
// returns an error if the server is not running or has no WAL writer process.
func (s *Postgres) PauseWALWriter() (resume func(), err error) {
	err = s.life.WithProcess(func(p *Process) error {
		if p == nil || p.Exited() {
			return fmt.Errorf("servers: postgres :%d: pause WAL writer: not running", s.Port)
		}
		for _, pid := range Descendants(p.Pid()) {
			cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			if err != nil || !strings.Contains(string(cmdline), "walwriter") {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				return fmt.Errorf("servers: postgres :%d: pause WAL writer %d: %w", s.Port, pid, err)
			}
			resume = func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
			return nil
		}
		return fmt.Errorf("servers: postgres :%d: no walwriter process among the server's", s.Port)
	})
	if err != nil {
		return nil, err
	}
	return resume, nil
}

// Running reports whether the server has a process: it was not killed, stopped or
// closed (its process may have died since; see Alive).
func (s *Postgres) Running() bool { return s.life.Running() }

// Kill stops the server with SIGKILL to it and all its descendants, like a crash, and
// waits until they are gone. The port and directory are kept; Restart recovers.
// Killing a killed server does nothing.
func (s *Postgres) Kill() { s.life.Kill() }

// Restart stops the server if it runs (SIGINT, a fast shutdown) and starts it again
// on the same port and directory; after Kill it starts it again, running crash
// recovery. It returns an error with the log's tail if the server does not come back
// within StartTimeout, or if it was closed.
func (s *Postgres) Restart() error { return s.life.Restart("postgres :" + strconv.Itoa(s.Port)) }

// Close shuts the server down fast (SIGINT) and removes its directory. It is safe to
// call more than once.
func (s *Postgres) Close() { s.life.Close() }
