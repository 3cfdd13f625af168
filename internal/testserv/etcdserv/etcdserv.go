// Package etcdserv starts throwaway etcd servers for integration tests: a single member
// embedded in the test process (Start, New) or a cluster whose members are child
// processes of the test binary (StartCluster, NewCluster), on free ports of 127.0.0.1
// with their data in fresh temporary directories.
//
// It is apart from internal/testserv because it links the etcd server: only the test
// binaries that start etcd import it. Like internal/testserv it is for tests only.
//
// A test binary that imports it becomes an etcd member, before any test runs, when its
// environment carries a member's configuration: that is how StartCluster starts its
// members.
package etcdserv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/fencelock/fence/internal/etcdmember"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/testserv"
)

// MinLeaseTTL is the shortest lease TTL the etcd servers started here honour: etcd
// derives it from the election timeout of internal/etcdmember, and silently raises a
// shorter TTL to it. Tests of lease expiry use at least this.
const MinLeaseTTL = etcdmember.MinLeaseTTL

// DefaultMinLeaseTTL is the shortest lease TTL of an etcd member with etcd's default
// timing (100 ms ticks, 1 s election timeout), as StartDefaultTiming starts: 1.5
// election timeouts, rounded up to whole seconds.
const DefaultMinLeaseTTL = 2 * time.Second

// Server is a throwaway single-member etcd embedded in the test process
// (go.etcd.io/etcd/server/v3/embed), listening on free ports of 127.0.0.1, with its data
// in a fresh temporary directory.
type Server struct {
	Endpoints []string // client URLs, e.g. "http://127.0.0.1:PORT"
	Dir       string   // removed by Close

	once sync.Once
	e    *embed.Etcd
}

// Start starts a single-member embedded etcd and waits until it serves clients. Its
// logs are discarded. The caller must Close it. It returns an error if no free port
// could be bound or the server did not become ready within servers.StartTimeout.
func Start() (*Server, error) { return start(false) }

// StartDefaultTiming is Start with etcd's default Raft timing instead of the faster
// one of internal/etcdmember, for measuring what users of an etcd configured by default
// get (its minimum lease TTL is DefaultMinLeaseTTL).
func StartDefaultTiming() (*Server, error) { return start(true) }

// New starts a single-member etcd for one test (see Start) and closes it at the test's
// cleanup. It fails the test if the server does not start.
func New(t testing.TB) *Server {
	t.Helper()
	return testserv.ForTest(t, Start)
}

func start(defaultTiming bool) (*Server, error) {
	dir, err := servers.MakeDir("etcd")
	if err != nil {
		return nil, err
	}
	var adjust func(*embed.Config)
	if defaultTiming {
		adjust = func(cfg *embed.Config) {
			def := embed.NewConfig()
			cfg.TickMs, cfg.ElectionMs = def.TickMs, def.ElectionMs
		}
	}
	e, url, err := etcdmember.StartSingle(dir, "single", "etcdserv-single", adjust)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("etcdserv: %w", err)
	}
	return &Server{Endpoints: []string{url}, Dir: dir, e: e}, nil
}

// Close stops the server and removes its directory. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		s.e.Close()
		os.RemoveAll(s.Dir)
	})
}

// memberEnv carries a member's Config (JSON) to a child process of the test binary.
const memberEnv = "FENCE_ETCDSERV_MEMBER"

// The members of a Cluster are child processes of the test binary: in such a child
// (the environment carries memberEnv) this init runs the member until it is killed and
// never returns, before any test or TestMain runs. In the test process itself it does
// nothing.
func init() { memberMain() }

func memberMain() {
	raw, ok := os.LookupEnv(memberEnv)
	if !ok {
		return
	}
	var m etcdmember.Config
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		fmt.Fprintf(os.Stderr, "etcdserv: etcd member: bad %s: %v\n", memberEnv, err)
		os.Exit(3)
	}
	cfg, err := m.Embed()
	if err == nil {
		// Serve until killed (the parent's SIGKILL, or its death via Pdeathsig).
		err = etcdmember.Serve(context.Background(), cfg)
	}
	fmt.Fprintf(os.Stderr, "etcdserv: etcd member %s: %v\n", m.Name, err)
	os.Exit(3)
}

// Member is one member process of a Cluster: Kill it like a crashed machine.
type Member = etcdmember.Member

// Cluster is a throwaway etcd cluster on 127.0.0.1 whose members are separate
// processes (children of the test binary, re-executed as etcd members), so that one can
// be killed with SIGKILL like a crashed machine. Endpoints, Leader and Members come from
// etcdmember.Cluster.
type Cluster struct {
	*etcdmember.Cluster
	Dir string // holds the members' data directories and logs; removed by Close

	once sync.Once
}

// StartCluster starts an n-member etcd cluster, each member a child process of the test
// binary, and waits until every member serves clients. The caller must Close it. It
// returns an error with a member's log tail if the cluster does not become ready within
// servers.StartTimeout.
func StartCluster(n int) (*Cluster, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("etcdserv: cluster: %w", err)
	}
	dir, err := servers.MakeDir("etcd-cluster")
	if err != nil {
		return nil, err
	}
	command := func(m etcdmember.Config) *exec.Cmd {
		raw, _ := json.Marshal(m) // plain strings and a bool: cannot fail
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), memberEnv+"="+string(raw))
		return cmd
	}
	c, err := etcdmember.StartCluster(context.Background(), dir, filepath.Base(dir), n, command)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("etcdserv: %w", err)
	}
	return &Cluster{Cluster: c, Dir: dir}, nil
}

// NewCluster starts an n-member cluster for one test (see StartCluster) and closes it
// at the test's cleanup. It fails the test if the cluster does not start.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return testserv.ForTest(t, func() (*Cluster, error) { return StartCluster(n) })
}

// Close kills every member and removes the cluster's directory. It is idempotent.
func (c *Cluster) Close() {
	c.once.Do(func() {
		c.Cluster.Close()
		os.RemoveAll(c.Dir)
	})
}
