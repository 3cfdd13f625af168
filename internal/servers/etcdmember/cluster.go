package etcdmember

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// Cluster is an etcd cluster (on 127.0.0.1 unless StartClusterOn) whose members are separate processes (each
// runs Serve on its Config), so that one can be killed with SIGKILL like a crashed
// machine and restarted on its data. Its methods are safe for concurrent use.
type Cluster struct {
	Members []*Member
}

// Member is one member process of a Cluster. Its exported fields are fixed for its
// whole life, across Kill and Restart.
type Member struct {
	Name      string // e.g. "m0"
	ClientURL string // "http://127.0.0.1:PORT"
	PeerURL   string // "http://127.0.0.1:PORT"
	LogPath   string // the process's output, appended across restarts

	mu   sync.Mutex // guards cfg
	cfg  Config
	life servers.Lifecycle // its process, launched with cfg; Dir is empty: Close is never called
}

// StartCluster starts an n-member cluster whose data directories and logs are under
// dir (members "m0", "m1", ...; token is the initial cluster token), each member the
// process command returns for its Config (the caller chooses the binary, arguments and
// environment; output, process group and parent-death signal are set here). It waits
// until every member serves a linearizable read. The caller must Close it. It returns
// an error with the tail of a member's log if that member exits or does not serve
// within servers.StartTimeout, or ctx's error if ctx ends first.
func StartCluster(ctx context.Context, dir, token string, n int, command func(Config) *exec.Cmd) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdmember: cluster: %d members; want at least 1", n)
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = "127.0.0.1"
	}
	return StartClusterOn(ctx, dir, token, hosts, command)
}

// StartClusterOn is StartCluster with one member per entry of hosts, member i on the
// IPv4 address hosts[i] (its client and peer URLs), for members that run in network
// namespaces of their own. It returns the errors of StartCluster.
func StartClusterOn(ctx context.Context, dir, token string, hosts []string, command func(Config) *exec.Cmd) (*Cluster, error) {
	n := len(hosts)
	if n < 1 {
		return nil, fmt.Errorf("etcdmember: cluster: %d members; want at least 1", n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("etcdmember: cluster: %w", err)
	}
	c := &Cluster{}
	var initial []string
	for i := 0; i < n; i++ {
		cport, err := servers.FreePort()
		if err != nil {
			return nil, err
		}
		pport, err := servers.FreePort()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		cfg := Config{Name: name, Dir: filepath.Join(dir, name), ClusterToken: token,
			ClientURL: fmt.Sprintf("http://%s:%d", hosts[i], cport), PeerURL: fmt.Sprintf("http://%s:%d", hosts[i], pport)}
		m := &Member{Name: name, ClientURL: cfg.ClientURL, PeerURL: cfg.PeerURL, LogPath: filepath.Join(dir, name+".log"), cfg: cfg}
		m.life.Launch = func() (*servers.Process, error) {
			m.mu.Lock()
			cmd := command(m.cfg)
			m.mu.Unlock()
			return servers.StartCommand("etcd member "+m.Name, cmd, m.LogPath)
		}
		c.Members = append(c.Members, m)
		initial = append(initial, name+"="+cfg.PeerURL)
	}
	for _, m := range c.Members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		if err := m.life.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := m.waitServing(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// waitServing waits until m answers a linearizable read, m exits, ctx ends or
// servers.StartTimeout passes.
func (m *Member) waitServing(ctx context.Context) error {
	deadline := time.Now().Add(servers.StartTimeout)
	for {
		err := Ping(ctx, m.ClientURL)
		if err == nil {
			return nil
		}
		if !m.Alive() {
			return fmt.Errorf("etcdmember: member %s exited; log %s:\n%s", m.Name, m.LogPath, servers.LogTail(m.LogPath))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdmember: member %s not serving after %v (last check: %v); log %s:\n%s",
				m.Name, servers.StartTimeout, err, m.LogPath, servers.LogTail(m.LogPath))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdmember: waiting for member %s: %w", m.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Restart starts the killed member m again on its data directory (initial cluster
// state existing) and waits until it serves, as StartCluster does. Restarting a live
// member does nothing. It returns the errors of StartCluster.
func (c *Cluster) Restart(ctx context.Context, m *Member) error {
	if m.Alive() {
		return nil
	}
	m.mu.Lock()
	m.cfg.Existing = true
	m.mu.Unlock()
	if err := m.life.Start(); err != nil {
		return err
	}
	return m.waitServing(ctx)
}

// Endpoints returns the client URLs of the members that have not been killed.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		if m.Alive() {
			out = append(out, m.ClientURL)
		}
	}
	return out
}

// Leader returns the member that the live members agree is the leader (see the
// function Leader), asking again every 50 ms. It returns an error if they cannot be
// asked or do not agree before ctx ends.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	for {
		m, err := c.leaderOnce(ctx)
		if err == nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdmember: cluster leader: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) leaderOnce(ctx context.Context) (*Member, error) {
	var live []*Member
	var urls []string
	for _, m := range c.Members {
		if m.Alive() {
			live = append(live, m)
			urls = append(urls, m.ClientURL)
		}
	}
	i, err := Leader(ctx, urls)
	if err != nil {
		return nil, err
	}
	return live[i], nil
}

// Close kills every member; their directories stay. It is idempotent.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		m.Kill()
	}
}

// Kill kills the member's process with SIGKILL, like a crashed machine, and waits until
// it is gone. Its data stays, for Cluster.Restart. Killing a killed member does nothing.
func (m *Member) Kill() { m.life.Kill() }

// Alive reports whether the member has not been killed and its process is running.
func (m *Member) Alive() bool { return m.life.Alive() }
