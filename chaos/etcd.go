package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencelock/fence/internal/etcdmember"
)

// NemesisMember kills the etcd leader (SIGKILL) under `fence serve --store etcd://`
// and restarts it on the same data directory.
const NemesisMember = "member"

// etcdMinTTL is etcd's minimum lease TTL with the members' Raft timing.
const etcdMinTTL = etcdmember.MinLeaseTTL

// EtcdMemberConfig is what one etcd member process needs (the flags of the hidden
// `fence chaos etcd-member` mode); the members run internal/etcdmember's embedded
// configuration, the same as the test helpers' clusters.
type EtcdMemberConfig = etcdmember.Config

// RunEtcdMember runs one embedded etcd member until ctx ends (then it closes the
// member and returns nil) or the member fails. It returns a fence.ErrInvalid error for
// a bad config, or the error that stopped the member.
func RunEtcdMember(ctx context.Context, m EtcdMemberConfig) error {
	cfg, err := m.Embed()
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("chaos: etcd member %s: %w", m.Name, err)
	}
	defer e.Close()
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("chaos: etcd member %s: %w", m.Name, err)
	}
}

// etcdMember is one member process of an etcdCluster.
type etcdMember struct {
	cfg     EtcdMemberConfig
	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd     // nil while killed
	exited  chan struct{} // closed when cmd has exited
}

// etcdCluster is a 3-member etcd cluster of `fence chaos etcd-member` processes.
type etcdCluster struct {
	bin     string
	members []*etcdMember
}

// startEtcdCluster starts n members under dir and waits until each serves a
// linearizable read.
func startEtcdCluster(ctx context.Context, bin, dir string, n int) (*etcdCluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: etcd cluster dir: %w", err)
	}
	c := &etcdCluster{bin: bin}
	var initial []string
	for i := 0; i < n; i++ {
		caddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		paddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		m := &etcdMember{
			cfg: EtcdMemberConfig{Name: name, Dir: filepath.Join(dir, name), ClientURL: "http://" + caddr,
				PeerURL: "http://" + paddr, ClusterToken: "chaos-" + filepath.Base(dir)},
			logPath: filepath.Join(dir, name+".log"),
		}
		initial = append(initial, name+"="+m.cfg.PeerURL)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		if err := c.start(m); err != nil {
			c.close()
			return nil, err
		}
	}
	for _, m := range c.members {
		if err := c.waitServing(ctx, m); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// storeURL is the --store URL of `fence serve` on the cluster.
func (c *etcdCluster) storeURL() string {
	var hosts []string
	for _, m := range c.members {
		hosts = append(hosts, strings.TrimPrefix(m.cfg.ClientURL, "http://"))
	}
	return "etcd://" + strings.Join(hosts, ",") + "/chaos/"
}

// start starts m's process (on its data directory, kept across restarts).
func (c *etcdCluster) start(m *etcdMember) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: etcd member log: %w", err)
	}
	state := "new"
	if m.cfg.Existing {
		state = "existing"
	}
	cmd := exec.Command(c.bin, "chaos", "etcd-member", "--name", m.cfg.Name, "--dir", m.cfg.Dir,
		"--client-url", m.cfg.ClientURL, "--peer-url", m.cfg.PeerURL, "--initial-cluster", m.cfg.InitialCluster,
		"--cluster-token", m.cfg.ClusterToken, "--state", state)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start etcd member %s: %w", m.cfg.Name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	m.cmd, m.exited = cmd, exited
	return nil
}

// waitServing waits up to 30 s until m answers a linearizable read.
func (c *etcdCluster) waitServing(ctx context.Context, m *etcdMember) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := etcdPing(ctx, m.cfg.ClientURL)
		if err == nil {
			return nil
		}
		m.mu.Lock()
		exited := m.exited
		m.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("chaos: etcd member %s exited (see %s)", m.cfg.Name, m.logPath)
		case <-ctx.Done():
			return fmt.Errorf("chaos: waiting for etcd member %s: %w", m.cfg.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: etcd member %s not serving after 30s: %v (see %s)", m.cfg.Name, err, m.logPath)
		}
	}
}

// etcdPing makes one linearizable read through endpoint only.
func etcdPing(ctx context.Context, endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = cli.Get(rctx, "chaos-ping")
	return err
}

// kill SIGKILLs m and waits until it is gone; its data stays.
func (m *etcdMember) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		m.cmd.Process.Kill()
		<-m.exited
		m.cmd = nil
	}
}

// leader returns the member every live member reports as leader, asking each
// through its own client URL (Status), retrying until ctx ends.
func (c *etcdCluster) leader(ctx context.Context) (*etcdMember, error) {
	var last error
	for {
		m, err := c.leaderOnce(ctx)
		if err == nil {
			return m, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("chaos: etcd leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *etcdCluster) leaderOnce(ctx context.Context) (*etcdMember, error) {
	var live []*etcdMember
	var urls []string
	for _, m := range c.members {
		m.mu.Lock()
		alive := m.cmd != nil
		m.mu.Unlock()
		if alive {
			live = append(live, m)
			urls = append(urls, m.cfg.ClientURL)
		}
	}
	i, err := etcdmember.Leader(ctx, urls)
	if err != nil {
		return nil, err
	}
	return live[i], nil
}

// close kills every member.
func (c *etcdCluster) close() {
	for _, m := range c.members {
		m.kill()
	}
}

// memberNemesis SIGKILLs the etcd leader (found through Status), keeps it down for
// about 2 TTLs (at least etcd's minimum lease TTL), so the others elect a new leader
// and leases outlive their holders' deadlines, then restarts it on the same data
// directory (initial cluster state existing) and waits until it serves again.
func memberNemesis(ctx context.Context, cfg Config, rng *rand.Rand, c *etcdCluster, injected func()) error {
	down := 2 * cfg.TTL
	if down < etcdMinTTL {
		down = etcdMinTTL
	}
	for n := 0; cfg.MaxFaults == 0 || n < cfg.MaxFaults; n++ {
		if !sleepCtx(ctx, jitter(rng, cfg.Interval)) {
			return nil
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := c.leader(lctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil // the run ended while a leader was being elected
			}
			return err
		}
		m.kill()
		injected()
		time.Sleep(jitter(rng, down))
		m.cfg.Existing = true
		if err := c.start(m); err != nil {
			return err
		}
		if err := c.waitServing(context.Background(), m); err != nil {
			return fmt.Errorf("chaos: restart after member kill: %w", err)
		}
	}
	return nil
}
