package testserv

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file is the process core every server shares: a process in its own group with
// its output in a log file (process), and the lifecycle of a server that keeps its port
// and directory across Kill, Stop and Restart (lifecycle).

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
	cmd.SysProcAttr = groupAttr(cred)
	return spawn(name, cmd, logPath)
}

// groupAttr returns the process attributes of every server and tool testserv runs: its
// own process group (so a kill reaches its children), SIGKILL when the test process
// dies, and cred's user if cred is not nil.
func groupAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// spawn starts cmd, prepared by the caller (arguments, output to logPath, SysProcAttr
// from groupAttr), and returns its process, whose done channel closes when it exits.
func spawn(name string, cmd *exec.Cmd, logPath string) (*process, error) {
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

// runTool runs a set-up tool (initdb, mariadb-install-db) to completion in dir as cred's
// user (nil: ours), in its own process group, and returns its combined output.
func runTool(bin string, args []string, dir string, cred *syscall.Credential) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = groupAttr(cred)
	return cmd.CombinedOutput()
}

// launch starts bin like startProcess and waits until ready returns nil (waitReady). If
// the server does not become ready, it is killed and the error carries its log's tail.
func launch(name, bin string, args []string, logPath string, cred *syscall.Credential, ready func() error) (*process, error) {
	p, err := startProcess(name, bin, args, logPath, cred)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ready); err != nil {
		p.kill()
		return nil, err
	}
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

// startOnFreePort starts a fresh server: it chooses a free port, passes it to setPort
// and calls start, retrying with another port while start fails on a port clash, up to
// startAttempts times. If rebuild is not nil (the data directory came from the template
// cache), the first failure that is not a clash calls rebuild to make the data directory
// from scratch, and start is tried again. It returns the last error.
func startOnFreePort(setPort func(port int), start func() error, rebuild func() error) error {
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		setPort(port)
		err = start()
		if err == nil {
			return nil
		}
		if rebuild != nil && !addrInUse(err) {
			// A bad template (say, a half-written cache): drop it and start from scratch.
			if err := rebuild(); err != nil {
				return err
			}
			rebuild = nil
			continue
		}
		if !addrInUse(err) || attempt >= startAttempts {
			return err
		}
	}
}

// lifecycle is what RedisServer, PostgresServer and MariaDBServer share: at most one
// process at a time, on a port and directory fixed for the server's life; kill crashes
// it, stop and restart shut it down with a signal (restart then launches it again),
// close ends it and removes the directory. Its methods are safe for concurrent use. Set its fields before the first
// call, and do not copy it.
type lifecycle struct {
	dir           string                   // removed by close
	launch        func() (*process, error) // starts the server on its port and waits until it is ready
	stopSig       syscall.Signal           // graceful shutdown: stop, restart, and close if gracefulClose
	gracefulClose bool                     // close shuts down with stopSig rather than killing

	mu     sync.Mutex
	proc   *process // nil while killed or stopped
	closed bool
}

// start launches the server (the first time, or after kill or stop).
func (l *lifecycle) start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.startLocked()
}

func (l *lifecycle) startLocked() error {
	p, err := l.launch()
	if err != nil {
		return err
	}
	l.proc = p
	return nil
}

// running reports whether the server has a process (it was not killed, stopped or
// closed).
func (l *lifecycle) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proc != nil
}

// kill kills the process and its descendants with SIGKILL, like a crash, and waits until
// they are gone. Killing a killed server does nothing.
func (l *lifecycle) kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.killLocked()
}

func (l *lifecycle) killLocked() {
	if l.proc != nil {
		l.proc.kill()
		l.proc = nil
	}
}

// stop shuts the process down with stopSig and waits for it (killing it after
// stopTimeout).
func (l *lifecycle) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
}

func (l *lifecycle) stopLocked() {
	if l.proc != nil {
		l.proc.stop(l.stopSig)
		l.proc = nil
	}
}

// restart stops the server if it runs (stopSig) and launches it again, retrying on a
// port clash (another process took the port while it was down) up to startAttempts
// times. name says which server in the error after close, e.g. "redis 127.0.0.1:PORT".
func (l *lifecycle) restart(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("testserv: %s: restart after Close", name)
	}
	l.stopLocked()
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		if err = l.startLocked(); err == nil || !addrInUse(err) {
			return err
		}
	}
	return err
}

// createDatabase runs the statement create with exec, failing t if it fails, and when t
// ends runs drop, failing t if that fails, unless the server is no longer running
// (killed: nothing to drop now; closed: Close removed it all).
func (l *lifecycle) createDatabase(t testing.TB, exec func(sql string) error, create, drop string) {
	t.Helper()
	if err := exec(create); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !l.running() {
			return
		}
		if err := exec(drop); err != nil {
			t.Errorf("testserv: drop test database: %v", err)
		}
	})
}

// close stops the process (stopSig if gracefulClose, else SIGKILL) and removes the directory.
// It is safe to call more than once.
func (l *lifecycle) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gracefulClose {
		l.stopLocked()
	} else {
		l.killLocked()
	}
	if !l.closed {
		l.closed = true
		os.RemoveAll(l.dir)
	}
}
