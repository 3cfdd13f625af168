package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// This file holds the servers and clients of ClusterRows: a three-member etcd whose
// members are processes (this program re-executed, MemberMain), fence serve on it
// (--store etcd://), and three fence serve --node processes forming a cluster of
// their own. Every server is a process of its own, as in production, so that none
// shares the scheduler, heap and garbage collector of the clients measuring it.

// Options are what Start needs beyond the rows.
type Options struct {
	// Fence is the path of the fence binary, run as fence serve by the rows
	// fence-serve-etcd3, cluster and cluster-leader (NeedsFence); other rows do
	// not need it.
	Fence string
}

// fenceRows are the rows that run the fence binary.
var fenceRows = []string{RowFenceServeEtcd3, RowCluster, RowClusterLeader}

// NeedsFence reports whether any of rows runs the fence binary (Options.Fence).
func NeedsFence(rows []string) bool {
	return slices.ContainsFunc(rows, func(r string) bool { return slices.Contains(fenceRows, r) })
}

// memberEnv carries an etcd member's configuration (JSON of etcdmember.Config) to
// this program re-executed as that member.
const memberEnv = "FENCE_BENCH_ETCD_MEMBER"

// MemberMain makes this process an etcd member of the cluster rows when its
// environment carries a member's configuration (Start re-executes the program so
// for RowEtcd3Mutex and RowFenceServeEtcd3): it then serves the member until the
// process is killed and exits, never returning. Otherwise it returns at once. A
// program that starts those rows calls it first thing in main (a test binary: in
// TestMain).
func MemberMain() {
	raw, ok := os.LookupEnv(memberEnv)
	if !ok {
		return
	}
	var m etcdmember.Config
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		fmt.Fprintf(os.Stderr, "fence-bench: etcd member: bad %s: %v\n", memberEnv, err)
		os.Exit(3)
	}
	cfg, err := m.Embed()
	if err == nil {
		// Serve until killed (the parent's SIGKILL, or its death via Pdeathsig).
		err = etcdmember.Serve(context.Background(), cfg)
	}
	fmt.Fprintf(os.Stderr, "fence-bench: etcd member %s: %v\n", m.Name, err)
	os.Exit(3)
}

// startEtcd3 starts the three-member etcd of the cluster rows, each member this
// program re-executed (MemberMain), on free ports of 127.0.0.1.
func (e *Env) startEtcd3(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	command := func(m etcdmember.Config) *exec.Cmd {
		raw, _ := json.Marshal(m) // plain strings and a bool: cannot fail
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), memberEnv+"="+string(raw))
		return cmd
	}
	e.etcd3, err = etcdmember.StartCluster(ctx, filepath.Join(e.dir, "etcd3"), "fence-bench-"+filepath.Base(e.dir), 3, command)
	if err != nil {
		return err
	}
	e.etcd3Follower, e.etcd3Leader, err = etcd3Roles(ctx, e.etcd3.Endpoints())
	return err
}

// etcd3Roles returns the first of endpoints whose member is not the leader, and
// the leader's, as the members' Status tells, for RowEtcd3MutexFollower and
// RowEtcd3MutexLeader.
func etcd3Roles(ctx context.Context, endpoints []string) (follower, leader string, err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", "", err
	}
	defer cli.Close()
	for _, ep := range endpoints {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return "", "", fmt.Errorf("status of %s: %w", ep, err)
		}
		switch {
		case st.Leader == st.Header.MemberId:
			leader = ep
		case follower == "":
			follower = ep
		}
	}
	if follower == "" || leader == "" {
		return "", "", fmt.Errorf("members %v: no leader and follower among them", endpoints)
	}
	return follower, leader, nil
}

// etcd3Hosts returns the members' client addresses, HOST:PORT.
func (e *Env) etcd3Hosts() []string {
	var hosts []string
	for _, m := range e.etcd3.Members {
		hosts = append(hosts, strings.TrimPrefix(m.ClientURL, "http://"))
	}
	return hosts
}

// startServeEtcd3 runs `fence serve --store etcd://` on the three-member etcd.
func (e *Env) startServeEtcd3(fenceBin string) error {
	url, p, err := startFenceServe(fenceBin, filepath.Join(e.dir, "serve-etcd3"), "fence serve etcd3",
		"--store", "etcd://"+strings.Join(e.etcd3Hosts(), ","))
	if err != nil {
		return err
	}
	e.procs = append(e.procs, p)
	e.serveEtcd3URL = url
	return p.WaitReady(func() error { return healthz(url) })
}

// startCluster runs three `fence serve --node` processes forming a cluster on free
// ports of 127.0.0.1, with the default timing, waits until each answers /healthz
// and one is the leader, and sets the server lists of the cluster rows' clients.
func (e *Env) startCluster(ctx context.Context, fenceBin string) error {
	names := []string{"n0", "n1", "n2"}
	var peers []string
	for _, n := range names {
		port, err := servers.FreePort()
		if err != nil {
			return err
		}
		peers = append(peers, fmt.Sprintf("%s=127.0.0.1:%d", n, port))
	}
	var started []*servers.Process
	for _, n := range names {
		url, p, err := startFenceServe(fenceBin, filepath.Join(e.dir, "cluster-"+n), "fence serve --node "+n,
			"--node", n, "--peers", strings.Join(peers, ","))
		if err != nil {
			return err
		}
		e.procs = append(e.procs, p)
		started = append(started, p)
		e.clusterURLs = append(e.clusterURLs, url)
	}
	for i, p := range started {
		url := e.clusterURLs[i]
		if err := p.WaitReady(func() error { return healthz(url) }); err != nil {
			return err
		}
	}
	leader, err := clusterLeader(ctx, e.clusterURLs)
	if err != nil {
		return err
	}
	// RowCluster's clients are given the nodes in an order that starts at a
	// follower and ends at the leader, so that every request goes to a node that
	// forwards its writes to the leader; RowClusterLeader's start at the leader.
	others := slices.DeleteFunc(slices.Clone(e.clusterURLs), func(u string) bool { return u == leader })
	e.clusterFollowerFirst = strings.Join(append(others, leader), ",")
	e.clusterLeaderFirst = strings.Join(append([]string{leader}, others...), ",")
	return nil
}

