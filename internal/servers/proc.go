package servers

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
	"time"
)

// This file is the process core every server shares: a process in its own group with
// its output in a log file (Process), and the Lifecycle of a server that keeps its port
// and directory across Kill, Stop and Restart (Lifecycle).

// Process is one running server: its own process group, output appended to a log file.
// Make one with StartProcess, StartCommand or Launch.
type Process struct {
	name    string // for messages: "redis-server"
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed
}

// StartProcess starts bin with args in its own process group, in the directory of
// logPath, with stdout and stderr appended to logPath. cred, if not nil, is the user to
// run as.
func StartProcess(name, bin string, args []string, logPath string, cred *syscall.Credential) (*Process, error) {
	return startWith(nil, name, name, bin, args, logPath, cred)
}

// CommandFunc builds the command that runs bin with args as a process of the host
// named host ("postgres", "zk-1"): a program that runs its servers elsewhere than
// on this machine's loopback (network namespaces of its own, say) passes one to the
// starters that take it. A nil CommandFunc is exec.Command. The starters set the
// command's directory, output and process group, and keep the SysProcAttr it set
// (adding a process group, the parent-death signal and the server's user).
type CommandFunc func(host, bin string, args ...string) *exec.Cmd

// startWith starts bin with args like StartProcess, the command built by c for host.
func startWith(c CommandFunc, host, name, bin string, args []string, logPath string, cred *syscall.Credential) (*Process, error) {
	var cmd *exec.Cmd
	if c == nil {
		cmd = exec.Command(bin, args...)
	} else {
		cmd = c(host, bin, args...)
	}
	cmd.Dir = filepath.Dir(logPath) // the server's own directory, readable by its user
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = GroupAttr(cred)
	} else {
		cmd.SysProcAttr.Setpgid = true
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		if cred != nil {
			cmd.SysProcAttr.Credential = cred
		}
	}
	return StartCommand(name, cmd, logPath)
}

// StartCommand starts cmd, whose path, arguments, environment and directory the caller
// set, with stdout and stderr appended to logPath and, unless the caller set them,
// the process attributes of GroupAttr(nil). It returns an error if the log cannot be
// opened or the process cannot start.
func StartCommand(name string, cmd *exec.Cmd, logPath string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("servers: %s: open log: %w", name, err)
	}
	defer logf.Close() // the child has its own copy of the descriptor
	fmt.Fprintf(logf, "=== servers %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout = logf
	cmd.Stderr = logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = GroupAttr(nil)
	}
	return spawn(name, cmd, logPath)
}

// GroupAttr returns the process attributes of every server and tool this package runs: its
// own process group (so a kill reaches its children), SIGKILL when our process
// dies, and cred's user if cred is not nil.
func GroupAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// spawn starts cmd, prepared by the caller (arguments, output to logPath, SysProcAttr
// from GroupAttr), and returns its Process.
func spawn(name string, cmd *exec.Cmd, logPath string) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("servers: %s: start: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// RunTool runs a set-up tool (initdb, mariadb-install-db) to completion in dir as cred's
// user (nil: ours), in its own process group, and returns its combined output.
func RunTool(bin string, args []string, dir string, cred *syscall.Credential) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = GroupAttr(cred)
	return cmd.CombinedOutput()
}

// Launch starts bin like StartProcess and waits until ready returns nil (WaitReady). If
// the server does not become ready, it is killed and the error carries its log's tail.
func Launch(name, bin string, args []string, logPath string, cred *syscall.Credential, ready func() error) (*Process, error) {
	return launchWith(nil, name, name, bin, args, logPath, cred, ready)
}

// launchWith is Launch with the command built by c for host.
func launchWith(c CommandFunc, host, name, bin string, args []string, logPath string, cred *syscall.Credential, ready func() error) (*Process, error) {
	p, err := startWith(c, host, name, bin, args, logPath, cred)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ready); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// Pid returns the process id of the server, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Err returns how the process exited (nil for a zero exit status); it is meaningful only
