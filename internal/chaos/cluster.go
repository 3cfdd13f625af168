package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// StoreCluster is fence serve in cluster mode: three `fence serve --node` processes
// of the fence binary, each an embedded etcd member serving the whole API, the
// workers given every node.
const StoreCluster = "cluster"

// clusterNodes is the number of nodes of the cluster store.
const clusterNodes = 3

// The Raft timing of the cluster store's nodes: the same as the etcd store's members
// (etcdmember's), so that etcd's minimum lease TTL is etcdMinTTL there too.
const (
	clusterHeartbeat       = 50 * time.Millisecond
	clusterElectionTimeout = 500 * time.Millisecond
)

// clusterStore runs fence serve as a cluster of clusterNodes nodes.
type clusterStore struct{}

func (clusterStore) name() string  { return StoreCluster }
func (clusterStore) label() string { return fmt.Sprintf("cluster x%d", clusterNodes) }

// node is one node of the cluster store: a fence serve process with its name.
type node struct {
	*server
	name string // "n0", ... as in --node and --peers
	host string // its host in r.command: "node-0", ...
}

// setup makes the nodes (not started: Run starts them together, since none serves
// before a majority of them runs): each listens for the API on a free port of its
// host, for its peers on another, keeps its data and log in the run's folder.
func (clusterStore) setup(_ context.Context, r *run) error {
	var peers []string
	addrs := make([]string, clusterNodes)
	for i := range clusterNodes {
		host := fmt.Sprintf("node-%d", i)
		ip, err := r.hostAddr(host)
		if err != nil {
			return err
		}
		if addrs[i], err = freeAddr(ip); err != nil {
			return err
		}
		peer, err := freeAddr(ip)
		if err != nil {
			return err
		}
		peers = append(peers, fmt.Sprintf("n%d=%s", i, peer))
	}
	for i := range clusterNodes {
		n := &node{name: fmt.Sprintf("n%d", i), host: fmt.Sprintf("node-%d", i)}
		n.server = newServer(r.cfg.Binary, addrs[i], filepath.Join(r.dir, "data-"+n.name), filepath.Join(r.dir, "server-"+n.name+".log"))
		n.server.command = func(bin string, args ...string) *exec.Cmd { return r.command(n.host, bin, args...) }
		n.server.flags = []string{"--node", n.name, "--peers", strings.Join(peers, ","),
			"--heartbeat", clusterHeartbeat.String(), "--election-timeout", clusterElectionTimeout.String()}
		n.server.flags = append(n.server.flags, r.privateNetFlags()...)
		r.nodes = append(r.nodes, n)
	}
	return nil
}

// startNodes starts every node at once and waits until each is healthy. It returns
// the errors of the nodes that did not start.
func (r *run) startNodes() error {
	errs := make([]error, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = n.start(); errs[i] != nil {
				errs[i] = fmt.Errorf("node %s: %w", n.name, errs[i])
			}
		}()
	}
	wg.Wait()
	var msgs []string
	for _, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("chaos: cluster: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// stopNodes ends every node at once with SIGKILL, when the run has read what it
// needed. A graceful stop of all three at once left the last node waiting several
// seconds for peers already gone (6 s measured), in every cell.
func (r *run) stopNodes() {
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.kill()
		}()
	}
	wg.Wait()
}

// clusterMember is one member in the answer of GET /v1/cluster.
type clusterMember struct {
	Name    string `json:"name"`
	Leader  bool   `json:"leader"`
	Healthy bool   `json:"healthy"`
}

// clusterClient asks the nodes about their cluster; it must not hang on a node that
// is paused or cut off.
var clusterClient = &http.Client{Timeout: 500 * time.Millisecond}

// leaderOnce returns the node that a live node reports as the leader, asking the
// live nodes in turn (leaderOf). It returns the last node's error if none answers.
func (r *run) leaderOnce(ctx context.Context) (*node, error) {
	var last error = fmt.Errorf("no node runs")
	for _, n := range r.nodes {
		if !n.life.Alive() {
			continue
		}
		m, err := r.leaderOf(ctx, n)
		if err == nil {
			return m, nil
		}
		last = err
	}
	return nil, last
}

// leaderOf returns the node that n reports as the leader (GET /v1/cluster). It
// returns an error if n does not answer, or answers with no leader, several, or one
// that is not a live node of the run.
func (r *run) leaderOf(ctx context.Context, n *node) (*node, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url()+"/v1/cluster", nil)
	if err != nil {
		return nil, err
	}
	resp, err := clusterClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.name, err)
	}
	var body struct {
		Members []clusterMember `json:"members"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil {
		return nil, fmt.Errorf("node %s: GET /v1/cluster: %s (%v)", n.name, resp.Status, err)
	}
	var leaders []string
	for _, m := range body.Members {
		if m.Leader {
			leaders = append(leaders, m.Name)
		}
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("node %s reports leaders %q", n.name, leaders)
	}
	for _, m := range r.nodes {
		if m.name == leaders[0] && m.life.Alive() {
			return m, nil
		}
	}
	return nil, fmt.Errorf("node %s reports leader %q, not a live node", n.name, leaders[0])
}

// leader returns the cluster's leader (leaderOnce), asking again every 50 ms until
// ctx ends; then it returns an error with the last answer.
func (r *run) leader(ctx context.Context) (*node, error) {
	for {
		n, err := r.leaderOnce(ctx)
		if err == nil {
			return n, nil
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return nil, fmt.Errorf("chaos: cluster leader: %w (last: %v)", ctx.Err(), err)
		}
	}
}
