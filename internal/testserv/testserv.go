// Package testserv starts throwaway real servers (Redis, PostgreSQL, MariaDB) for
// integration tests: each on a free port of 127.0.0.1, with its data in a fresh temporary
// directory, in its own process group, stopped and removed by Close.
//
// Start one server per test package in TestMain with the Start* functions, or one per
// test with the helpers that take a testing.TB and register their own cleanup:
//
//	var srv *testserv.RedisServer
//
//	func TestMain(m *testing.M) {
//		var err error
//		if srv, err = testserv.StartRedis(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		srv.Close()
//		os.Exit(code)
//	}
//
// A missing server binary is an error that says which Debian package to apt-get install
// (scripts/install-deps.sh installs them all). The servers never use the well-known ports
// 6379, 5432 and 3306, so the machine's own services are left alone. They are started with
// a parent-death signal, so a test binary that dies (a panic, a -timeout) takes its
// servers with it.
package testserv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to become ready.
const startTimeout = 30 * time.Second

// stopTimeout bounds a graceful shutdown before the server is killed.
const stopTimeout = 15 * time.Second

// startAttempts is how many times a fresh server retries on a port taken between
// choosing it and binding it.
const startAttempts = 4

// reservedPorts are the machine's own services: never used, even if free.
var reservedPorts = map[int]bool{6379: true, 5432: true, 3306: true}

// ErrNotFound matches (errors.Is) the errors of Start* and FindBinary when a server
// binary is missing; their message names the Debian package that provides it.
var ErrNotFound = errors.New("testserv: binary not found")

// SkipIfShort skips the test under go test -short: integration tests that start servers
// use it so that -short runs stay fast and need no server binaries.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("testserv: integration test skipped in -short mode")
	}
}

// RequireBinary returns the path of the executable name (searched in PATH, then in the
// usual sbin and PostgreSQL directories). If it is missing, the test fails with a message
// naming aptPackage, the Debian package to install.
func RequireBinary(t testing.TB, name, aptPackage string) string {
	t.Helper()
	path, err := FindBinary(name, aptPackage)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

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
	return "", &notFoundError{name: name, pkg: aptPackage}
}

// notFoundError says which binary is missing and how to install it.
type notFoundError struct{ name, pkg string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("testserv: %s not found: apt-get install %s (or run scripts/install-deps.sh)", e.name, e.pkg)
}

func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

// findAny returns the first of names that FindBinary finds.
func findAny(aptPackage string, names ...string) (string, error) {
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
// choice for port 0), never one of 6379, 5432 or 3306. Another process may take it
// before the caller binds it; the Start* functions retry in that case.
func FreePort() (int, error) {
	for i := 0; i < 10; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("testserv: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("testserv: free port: %w", err)
		}
		if !reservedPorts[port] {
			return port, nil
		}
	}
	return 0, errors.New("testserv: free port: the kernel keeps choosing reserved ports")
}

// process is one running server: its own process group, output appended to a log file.
type process struct {
	name    string // for messages: "redis-server"
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed
}

// startProcess starts bin with args in its own process group, in the directory of
// logPath, with stdout and stderr appended to logPath. cred, if not nil, is the user to
// run as.
func startProcess(name, bin string, args []string, logPath string, cred *syscall.Credential) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testserv: %s: open log: %w", name, err)
	}
	defer logf.Close() // the child has its own copy of the descriptor
	fmt.Fprintf(logf, "=== testserv %s: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(logPath) // the server's own directory, readable by its user
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testserv: %s: start: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process's whole group (the server and its children).
func (p *process) signalGroup(sig syscall.Signal) {
	// The group id is the server's pid (Setpgid). Errors mean it is already gone.
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// kill kills the server and all its descendants with SIGKILL, like a crash, and waits
// until they are gone. Descendants are found through /proc, not only through the process
// group: PostgreSQL backends call setsid, so a group kill would leave them serving
// their connections for a while and holding the shared memory a restart needs.
func (p *process) kill() {
	if p.exited() {
		p.signalGroup(syscall.SIGKILL) // leftovers in the group, if any
		return
	}
	// Freeze the group first so that no new child is forked while we look for them.
	p.signalGroup(syscall.SIGSTOP)
	desc := descendants(p.cmd.Process.Pid)
	p.signalGroup(syscall.SIGKILL)
	for _, pid := range desc {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-p.done
	waitGone(desc, stopTimeout)
}

// stop sends sig to the server for a graceful shutdown and waits for it to exit; after
// stopTimeout it kills it and its descendants.
func (p *process) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
	}
	p.kill()
}

// descendants returns the pids of all descendants of pid, from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// procStat returns the parent pid and state of pid from /proc/PID/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return ppid, f[0][0], true
}

// waitGone waits up to timeout until none of pids is running (gone, or a zombie
// waiting for init to reap it).
func waitGone(pids []int, timeout time.Duration) {
	if len(pids) == 0 {
		return
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		alive := false
		for _, pid := range pids {
			if _, state, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
				alive = true
				break
			}
		}
		if !alive {
			return
		}
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// waitReady calls ready until it returns nil, the process exits, or startTimeout passes.
// The error includes the tail of the server's log.
func (p *process) waitReady(ready func() error) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("testserv: %s exited during startup (%v); log %s:\n%s",
				p.name, p.waitErr, p.logPath, logTail(p.logPath))
		case <-deadline.C:
			p.kill()
			return fmt.Errorf("testserv: %s not ready after %v (last check: %v); log %s:\n%s",
				p.name, startTimeout, last, p.logPath, logTail(p.logPath))
		case <-tick.C:
		}
	}
}

// logTail returns the last lines of the log file at path, for error messages.
func logTail(path string) string {
	const max = 4 << 10
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, max))
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// addrInUse reports whether a failed start was a port clash, judging by the log.
func addrInUse(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "address already in use") || strings.Contains(s, "address in use") ||
		strings.Contains(s, "could not create any tcp/ip sockets") || strings.Contains(s, "do you already have another")
}

// uniqueName returns a database name that is unique within this process and unlikely to
// clash across processes: prefix, pid and a counter.
func uniqueName(prefix string) string {
	nameMu.Lock()
	defer nameMu.Unlock()
	nameSeq++
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), nameSeq)
}

var (
	nameMu  sync.Mutex
	nameSeq int
)

// ownerFile, in each server directory, holds the pid of the test process that made it,
// so that a later run can remove the directories of processes that died without Close.
const ownerFile = "testserv.owner"

// dirPrefix starts the name of every server directory.
const dirPrefix = "testserv-"

// makeServerDir creates the temporary directory for a server of the given kind
// ("redis"), after removing those left behind by dead test processes. The directory is
// under os.TempDir, or /tmp if another user (the server's, for PostgreSQL run by root)
// could not reach os.TempDir.
func makeServerDir(kind string) (string, error) {
	parent := os.TempDir()
	if !reachableByOthers(parent) {
		parent = "/tmp"
	}
	sweepStaleDirs(parent)
	dir, err := os.MkdirTemp(parent, dirPrefix+kind+"-")
	if err != nil {
		return "", fmt.Errorf("testserv: %s: %w", kind, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("testserv: %s: %w", kind, err)
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
// test binary killed by SIGKILL cannot clean up; its servers die with it through the
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