// once Exited reports true.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.waitErr // set before done was closed
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process alone, not its group (SIGSTOP and SIGCONT pause and
// resume it). It returns an error if the process has exited.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// signalGroup sends sig to the process's whole group (the server and its children).
func (p *Process) signalGroup(sig syscall.Signal) {
	// The group id is the server's pid (Setpgid). Errors mean it is already gone.
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Kill kills the server and all its descendants with SIGKILL, like a crash, and waits
// until they are gone. Descendants are found through /proc, not only through the process
// group: PostgreSQL backends call setsid, so a group kill would leave them serving
// their connections for a while and holding the shared memory a restart needs.
func (p *Process) Kill() {
	if p.Exited() {
		p.signalGroup(syscall.SIGKILL) // leftovers in the group, if any
		return
	}
	// Freeze the group first so that no new child is forked while we look for them.
	p.signalGroup(syscall.SIGSTOP)
	desc := Descendants(p.cmd.Process.Pid)
	p.signalGroup(syscall.SIGKILL)
	for _, pid := range desc {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-p.done
	waitGone(desc, StopTimeout)
}

// Stop sends sig to the server for a graceful shutdown and waits for it to exit; after
// StopTimeout it kills it and its descendants.
func (p *Process) Stop(sig syscall.Signal) {
	_ = p.Signal(sig)
	timer := time.NewTimer(StopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
	}
	p.Kill()
}

// Descendants returns the pids of all descendants of pid, from /proc.
func Descendants(pid int) []int {
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

// WaitReady calls ready until it returns nil, the process exits, or StartTimeout passes.
// The error includes the tail of the server's log.
func (p *Process) WaitReady(ready func() error) error {
	deadline := time.NewTimer(StartTimeout)
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
			return fmt.Errorf("servers: %s exited during startup (%v); log %s:\n%s",
				p.name, p.waitErr, p.logPath, LogTail(p.logPath))
		case <-deadline.C:
			p.Kill()
			return fmt.Errorf("servers: %s not ready after %v (last check: %v); log %s:\n%s",
				p.name, StartTimeout, last, p.logPath, LogTail(p.logPath))
		case <-tick.C:
		}
	}
}

// LogTail returns the last lines of the log file at path, for error messages.
func LogTail(path string) string {
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

// AddrInUse reports whether a failed start was a port clash, judging by the log.
func AddrInUse(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "address already in use") || strings.Contains(s, "address in use") ||
		strings.Contains(s, "could not create any tcp/ip sockets") || strings.Contains(s, "do you already have another")
}

// StartOnFreePort starts a fresh server: it chooses a free port, passes it to setPort
// and calls start, retrying with another port while start fails on a port clash, up to
// StartAttempts times. If rebuild is not nil (the data directory came from the template
// cache), the first failure that is not a clash calls rebuild to make the data directory
// from scratch, and start is tried again. It returns the last error.
func StartOnFreePort(setPort func(port int), start func() error, rebuild func() error) error {
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
		if rebuild != nil && !AddrInUse(err) {
			// A bad template (say, a half-written cache): drop it and start from scratch.
			if err := rebuild(); err != nil {
				return err
			}
			rebuild = nil
			continue
		}
		if !AddrInUse(err) || attempt >= StartAttempts {
			return err
		}
	}
}

// Lifecycle is what a server with a fixed port and directory needs (Redis here;
// PostgreSQL and MariaDB (internal/servers/mariadb)): at most one process at a time, on a port
// and directory fixed for the server's life; Kill crashes it, Stop and Restart shut it
// down with a signal (Restart then launches it again), Close ends it and removes the
// directory. Its methods are safe for concurrent use. Set its fields before the first
// call, and do not copy it.
type Lifecycle struct {
	Dir           string                   // removed by Close
	Launch        func() (*Process, error) // starts the server on its port and waits until it is ready
	StopSig       syscall.Signal           // graceful shutdown: Stop, Restart, and Close if GracefulClose
	GracefulClose bool                     // Close shuts down with StopSig rather than killing

	mu     sync.Mutex
	proc   *Process // nil while killed or stopped
	closed bool
}

// Start launches the server (the first time, or after Kill or Stop).
func (l *Lifecycle) Start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.startLocked()
}

func (l *Lifecycle) startLocked() error {
	p, err := l.Launch()
	if err != nil {
		return err
	}
	l.proc = p
	return nil
}

// Running reports whether the server has a process (it was not killed, stopped or
// closed).
func (l *Lifecycle) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proc != nil
}

// Alive reports whether the server has a process (it was not killed, stopped or
// closed) and that process has not exited.
func (l *Lifecycle) Alive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proc != nil && !l.proc.Exited()
}

// WithProcess calls f with the server's process, or nil if it is killed, stopped or
// closed, and returns what f returns. Kill, Stop, Restart and Close wait until f returns,
// so the process stays the same while f signals it or its children.
func (l *Lifecycle) WithProcess(f func(p *Process) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return f(l.proc)
}

// Kill kills the process and its descendants with SIGKILL, like a crash, and waits until
// they are gone. Killing a killed server does nothing.
func (l *Lifecycle) Kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(false)
}

// Stop shuts the process down with StopSig and waits for it (killing it after
// StopTimeout).
func (l *Lifecycle) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(true)
}

// endLocked ends the process, if any: with StopSig if graceful, else with SIGKILL.
func (l *Lifecycle) endLocked(graceful bool) {
	if l.proc == nil {
		return
	}
	if graceful {
		l.proc.Stop(l.StopSig)
	} else {
		l.proc.Kill()
	}
	l.proc = nil
}

// Restart stops the server if it runs (StopSig) and launches it again, retrying on a
// port clash (another process took the port while it was down) up to StartAttempts
// times. name says which server in the error after Close, e.g. "redis 127.0.0.1:PORT".
func (l *Lifecycle) Restart(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("servers: %s: restart after Close", name)
	}
	l.endLocked(true)
	var err error
	for attempt := 1; attempt <= StartAttempts; attempt++ {
		if err = l.startLocked(); err == nil || !AddrInUse(err) {
			return err
		}
	}
	return err
}

// Close stops the process (StopSig if GracefulClose, else SIGKILL) and removes the
// directory. It is safe to call more than once.
func (l *Lifecycle) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(l.GracefulClose)
	if !l.closed {
		l.closed = true
		os.RemoveAll(l.Dir)
	}
}
