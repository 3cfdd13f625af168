// Package servers is the one implementation that starts throwaway real servers
// (Redis, PostgreSQL, ZooKeeper, and the process machinery any other server needs) for
// the project's tools and tests: each on a free port of 127.0.0.1, with its data in a
// fresh temporary directory, in its own process group, stopped and its directory
// removed by Close. Two subpackages hold the servers whose dependencies must stay out
// of importers that do not start them: mariadb (the MySQL driver) and etcdmember (the
// embedded etcd server).
//
// It is for programs as well as tests, and must never import testing: the chaos harness
// (fence chaos) runs its Redis failover pair, its PostgreSQL and its ZooKeeper
// ensemble with it (killing them with SIGKILL and restarting them on their data), and
// the benchmark command (cmd/fence-bench) its redis-servers. servers/servertest is the
// thin layer for tests over it: helpers that take a testing.TB, fail the test and
// register the cleanup.
//
//	srv, err := servers.StartRedis()
//	if err != nil {
//		return err // errors.Is(err, servers.ErrNotFound): redis-server is not installed
//	}
//	defer srv.Close()
//
// A missing server binary is an error that says which Debian package to apt-get install
// (scripts/install-deps.sh installs them all). The servers never use the well-known ports
// 6379, 5432 and 3306, so the machine's own services are left alone. They are started with
// a parent-death signal, so a program that dies (a panic, a test -timeout) takes its
// servers with it.
//
// Besides the servers, the package exports the pieces a new kind of server is built from:
// FindBinary, FreePort and MakeDir to prepare it, StartProcess or Launch to run it as a
// Process, and Lifecycle to kill, stop and restart it on the same port and directory.
// Data directories that cost seconds to make (initdb) are copied from a template cache
// (TemplateKey, StartFromTemplate). Starters that take a CommandFunc let the caller
// build the server's command, to run it in a network namespace, say.
package servers

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StartTimeout bounds how long a server may take to become ready.
const StartTimeout = 30 * time.Second

// StopTimeout bounds a graceful shutdown before the server is killed.
const StopTimeout = 15 * time.Second

// StartAttempts is how many times a fresh server retries on a port taken between
// choosing it and binding it.
const StartAttempts = 4

// reservedPorts are the machine's own services: never used, even if free.
var reservedPorts = map[int]bool{6379: true, 5432: true, 3306: true}

// ErrNotFound matches (errors.Is) the errors of Start* and FindBinary when a server
// binary is missing; their message names the Debian package that provides it.
var ErrNotFound = errors.New("servers: binary not found")

// FindBinary returns the path of the executable name, searched in PATH, then in
// /usr/sbin, /usr/local/sbin, /sbin and the newest /usr/lib/postgresql/*/bin. It returns
// an error matching ErrNotFound (errors.Is), naming aptPackage, if there is none.
func FindBinary(name, aptPackage string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs := []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}
	dirs = append(dirs, postgresBinDirs()...)
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &NotFoundError{Name: name, Package: aptPackage}
}

// NotFoundError says which binary (or other file a server needs) is missing and which
// Debian package installs it. It matches ErrNotFound (errors.Is).
type NotFoundError struct {
	Name    string // the binary or file, e.g. "redis-server"
	Package string // the Debian package, e.g. "redis-server"
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("servers: %s not found: apt-get install %s (or run scripts/install-deps.sh)", e.Name, e.Package)
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// FindAny returns the first of names that FindBinary finds, or the error of the first.
func FindAny(aptPackage string, names ...string) (string, error) {
	var firstErr error
	for _, n := range names {
		p, err := FindBinary(n, aptPackage)
		if err == nil {
			return p, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", firstErr
}

// postgresBinDirs returns /usr/lib/postgresql/*/bin, newest major version first.
func postgresBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	return dirs
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago (the kernel's
// choice for port 0), never one of 6379, 5432 or 3306, and none of the last 64 ports it
// returned in this process, so that the ports of one cluster (client, peer and election
// ports, chosen one after the other) are distinct. Another process may take it before
// the caller binds it; StartOnFreePort retries in that case. It returns an error if
// no port can be had.
func FreePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("servers: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("servers: free port: %w", err)
		}
		if !reservedPorts[port] && !slices.Contains(recentPorts, port) {
			if len(recentPorts) == recentPortsKept {
				recentPorts = recentPorts[1:]
			}
			recentPorts = append(recentPorts, port)
			return port, nil
		}
	}
	return 0, errors.New("servers: free port: the kernel keeps choosing reserved or just-returned ports")
}

// recentPortsKept is how many of its last ports FreePort does not return again: the
// kernel may choose a port again as soon as it is released, which happened to a
// ZooKeeper ensemble whose client and election ports came out equal.
const recentPortsKept = 64

var (
	portMu      sync.Mutex
	recentPorts []int // the last ports FreePort returned, oldest first
)

// UniqueName returns a name (of a database, say) that is unique within this process and
// unlikely to clash across processes: prefix, pid and a counter.
func UniqueName(prefix string) string {
	nameMu.Lock()
	defer nameMu.Unlock()
	nameSeq++
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), nameSeq)
}

var (
	nameMu  sync.Mutex
	nameSeq int
)

// ownerFile, in each server directory, holds the pid of the process that made it,
// so that a later run can remove the directories of processes that died without Close.
const ownerFile = "fence-server.owner"

// dirPrefix starts the name of every server directory.
const dirPrefix = "fence-server-"

// MakeDir creates the temporary directory for a server of the given kind ("redis"),
// after removing those left behind by dead processes (see sweepStaleDirs). The caller
// removes it, usually through Lifecycle.Close. The directory is
// under os.TempDir, or /tmp if another user (the server's, for PostgreSQL run by root)
// could not reach os.TempDir.
func MakeDir(kind string) (string, error) {
	parent := os.TempDir()
	if !reachableByOthers(parent) {
		parent = "/tmp"
	}
	sweepStaleDirs(parent)
	dir, err := os.MkdirTemp(parent, dirPrefix+kind+"-")
	if err != nil {
		return "", fmt.Errorf("servers: %s: %w", kind, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("servers: %s: %w", kind, err)
	}
	return dir, nil
}

// reachableByOthers reports whether every directory from / down to dir lets other users
// traverse it.
func reachableByOthers(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		up := filepath.Dir(dir)
		if up == dir {
			return true
		}
		dir = up
	}
}

// sweepStaleDirs removes server directories in parent whose owner process is gone (a
// program killed by SIGKILL cannot clean up; its servers die with it through the
// parent-death signal, but their directories stay). Directories without an owner file
// are left alone.
func sweepStaleDirs(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		os.RemoveAll(dir)
	}
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
