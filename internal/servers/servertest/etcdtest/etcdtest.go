// Package etcdtest is the test-only wrapper of internal/servers/etcdmember: a
// single member embedded in the test process for one test (New), and clusters whose
// members are child processes of the test binary (StartCluster, NewCluster), on free
// ports of 127.0.0.1 with their data in fresh temporary directories.
//
// It is apart from servertest because it links the etcd server: only the test
// binaries that start etcd import it. Like servertest it is for tests only.
//
// A test binary that imports it becomes an etcd member, before any test runs, when its
// environment carries a member's configuration: that is how StartCluster starts its
// members.
package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/etcdmember"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// New starts a single-member embedded etcd for one test (etcdmember.Start) and
// closes it at the test's cleanup. It fails the test if the server does not start.
func New(t testing.TB) *etcdmember.Server {
	t.Helper()
	return servertest.ForTest(t, etcdmember.Start)
}

// memberEnv carries a member's Config (JSON) to a child process of the test binary.
const memberEnv = "FENCE_ETCDTEST_MEMBER"

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
		fmt.Fprintf(os.Stderr, "etcdtest: etcd member: bad %s: %v\n", memberEnv, err)
		os.Exit(3)
	}
	cfg, err := m.Embed()
	if err == nil {
		// Serve until killed (the parent's SIGKILL, or its death via Pdeathsig).
		err = etcdmember.Serve(context.Background(), cfg)
	}
	fmt.Fprintf(os.Stderr, "etcdtest: etcd member %s: %v\n", m.Name, err)
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
		return nil, fmt.Errorf("etcdtest: cluster: %w", err)
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
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	return &Cluster{Cluster: c, Dir: dir}, nil
}

// NewCluster starts an n-member cluster for one test (see StartCluster) and closes it
// at the test's cleanup. It fails the test if the cluster does not start.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return servertest.ForTest(t, func() (*Cluster, error) { return StartCluster(n) })
}

// Close kills every member and removes the cluster's directory. It is idempotent.
func (c *Cluster) Close() {
	c.once.Do(func() {
		c.Cluster.Close()
		os.RemoveAll(c.Dir)
	})
}
