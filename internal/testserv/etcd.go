package testserv

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/fencelock/fence/internal/servers"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencelock/fence/internal/etcdmember"
)

// EtcdMinLeaseTTL is the shortest lease TTL the etcd servers started here honour:
// etcd derives it from the election timeout of internal/etcdmember, and silently
// raises a shorter TTL to it. Tests of lease expiry use at least this.
const EtcdMinLeaseTTL = etcdmember.MinLeaseTTL

// etcdMemberEnv carries a member's config (JSON) to a child process of the test binary;
// EtcdMemberMain looks for it.
const etcdMemberEnv = "FENCE_TESTSERV_ETCD_MEMBER"

// EtcdServer is a throwaway single-member etcd embedded in the test process
// (go.etcd.io/etcd/server/v3/embed), listening on free ports of 127.0.0.1, with its data
// in a fresh temporary directory.
type EtcdServer struct {
	Endpoints []string // client URLs, e.g. "http://127.0.0.1:PORT"
	Dir       string   // removed by Close

	once sync.Once
	e    *embed.Etcd
}

// StartEtcd starts a single-member embedded etcd and waits until it serves clients.
// Its logs are discarded. The caller must Close it. It returns an error if no free port
// could be bound or the server did not become ready within 30 s.
func StartEtcd() (*EtcdServer, error) { return startEtcd(false) }

// EtcdDefaultMinLeaseTTL is the shortest lease TTL of an etcd member with etcd's
// default timing (100 ms ticks, 1 s election timeout), as StartEtcdDefaultTiming
// starts: 1.5 election timeouts, rounded up to whole seconds.
const EtcdDefaultMinLeaseTTL = 2 * time.Second

// StartEtcdDefaultTiming is StartEtcd with etcd's default Raft timing instead of the
// faster one of internal/etcdmember, for measuring what users of an etcd configured
// by default get (its minimum lease TTL is EtcdDefaultMinLeaseTTL).
func StartEtcdDefaultTiming() (*EtcdServer, error) { return startEtcd(true) }

func startEtcd(defaultTiming bool) (*EtcdServer, error) {
	dir, err := servers.MakeDir("etcd")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < servers.StartAttempts; attempt++ {
		m, err := newEtcdMemberConfig("single", dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		m.InitialCluster = m.Name + "=" + m.PeerURL
		cfg, err := m.Embed()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		if defaultTiming {
			def := embed.NewConfig()
			cfg.TickMs, cfg.ElectionMs = def.TickMs, def.ElectionMs
		}
		e, err := startEmbed(cfg)
		if err == nil {
			return &EtcdServer{Endpoints: []string{m.ClientURL}, Dir: dir, e: e}, nil
		}
		lastErr = err
		os.RemoveAll(m.Dir)
		if !servers.AddrInUse(err) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("testserv: etcd: %w", lastErr)
}

// Etcd starts a single-member etcd for one test (see StartEtcd) and closes it at the
// test's cleanup. It fails the test if the server does not start.
func Etcd(t testing.TB) *EtcdServer {
	t.Helper()
	s, err := StartEtcd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Close stops the server and removes its directory. It is idempotent.
func (s *EtcdServer) Close() {
	s.once.Do(func() {
		s.e.Close()
		os.RemoveAll(s.Dir)
	})
}

// startEmbed starts an embedded member and waits until it is ready.
func startEmbed(cfg *embed.Config) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(servers.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("not ready after %v", servers.StartTimeout)
	}
}

// etcdMemberConfig is what a member needs to start; it is passed to child processes as
// JSON.
type etcdMemberConfig = etcdmember.Config

// newEtcdMemberConfig chooses free ports for a member whose data lives under parent.
func newEtcdMemberConfig(name, parent string) (etcdMemberConfig, error) {
	cport, err := FreePort()
	if err != nil {
		return etcdMemberConfig{}, err
	}
	pport, err := FreePort()
	if err != nil {
		return etcdMemberConfig{}, err
	}
	return etcdMemberConfig{
		Name:         name,
		Dir:          filepath.Join(parent, name),
		ClientURL:    fmt.Sprintf("http://127.0.0.1:%d", cport),
		PeerURL:      fmt.Sprintf("http://127.0.0.1:%d", pport),
		ClusterToken: "testserv-" + name,
	}, nil
}

// The members of an EtcdCluster are child processes of the test binary: in such a
// child (the environment carries etcdMemberEnv) this init runs the member until it is
// killed and never returns, before any test or TestMain runs. In the test process
// itself it does nothing.
func init() { etcdMemberMain() }

func etcdMemberMain() {
	raw, ok := os.LookupEnv(etcdMemberEnv)
	if !ok {
		return
	}
	var m etcdMemberConfig
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		fmt.Fprintf(os.Stderr, "testserv: etcd member: bad %s: %v\n", etcdMemberEnv, err)
		os.Exit(3)
	}
	cfg, err := m.Embed()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testserv: etcd member %s: %v\n", m.Name, err)
		os.Exit(3)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testserv: etcd member %s: %v\n", m.Name, err)
		os.Exit(3)
	}
	// Serve until killed (the parent's SIGKILL, or its death via Pdeathsig).
	err = <-e.Err()
	fmt.Fprintf(os.Stderr, "testserv: etcd member %s: %v\n", m.Name, err)
	os.Exit(3)
}

