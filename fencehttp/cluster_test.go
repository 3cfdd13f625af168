package fencehttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/cluster"
	freeport "github.com/fencelock/fence/internal/servers"
)

var _ fencehttp.Cluster = (*cluster.Node)(nil)

// testCluster is the package's three-node cluster (real embedded etcd members,
// in this process), started on first use, and a node that was started and
// closed (every request to it fails: 503). closeTestCluster stops them.
var testCluster struct {
	once   sync.Once
	dir    string
	nodes  []*cluster.Node
	closed *cluster.Node
	err    error
}

// clusterNodes returns a live node of the test cluster and the closed node.
func clusterNodes(t testing.TB) (*cluster.Node, *cluster.Node) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := &testCluster
	c.once.Do(func() { c.err = startTestCluster() })
	if c.err != nil {
		t.Fatalf("test cluster: %v", c.err)
	}
	return c.nodes[0], c.closed
}

func freePeers(n int) (map[string]string, error) {
	p := map[string]string{}
	for i := 0; i < n; i++ {
		port, err := freeport.FreePort()
		if err != nil {
			return nil, err
		}
		p[fmt.Sprintf("n%d", i)] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	return p, nil
}

func startTestCluster() error {
	c := &testCluster
	var err error
	if c.dir, err = os.MkdirTemp("", "fencehttp-cluster-"); err != nil {
		return err
	}
	peers, err := freePeers(3)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.nodes = make([]*cluster.Node, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("n%d", i)
			c.nodes[i], errs[i] = cluster.Start(ctx, cluster.Config{Name: name, Peers: peers,
				Dir: filepath.Join(c.dir, name), APIURL: "http://api-" + name})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	one, err := freePeers(1)
	if err != nil {
		return err
	}
	if c.closed, err = cluster.Start(ctx, cluster.Config{Name: "n0", Peers: one, Dir: filepath.Join(c.dir, "closed")}); err != nil {
		return err
	}
	c.closed.Close()
	// etcd takes a member change only once its members have been connected for
	// a few seconds: wait for that, so the tests' changes go through at once.
	probe, err := freePeers(1)
	if err != nil {
		return err
	}
	for {
		err := c.nodes[0].AddMember(ctx, "probe", probe["n0"])
		if err == nil {
			return c.nodes[0].RemoveMember(ctx, "probe")
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the cluster takes no member change: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// closeTestCluster stops the test cluster, if it was started, and removes its data.
func closeTestCluster() {
	c := &testCluster
	for _, n := range c.nodes {
		if n != nil {
			n.Close()
		}
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// clusterServer serves cfg, with the live test node as its Cluster, and
// returns a client of it with token.
func clusterServer(t *testing.T, cfg fencehttp.Config, token string) *fencehttp.Client {
	t.Helper()
	live, _ := clusterNodes(t)
	cfg.Cluster = live
	if cfg.Locker == nil {
		cfg.Locker = inmem.NewLocker(inmem.Options{})
	}
	_, tg := startTarget(t, cfg)
	c, err := fencehttp.NewClient(tg.url, &fencehttp.ClientOptions{AuthToken: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClient_Cluster_StatusAddRemoveSnapshot(t *testing.T) {
	c := clusterServer(t, fencehttp.Config{}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ms, err := c.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for i, m := range ms {
		if m.Leader {
			leaders++
		}
		if want := fmt.Sprintf("n%d", i); m.Name != want || m.API != "http://api-"+want || m.Peer == "" {
			t.Errorf("member %d: got %+v; want %s with its peer and api URLs", i, m, want)
		}
	}
	if len(ms) != 3 || leaders != 1 {
		t.Fatalf("status: got %+v; want 3 members, one leader", ms)
	}

	peer, err := freePeers(1)
	if err != nil {
		t.Fatal(err)
	}
	after, err := c.AddMember(ctx, "n9", peer["n0"])
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 4 || after[3].Name != "n9" || after[3].Healthy || after[3].Peer != "http://"+peer["n0"] {
		t.Fatalf("after the add: got %+v; want n9 fourth, unhealthy, at %s", after, peer["n0"])
	}
	if _, err := c.AddMember(ctx, "n9", peer["n0"]); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("adding n9 again: got %v; want fence.ErrInvalid", err)
	}
	if after, err = c.RemoveMember(ctx, "n9"); err != nil || len(after) != 3 {
		t.Fatalf("remove n9: got %+v, %v; want the 3 members", after, err)
	}
	if _, err := c.RemoveMember(ctx, "n9"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("removing n9 again: got %v; want fence.ErrNotFound", err)
	}

	var buf bytes.Buffer
	n, err := c.Snapshot(ctx, &buf)
	if err != nil || n != int64(buf.Len()) || !bytes.Contains(buf.Bytes(), []byte("fence/cluster/nodes/n1")) {
		t.Fatalf("snapshot: %d bytes (%d written), %v; want the store, holding the nodes' registrations", n, buf.Len(), err)
	}
}

func TestServer_ClusterRoutes_ScopesAndNotClusterMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Not in cluster mode: 404 not_found on every cluster route.
	_, plain := startTarget(t, fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
	pc, err := fencehttp.NewClient(plain.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.ClusterStatus(ctx); !errors.Is(err, fence.ErrNotFound) {
		t.Errorf("status, not cluster mode: got %v; want fence.ErrNotFound", err)
	}
	if _, err := pc.Snapshot(ctx, &bytes.Buffer{}); !errors.Is(err, fence.ErrNotFound) {
		t.Errorf("snapshot, not cluster mode: got %v; want fence.ErrNotFound", err)
	}
	resp, err := http.Post(plain.url+"/v1/cluster", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /v1/cluster, not cluster mode: got %d; want 404 (no route, not 405)", resp.StatusCode)
	}

	// Scoped tokens: any token reads the members; changes and backups need admin on every name.
	cfg := fencehttp.Config{Tokens: []fencehttp.AuthToken{
		{Secret: []byte("reader"), Rights: fencehttp.RightRead, Names: []string{"x"}},
		{Secret: []byte("nameadmin"), Rights: fencehttp.RightAdmin, Names: []string{"jobs/*"}},
		{Secret: []byte("admin"), Rights: fencehttp.RightsAll},
	}}
	reader := clusterServer(t, cfg, "reader")
	if _, err := reader.ClusterStatus(ctx); err != nil {
		t.Errorf("status with a read token: %v", err)
	}
	live, _ := clusterNodes(t)
	cfg.Cluster, cfg.Locker = live, inmem.NewLocker(inmem.Options{})
	_, tg := startTarget(t, cfg)
	for _, tok := range []string{"reader", "nameadmin"} {
		c, _ := fencehttp.NewClient(tg.url, &fencehttp.ClientOptions{AuthToken: tok})
		if _, err := c.Snapshot(ctx, &bytes.Buffer{}); !errors.Is(err, fencehttp.ErrForbidden) {
			t.Errorf("snapshot with %s: got %v; want ErrForbidden", tok, err)
		}
		if _, err := c.RemoveMember(ctx, "n0"); !errors.Is(err, fencehttp.ErrForbidden) {
			t.Errorf("remove with %s: got %v; want ErrForbidden", tok, err)
		}
	}
	admin, _ := fencehttp.NewClient(tg.url, &fencehttp.ClientOptions{AuthToken: "admin"})
	if _, err := admin.RemoveMember(ctx, "nobody"); !errors.Is(err, fence.ErrNotFound) {
		t.Errorf("remove an unknown member as admin: got %v; want fence.ErrNotFound", err)
	}
	req, _ := http.NewRequest(http.MethodPut, tg.url+"/v1/cluster/members/n0", nil)
	req.Header.Set("Authorization", "Bearer admin")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "DELETE" {
		t.Errorf("PUT of a member: got %d Allow %q; want 405 Allow DELETE", resp.StatusCode, resp.Header.Get("Allow"))
	}
}
