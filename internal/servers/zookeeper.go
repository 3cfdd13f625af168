package servers

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ZooKeeper timing of every server started here. The session timeouts a client may
// ask for are clamped by the server to [ZooKeeperMinSession, ZooKeeperMaxSession].
const (
	zkTickMs = 100
	// ZooKeeperMinSession is the shortest session timeout the servers grant.
	ZooKeeperMinSession = 400 * time.Millisecond
	// ZooKeeperMaxSession is the longest session timeout the servers grant.
	ZooKeeperMaxSession = 30 * time.Second
)

// zkJar is Debian's ZooKeeper jar; its manifest brings the dependencies in.
const zkJar = "/usr/share/java/zookeeper.jar"

// zkLogJar, if present, makes the server log through slf4j-simple instead of nowhere.
const zkLogJar = "/usr/share/java/slf4j-simple.jar"

// zkMain is the class that runs a standalone server or an ensemble member.
const zkMain = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

// ZooKeeper is a throwaway standalone ZooKeeper (Debian's zookeeper package, run
// on the machine's Java) on a free port of 127.0.0.1, with its data in a fresh
// temporary directory.
type ZooKeeper struct {
	Addr string // "127.0.0.1:PORT", for zk.Connect
	Port int
	Dir  string // removed by Close

	once sync.Once
	proc *Process
}

// zkPrepare returns the java binary, the classpath and a fresh directory named after
// kind for a server or an ensemble, or an error matching ErrNotFound that says to
// apt-get install zookeeper.
func zkPrepare(kind string) (java, classpath, dir string, err error) {
	java, err = FindBinary("java", "zookeeper")
	if err != nil {
		return "", "", "", err
	}
	if _, err := os.Stat(zkJar); err != nil {
		return "", "", "", &NotFoundError{Name: zkJar, Package: "zookeeper"}
	}
	classpath = zkJar
	if _, err := os.Stat(zkLogJar); err == nil {
		classpath += ":" + zkLogJar
	}
	dir, err = MakeDir(kind)
	if err != nil {
		return "", "", "", err
	}
	return java, classpath, dir, nil
}

// zkJavaArgs are the JVM flags: a small heap and a quick start (Java start-up is the
// slow part of these tests).
func zkJavaArgs(classpath, cfg string) []string {
	return []string{
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dzookeeper.admin.enableServer=false",
		"-cp", classpath, zkMain, cfg,
	}
}