// EtcdCluster is a throwaway etcd cluster on 127.0.0.1 whose members are separate
// processes (children of the test binary, re-executed as etcd members), so that one can be killed
// with SIGKILL like a crashed machine.
type EtcdCluster struct {
	Members []*EtcdMember
	Dir     string // holds the members' data directories; removed by Close

	once sync.Once
}

// EtcdMember is one member process of an EtcdCluster.
type EtcdMember struct {
	Name      string
	ClientURL string // "http://127.0.0.1:PORT"
	PeerURL   string

	mu   sync.Mutex
	proc *servers.Process // nil once killed
}

// StartEtcdCluster starts an n-member etcd cluster, each member a child process of the
// test binary, and waits until every member serves clients. The caller must Close it. It returns an error with
// the members' log tails if the cluster does not become ready within 30 s.
func StartEtcdCluster(n int) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserv: etcd cluster: %d members; want at least 1", n)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("testserv: etcd cluster: %w", err)
	}
	dir, err := servers.MakeDir("etcd-cluster")
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{Dir: dir}
	cfgs := make([]etcdMemberConfig, n)
	var initial []string
	for i := range cfgs {
		if cfgs[i], err = newEtcdMemberConfig(fmt.Sprintf("m%d", i), dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		initial = append(initial, cfgs[i].Name+"="+cfgs[i].PeerURL)
	}
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
		cfgs[i].ClusterToken = filepath.Base(dir)
		raw, _ := json.Marshal(cfgs[i]) // plain strings: cannot fail
		p, err := startChild("etcd "+cfgs[i].Name, exe, []string{"-test.run=^$"}, etcdMemberEnv+"="+string(raw), filepath.Join(dir, cfgs[i].Name+".log"))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Members = append(c.Members, &EtcdMember{Name: cfgs[i].Name, ClientURL: cfgs[i].ClientURL, PeerURL: cfgs[i].PeerURL, proc: p})
	}
	if err := c.waitReady(); err != nil {
		var tails []string
		for _, m := range c.Members {
			tails = append(tails, m.Name+": "+servers.LogTail(filepath.Join(dir, m.Name+".log")))
		}
		c.Close()
		return nil, fmt.Errorf("testserv: etcd cluster: %w\n%s", err, strings.Join(tails, "\n"))
	}
	return c, nil
}

// NewEtcdCluster starts an n-member cluster for one test (see StartEtcdCluster) and
// closes it at the test's cleanup. It fails the test if the cluster does not start.
func NewEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	c, err := StartEtcdCluster(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// startChild starts bin like servers.StartProcess, with one extra environment variable.
func startChild(name, bin string, args []string, env, logPath string) (*servers.Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testserv: %s: open log: %w", name, err)
	}
	defer logf.Close() // the child has its own copy of the descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = servers.GroupAttr(nil)
	return servers.Spawn(name, cmd, logPath)
}

// waitReady waits until every member answers a linearizable read.
func (c *EtcdCluster) waitReady() error {
	deadline := time.Now().Add(servers.StartTimeout)
	for _, m := range c.Members {
		for {
			err := etcdPing(m.ClientURL)
			if err == nil {
				break
			}
			if m.proc.Exited() {
				return fmt.Errorf("member %s exited: %v", m.Name, m.proc.Err())
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("member %s not ready after %v: %w", m.Name, servers.StartTimeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// etcdPing makes one linearizable read through endpoint only.
func etcdPing(endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "testserv-ping")
	return err
}

// Endpoints returns the client URLs of the members that have not been killed.
func (c *EtcdCluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		if m.Alive() {
			out = append(out, m.ClientURL)
		}
	}
	return out
}

// Leader returns the member that the live members agree is the leader. It returns an
// error if they cannot be asked or do not agree before ctx ends.
func (c *EtcdCluster) Leader(ctx context.Context) (*EtcdMember, error) {
	for {
		m, err := c.leaderOnce(ctx)
		if err == nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserv: etcd cluster: leader: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *EtcdCluster) leaderOnce(ctx context.Context) (*EtcdMember, error) {
	var live []*EtcdMember
	var urls []string
	for _, m := range c.Members {
		if m.Alive() {
			live = append(live, m)
			urls = append(urls, m.ClientURL)
		}
	}
	i, err := etcdmember.Leader(ctx, urls)
	if err != nil {
		return nil, err
	}
	return live[i], nil
}

// Close kills every member and removes the cluster's directory. It is idempotent.
func (c *EtcdCluster) Close() {
	c.once.Do(func() {
		for _, m := range c.Members {
			m.Kill()
		}
		os.RemoveAll(c.Dir)
	})
}

// Kill kills the member's process with SIGKILL, like a crashed machine, and waits until
// it is gone. Its data stays; the member is not restarted.
func (m *EtcdMember) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
}

// Alive reports whether the member has not been killed and its process is running.
func (m *EtcdMember) Alive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && !m.proc.Exited()
}