// clusterLeader asks the nodes at urls, every 50 ms until ctx ends or
// servers.StartTimeout passes, which of them is the leader, and returns its URL
// once one of them knows.
func clusterLeader(ctx context.Context, urls []string) (string, error) {
	c, err := fencehttp.NewClient(strings.Join(urls, ","), nil)
	if err != nil {
		return "", err
	}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(servers.StartTimeout)
	for {
		members, err := c.ClusterStatus(ctx)
		for _, m := range members {
			if m.Leader && slices.Contains(urls, m.API) {
				return m.API, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no leader among %v after %v (last: %v, %+v)", urls, servers.StartTimeout, err, members)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startFenceServe starts `fence serve` with args in dir (created; its data and log
// there) on a free port of 127.0.0.1 and returns its URL and process, without
// waiting for it to serve.
func startFenceServe(fenceBin, dir, name string, args ...string) (string, *servers.Process, error) {
	if fenceBin == "" {
		return "", nil, fmt.Errorf("bench: %w: %s needs the fence binary (Options.Fence, --fence)", fence.ErrInvalid, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	port, err := servers.FreePort()
	if err != nil {
		return "", nil, err
	}
	args = append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--data", filepath.Join(dir, "data"), "--log-level", "warn"}, args...)
	p, err := servers.StartProcess(name, fenceBin, args, filepath.Join(dir, "serve.log"), nil)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port), p, nil
}

// healthz returns nil once the fence server at url answers GET /healthz with 200.
func healthz(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/healthz: %s", url, resp.Status)
	}
	return nil
}

// newClusterRowClient returns a client of one of ClusterRows.
func (e *Env) newClusterRowClient(row string) (Client, error) {
	switch row {
	case RowEtcd3Mutex, RowEtcd3MutexFollower, RowEtcd3MutexLeader:
		if e.etcd3 == nil {
			return nil, fmt.Errorf("bench: %s: no three-member etcd started", row)
		}
		endpoints := e.etcd3.Endpoints()
		switch row {
		case RowEtcd3MutexFollower:
			endpoints = []string{e.etcd3Follower}
		case RowEtcd3MutexLeader:
			endpoints = []string{e.etcd3Leader}
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(lockTTL/time.Second)))
		if err != nil {
			cli.Close()
			return nil, err
		}
		return &etcdMutexClient{cli: cli, sess: sess}, nil
	case RowFenceServeEtcd3:
		if e.serveEtcd3URL == "" {
			return nil, fmt.Errorf("bench: %s: no fence serve --store etcd:// started", row)
		}
		return newHTTPClient(e.serveEtcd3URL)
	case RowCluster, RowClusterLeader:
		if len(e.clusterURLs) == 0 {
			return nil, fmt.Errorf("bench: %s: no cluster started", row)
		}
		if row == RowClusterLeader {
			return newHTTPClient(e.clusterLeaderFirst)
		}
		return newHTTPClient(e.clusterFollowerFirst)
	}
	return nil, fmt.Errorf("bench: %w: unknown row %q", fence.ErrInvalid, row)
}

// newHTTPClient returns a client of fence serve at url over HTTP (fencehttp).
func newHTTPClient(url string) (Client, error) {
	c, err := fencehttp.NewClient(url, nil)
	if err != nil {
		return nil, err
	}
	return &lockerClient{l: c, close: func() error { c.CloseIdleConnections(); return nil }}, nil
}

// Abandoner is a Client whose holder can stop without releasing: the handoff after
// an expiry (Expiry) is measured on the rows whose clients are Abandoners.
type Abandoner interface {
	// Abandon takes the lock name with ttl and returns once it holds it, leaving
	// it held, never renewed nor released, as a holder that crashed leaves it. The
	// TTL is counted from no earlier than the call. It returns the library's error.
	Abandon(ctx context.Context, name string, ttl time.Duration) error
}

// Abandon acquires name with ttl and drops the lease (fence leases are renewed
// only when asked).
func (c *lockerClient) Abandon(ctx context.Context, name string, ttl time.Duration) error {
	_, err := c.l.Acquire(ctx, name, ttl)
	return err
}

// Abandon locks name on a session (an etcd lease) of ttl, in whole seconds, made
// for it, then orphans the session: its keep-alives stop, its lease is not revoked,
// so etcd expires it.
func (c *etcdMutexClient) Abandon(ctx context.Context, name string, ttl time.Duration) error {
	secs := int((ttl + time.Second - 1) / time.Second)
	sess, err := concurrency.NewSession(c.cli, concurrency.WithTTL(secs))
	if err != nil {
		return err
	}
	if err := concurrency.NewMutex(sess, "/fence-bench/"+name).Lock(ctx); err != nil {
		return errors.Join(err, sess.Close())
	}
	sess.Orphan()
	return nil
}

// hasExpiry reports whether row measures the handoff after an expiry: the cluster
// rows, whose expiry is what cluster mode changes.
func hasExpiry(row string) bool {
	return slices.Contains(ClusterRows, row)
}