// zkConfig returns the zoo.cfg of a server whose data is in dataDir.
func zkConfig(dataDir string, clientPort int, members []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\n", zkTickMs)
	fmt.Fprintf(&b, "dataDir=%s\n", dataDir)
	fmt.Fprintf(&b, "clientPort=%d\n", clientPort)
	b.WriteString("clientPortAddress=127.0.0.1\n")
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", ZooKeeperMinSession.Milliseconds())
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", ZooKeeperMaxSession.Milliseconds())
	b.WriteString("admin.enableServer=false\n")
	b.WriteString("4lw.commands.whitelist=srvr,stat,ruok,wchp,mntr\n")
	b.WriteString("maxClientCnxns=0\n")
	b.WriteString("forceSync=no\n") // throwaway data: durability across machine crashes is not tested
	if len(members) > 0 {
		b.WriteString("initLimit=50\nsyncLimit=10\n")
		b.WriteString("reconfigEnabled=false\nstandaloneEnabled=false\n")
		for _, s := range members {
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}

// StartZooKeeper starts a standalone ZooKeeper and waits until it serves clients (its
// srvr command reports a mode). The caller must Close it. It returns an error matching
// ErrNotFound (saying apt-get install zookeeper) if java or the ZooKeeper jar is
// missing, and an error with the log's tail if the server does not start within 30 s.
func StartZooKeeper() (*ZooKeeper, error) {
	java, cp, dir, err := zkPrepare("zookeeper")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < StartAttempts; attempt++ {
		port, err := FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		data := filepath.Join(dir, "data")
		os.RemoveAll(data)
		if err := os.MkdirAll(data, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("servers: zookeeper: %w", err)
		}
		cfg := filepath.Join(dir, "zoo.cfg")
		if err := os.WriteFile(cfg, []byte(zkConfig(data, port, nil)), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("servers: zookeeper: %w", err)
		}
		p, err := StartProcess("zookeeper", java, zkJavaArgs(cp, cfg), filepath.Join(dir, "zookeeper.log"), nil)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = p.WaitReady(func() error {
			mode, err := ZooKeeperMode(addr)
			if err == nil && mode != "standalone" {
				err = fmt.Errorf("mode %q", mode)
			}
			return err
		})
		if err == nil {
			return &ZooKeeper{Addr: addr, Port: port, Dir: dir, proc: p}, nil
		}
		p.Kill()
		lastErr = err
		if !AddrInUse(err) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// Close stops the server (SIGTERM, then SIGKILL after 15 s) and removes its directory.
// It is idempotent.
func (s *ZooKeeper) Close() {
	s.once.Do(func() {
		s.proc.Kill() // throwaway data: no need for a graceful stop
		os.RemoveAll(s.Dir)
	})
}

// ZooKeeperCommand sends a four-letter command (srvr, stat, ruok, wchp or mntr: the ones the
// servers started here allow) to the server at addr and returns its whole answer.
func ZooKeeperCommand(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// ZooKeeperMode asks the server at addr with the srvr four-letter command and returns
// its mode: "standalone", "leader" or "follower". It returns an error if the server
// cannot be reached or is not serving (no quorum yet).
func ZooKeeperMode(addr string) (string, error) {
	answer, err := ZooKeeperCommand(addr, "srvr")
	if err != nil {
		return "", err
	}
	lines := strings.Split(answer, "\n")
	for _, line := range lines {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("zookeeper %s: no mode in srvr answer %q", addr, lines[0])
}

// ZooKeeperEnsemble is a throwaway ZooKeeper ensemble on 127.0.0.1: each member a
// separate java process with its own client, quorum and election ports, data directory
// and myid, so one can be killed with SIGKILL like a crashed machine.
type ZooKeeperEnsemble struct {
	Members []*ZooKeeperMember
	Dir     string // holds the members' directories; removed by Close

	once sync.Once
}

// ZooKeeperMember is one server of a ZooKeeperEnsemble.
type ZooKeeperMember struct {
	ID   int    // its myid, 1-based
	Addr string // client address "127.0.0.1:PORT"
	Dir  string // its directory: zoo.cfg, data/ (myid, snapshots, transaction log), zookeeper.log

	life Lifecycle // Dir is empty: the ensemble removes the directories
}

// ZooKeeperHost returns the host name StartZooKeeperEnsemble passes to its CommandFunc
// for the member with myid id: "zk-1", "zk-2", ...
func ZooKeeperHost(id int) string { return "zk-" + strconv.Itoa(id) }

// StartZooKeeperEnsemble starts an n-server ensemble and waits until every member
// serves clients as leader or follower. command, if not nil, builds each member's
// command (host ZooKeeperHost(id)), every time it starts. The caller must Close it. It
// returns an error matching ErrNotFound if java or ZooKeeper is missing, and one with
// the members' log tails if the ensemble is not ready within StartTimeout.
func StartZooKeeperEnsemble(n int, command CommandFunc) (*ZooKeeperEnsemble, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: zookeeper ensemble: %d members; want at least 1", n)
	}
	java, cp, dir, err := zkPrepare("zookeeper-ensemble")
	if err != nil {
		return nil, err
	}
	e := &ZooKeeperEnsemble{Dir: dir}
	ports := make([][3]int, n)
	var members []string
	for i := range ports {
		for j := range ports[i] {
			if ports[i][j], err = FreePort(); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
		}
		members = append(members, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[i][1], ports[i][2]))
	}
	for i := range ports {
		id := i + 1
		mdir := filepath.Join(dir, fmt.Sprintf("zk%d", id))
		data := filepath.Join(mdir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			e.Close()
			return nil, fmt.Errorf("servers: zookeeper ensemble: %w", err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
			e.Close()
			return nil, fmt.Errorf("servers: zookeeper ensemble: %w", err)
		}
		cfg := filepath.Join(mdir, "zoo.cfg")
		if err := os.WriteFile(cfg, []byte(zkConfig(data, ports[i][0], members)), 0o644); err != nil {
			e.Close()
			return nil, fmt.Errorf("servers: zookeeper ensemble: %w", err)
		}
		m := &ZooKeeperMember{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", ports[i][0]), Dir: mdir}
		m.life.Launch = func() (*Process, error) {
			return startWith(command, ZooKeeperHost(id), fmt.Sprintf("zookeeper %d", id), java, zkJavaArgs(cp, cfg), filepath.Join(mdir, "zookeeper.log"), nil)
		}
		m.life.StopSig = syscall.SIGTERM
		if err := m.life.Start(); err != nil {
			e.Close()
			return nil, err
		}
		e.Members = append(e.Members, m)
	}
	if err := e.waitReady(); err != nil {
		var tails []string
		for _, m := range e.Members {
			tails = append(tails, fmt.Sprintf("zk%d: %s", m.ID, LogTail(filepath.Join(dir, fmt.Sprintf("zk%d", m.ID), "zookeeper.log"))))
		}
		e.Close()
		return nil, fmt.Errorf("servers: zookeeper ensemble: %w\n%s", err, strings.Join(tails, "\n"))
	}
	return e, nil
}

// waitReady waits until every member serves, within StartTimeout in all.
func (e *ZooKeeperEnsemble) waitReady() error {
	deadline := time.Now().Add(StartTimeout)
	for _, m := range e.Members {
		if err := m.waitServing(deadline); err != nil {
			return err
		}
	}
	return nil
}

// waitServing waits until the member's srvr command reports it leader or follower. It
// returns an error if the member exits or deadline passes first.
func (m *ZooKeeperMember) waitServing(deadline time.Time) error {
	for {
		mode, err := ZooKeeperMode(m.Addr)
		if err == nil && (mode == "leader" || mode == "follower") {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("mode %q", mode)
		}
		if !m.Alive() {
			return fmt.Errorf("member %d exited", m.ID)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("member %d not ready after %v: %w", m.ID, StartTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Servers returns the client addresses of all members, killed or not, for zk.Connect
// (a client tries them in turn).
func (e *ZooKeeperEnsemble) Servers() []string {
	out := make([]string, len(e.Members))
	for i, m := range e.Members {
		out[i] = m.Addr
	}
	return out
}

// Leader returns the live member whose srvr command reports "leader", waiting for an
// election if there is none. It returns an error if ctx ends first.
func (e *ZooKeeperEnsemble) Leader(ctx context.Context) (*ZooKeeperMember, error) {
	for {
		for _, m := range e.Members {
			if !m.Alive() {
				continue
			}
			if mode, err := ZooKeeperMode(m.Addr); err == nil && mode == "leader" {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("servers: zookeeper ensemble: leader: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close kills every member and removes the ensemble's directory. It is idempotent;
// a member's Restart after it returns an error.
func (e *ZooKeeperEnsemble) Close() {
	e.once.Do(func() {
		for _, m := range e.Members {
			m.life.Close() // its Dir is empty: the ensemble's removal below covers it
		}
		os.RemoveAll(e.Dir)
	})
}

// Kill kills the member with SIGKILL, like a crashed machine, and waits until it is
// gone. Restart brings it back; killing a killed member does nothing.
func (m *ZooKeeperMember) Kill() { m.life.Kill() }

// Restart stops the member if it runs (SIGTERM) and starts it again on the same ports
// and data directory (after Kill, it recovers from its snapshot and transaction log),
// then waits until it serves as leader or follower, which needs a quorum of the
// ensemble up. It returns an error with the log's tail if it does not serve within
// StartTimeout, or if the ensemble was closed.
func (m *ZooKeeperMember) Restart() error {
	if err := m.life.Restart(fmt.Sprintf("zookeeper %d", m.ID)); err != nil {
		return err
	}
	if err := m.waitServing(time.Now().Add(StartTimeout)); err != nil {
		return fmt.Errorf("servers: zookeeper %d restart: %w; log:\n%s", m.ID, err, LogTail(filepath.Join(m.Dir, "zookeeper.log")))
	}
	return nil
}

// Alive reports whether the member has not been killed and its process is running.
func (m *ZooKeeperMember) Alive() bool { return m.life.Alive() }
