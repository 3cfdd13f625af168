package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/servers"
)

// testCluster is a cluster of `fence serve --node` processes on 127.0.0.1.
type testCluster struct {
	t        testing.TB
	dir      string
	peers    string              // the --peers flag
	names    []string            // node names, "n0", "n1", ...
	extra    []string            // flags every node gets
	extraFor map[string][]string // flags of one node
	mu       sync.Mutex
	procs    map[string]*serveProc // the running node of each name
}

// startCluster starts n nodes at once on free ports, with extra flags, and
// stops them in t.Cleanup.
func startCluster(t testing.TB, n int, extra ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir(), extra: extra, procs: map[string]*serveProc{}}
	c.peers, c.names = clusterPeers(t, n)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.procs {
			p.kill()
		}
	})
	c.start(c.names...)
	return c
}

// clusterPeers returns a --peers flag of n nodes ("n0", ...) on free ports of
// 127.0.0.1, and their names.
func clusterPeers(t testing.TB, n int) (string, []string) {
	t.Helper()
	var entries, names []string
	for i := 0; i < n; i++ {
		port, err := servers.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("n%d", i)
		names = append(names, name)
		entries = append(entries, fmt.Sprintf("%s=127.0.0.1:%d", name, port))
	}
	return strings.Join(entries, ","), names
}

// start starts the named nodes at once (each waits for a majority before it
// listens) and waits until all listen.
func (c *testCluster) start(names ...string) {
	c.t.Helper()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append([]string{"--node", name, "--peers", c.peers}, c.extra...)
			args = append(args, c.extraFor[name]...)
			p, err := startServe(filepath.Join(c.dir, name), args...)
			errs[i] = err
			if err == nil {
				c.mu.Lock()
				c.procs[name] = p
				c.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Fatalf("node %s: %v", names[i], err)
		}
	}
}

// node returns the running process of name.
func (c *testCluster) node(name string) *serveProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

// kill kills name with SIGKILL, like a crashed machine.
func (c *testCluster) kill(name string) {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	p.kill()
}

// stop stops name with SIGTERM, as an operator or a service manager does, and
// returns its exit error and how long the graceful stop took.
func (c *testCluster) stop(name string) (time.Duration, error) {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	start := time.Now()
	err := p.stop()
	return time.Since(start), err
}

// grant is an acquire's answer.
type grant struct {
	Token uint64 `json:"token"`
	Lease string `json:"lease"`
	Code  string `json:"code"`
	Error string `json:"error"`
}

// acquire asks the server at url for name, waiting up to wait, and returns the
// status and answer.
func acquire(t testing.TB, url, name string, wait time.Duration) (int, grant) {
	t.Helper()
	body := fmt.Sprintf(`{"ttl_ms":10000,"wait_ms":%d}`, wait.Milliseconds())
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post(url+"/v1/locks/"+name+"/acquire", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("acquire %s at %s: %v", name, url, err)
	}
	defer resp.Body.Close()
	var g grant
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		t.Fatalf("acquire %s at %s: %d, %v", name, url, resp.StatusCode, err)
	}
	return resp.StatusCode, g
}

// mustAcquire acquires name at url at once, failing the test otherwise.
func mustAcquire(t *testing.T, url, name string) grant {
	t.Helper()
	code, g := acquire(t, url, name, 0)
	if code != http.StatusOK {
		t.Fatalf("acquire %s at %s: got %d %+v; want 200", name, url, code, g)
	}
	return g
}

func TestServeCluster_MinorityAnswers503_RestartedNodesRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := startCluster(t, 3)
	n0 := c.node("n0").url
	g1 := mustAcquire(t, n0, "job")
	g2 := mustAcquire(t, c.node("n1").url, "other")
	if g2.Token <= g1.Token {
		t.Fatalf("tokens: got %d then %d; want them rising", g1.Token, g2.Token)
	}

	// Two of three killed: the survivor grants nothing and answers 503 in bounded time.
	c.kill("n1")
	c.kill("n2")
	for _, name := range []string{"fresh", "job"} {
		start := time.Now()
		code, g := acquire(t, n0, name, time.Second)
		took := time.Since(start)
		t.Logf("acquire %q without a majority: %d %s after %v", name, code, g.Code, took)
		if code != http.StatusServiceUnavailable || g.Code != "unavailable" || took > 5*time.Second {
			t.Fatalf("acquire %q without a majority: got %d %+v after %v; want 503 unavailable within 5s", name, code, g, took)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, n0+"/v1/kv/k", bytes.NewReader([]byte("v")))
	req.Header.Set("Fence-Token", fmt.Sprint(g1.Token))
	req.Header.Set("Fence-Lock", "job")
	req.Header.Set("Fence-Lease", g1.Lease)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("fenced write without a majority: got %d; want 503", resp.StatusCode)
	}

	// Restarted on their data with the same flags, they rejoin; tokens keep rising.
	c.start("n1", "n2")
	// The survivor granted nothing: the name it refused is free at once (this
	// cluster has no spare etcd lease, so the refused acquire stopped at its
	// lease grant and no grant of it can commit late).
	if code, g := acquire(t, c.node("n1").url, "fresh", 0); code != http.StatusOK || g.Token <= g2.Token {
		t.Fatalf("after the rejoin, the name refused without a majority: got %d %+v; want it granted at once, token above %d", code, g, g2.Token)
	}
	last := g2.Token
	for _, name := range c.names {
		var g grant
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, got := acquire(t, c.node(name).url, "after-"+name, 0)
			if code == http.StatusOK {
				g = got
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("acquire on %s after the restart: got %d %+v for 10s; want 200", name, code, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if g.Token <= last {
			t.Fatalf("token on %s after the restart: got %d; want above %d", name, g.Token, last)
		}
		last = g.Token
	}
}

func TestServeCluster_FlagMistakesAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "a"}, "--node needs --peers"},
		{[]string{"--peers", "a=127.0.0.1:1"}, "needs --node"},
		{[]string{"--node", "d", "--peers", "a=127.0.0.1:1,b=127.0.0.1:2"}, "not in --peers"},
		{[]string{"--node", "a", "--peers", "a=127.0.0.1:1", "--store", "etcd://127.0.0.1:2379"}, "do not go together"},
		{[]string{"--node", "a", "--peers", "a=127.0.0.1:1,a=127.0.0.1:2"}, "named twice"},
		{[]string{"--node", "a", "--peers", "a=127.0.0.1"}, "HOST:PORT"},
		{[]string{"--node", "a", "--peers", "a=127.0.0.1:1", "--peer-cert", "x.pem"}, "go together"},
		{[]string{"--node", "a", "--peers", "a=127.0.0.1:1", "--heartbeat", "100ms", "--election-timeout", "200ms"}, "at least 5 times"},
	} {
		args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		r := runFence(t, "", nil, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("fence %s: got exit %d, stderr %q; want exit 2 saying %q", strings.Join(args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// clusterStatus runs `fence cluster status -o json` against server.
func clusterStatus(t testing.TB, server string) []fencehttp.ClusterMember {
	t.Helper()
	r := runFence(t, server, nil, "", "cluster", "status", "-o", "json")
	wantCode(t, "fence cluster status -o json", r, 0)
	var st fencehttp.ClusterStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("fence cluster status -o json: %v\n%s", err, r.stdout)
	}
	return st.Members
}

// waitMembers polls `fence cluster status -o json` at server until ok accepts
// the members, for up to 15 s.
func waitMembers(t testing.TB, server string, ok func([]fencehttp.ClusterMember) bool) []fencehttp.ClusterMember {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ms := clusterStatus(t, server)
		if ok(ms) {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster status at %s not as expected within 15s: %+v", server, ms)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// healthy accepts n members, all healthy, one of them the leader.
func healthy(n int) func([]fencehttp.ClusterMember) bool {
	return func(ms []fencehttp.ClusterMember) bool {
		h, l := 0, 0
		for _, m := range ms {
			if m.Healthy {
				h++
			}
			if m.Leader {
				l++
			}
		}
		return len(ms) == n && h == n && l == 1
	}
}

func leaderOf(ms []fencehttp.ClusterMember) string {
	for _, m := range ms {
		if m.Leader {
			return m.Name
		}
	}
	return ""
}

func TestServeCluster_LeaderKilled_SurvivorGrants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := startCluster(t, 3)
	ms := waitMembers(t, c.node("n0").url, healthy(3))
	for _, m := range ms {
		if want := c.node(m.Name).url; m.API != want {
			t.Errorf("member %s: api %q; want %q", m.Name, m.API, want)
		}
	}
	last := uint64(0)
	rising := func(g grant, where string) {
		t.Helper()
		if g.Token <= last {
			t.Fatalf("token %s: got %d; want above %d", where, g.Token, last)
		}
		last = g.Token
	}
	for _, name := range c.names {
		rising(mustAcquire(t, c.node(name).url, "before-"+name), "before the kill, on "+name)
	}

	leader := leaderOf(ms)
	survivor := "n0"
	if leader == survivor {
		survivor = "n1"
	}
	url := c.node(survivor).url
	killed := time.Now()
	c.kill(leader)
	var g grant
	for {
		code, got := acquire(t, url, "fresh-after-leader-kill", 3*time.Second)
		if code == http.StatusOK {
			g = got
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("no grant on %s within 10s of killing the leader %s: last %d %+v", survivor, leader, code, got)
		}
	}
	// How soon is BenchmarkServeCluster_LeaderKillFailover's figure (issue 31's
	// bar: 2 s); the test asks only that a survivor grants, within 10 s.
	t.Logf("leader %s killed with -9: a fresh name granted on %s after %v (token %d)", leader, survivor, time.Since(killed), g.Token)
	rising(g, "after the leader's kill")

	after := waitMembers(t, url, func(ms []fencehttp.ClusterMember) bool {
		for _, m := range ms {
			if m.Name == leader && m.Healthy || m.Leader && m.Name == leader {
				return false
			}
		}
		return leaderOf(ms) != ""
	})
	t.Logf("status after the kill: %+v", after)

	c.start(leader)
	waitMembers(t, url, healthy(3))
	for _, name := range c.names {
		rising(mustAcquire(t, c.node(name).url, "after-rejoin-"+name), "after the rejoin, on "+name)
	}
}

// A node stopped with SIGTERM exits 0. The leader stopped alone hands its
// leadership over first, so a survivor grants; when every node is stopped at
// once nobody can take it, and each still exits 0. How long that takes (it was
// 6 s: etcd's own transfer bound of 5 s plus two election timeouts) is
// BenchmarkServeCluster_StopAll's figure.
func TestServeCluster_GracefulStops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := startCluster(t, 3)
	leader := leaderOf(waitMembers(t, c.node("n0").url, healthy(3)))
	survivor := "n0"
	if leader == survivor {
		survivor = "n1"
	}
	took, err := c.stop(leader)
	if err != nil {
		t.Fatalf("leader %s stopped alone: %v; want exit 0", leader, err)
	}
	t.Logf("leader %s stopped alone in %v", leader, took)
	if code, g := acquire(t, c.node(survivor).url, "after-leader-stop", 3*time.Second); code != http.StatusOK {
		t.Fatalf("acquire on %s after the leader's graceful stop = %d %+v; want 200", survivor, code, g)
	}
	c.start(leader)
	waitMembers(t, c.node(survivor).url, healthy(3))
	slowest, errs := c.stopAll()
	for name, err := range errs {
		t.Errorf("node %s stopped with the others: %v; want exit 0", name, err)
	}
	t.Logf("all three stopped at once within %v", slowest)
}

// stopAll stops every running node with SIGTERM at once and returns how long the
// slowest took, and the exit errors by node name.
func (c *testCluster) stopAll() (time.Duration, map[string]error) {
	c.mu.Lock()
	names := slices.Collect(maps.Keys(c.procs))
	c.mu.Unlock()
	type stopped struct {
		name string
		took time.Duration
		err  error
	}
	got := make(chan stopped, len(names))
	for _, name := range names {
		go func() {
			took, err := c.stop(name)
			got <- stopped{name, took, err}
		}()
	}
	var slowest time.Duration
	errs := map[string]error{}
	for range names {
		s := <-got
		slowest = max(slowest, s.took)
		if s.err != nil {
			errs[s.name] = s.err
		}
	}
	return slowest, errs
}

// BenchmarkServeCluster_StopAll measures how long three nodes take to exit when
// all get SIGTERM at once (the slowest, the leader, whose hand-over nobody can
// take: about 1 s, bounded by two election timeouts; 6 s before that bound).
//
//	go test -run '^$' -bench StopAll -benchtime 3x ./cmd/fence/
func BenchmarkServeCluster_StopAll(b *testing.B) {
	var total time.Duration
	for range b.N {
		c := startCluster(b, 3)
		waitMembers(b, c.node("n0").url, healthy(3))
		slowest, errs := c.stopAll()
		for name, err := range errs {
			b.Fatalf("node %s: %v; want exit 0", name, err)
		}
		total += slowest
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/stop")
}

// BenchmarkServeCluster_LeaderKillFailover measures how soon a survivor grants
// a fresh name after the leader of three nodes (default timing) is killed with
// -9 (issue 31's bar: within 2 s). Each op kills the current leader, times the
// first grant through another node, then restarts the killed node and waits
// until all three are healthy; ms/failover is the mean time to that grant.
//
//	go test -run '^$' -bench LeaderKillFailover -benchtime 10x ./cmd/fence/
func BenchmarkServeCluster_LeaderKillFailover(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a three-node cluster")
	}
	c := startCluster(b, 3)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		ms := waitMembers(b, c.node(c.names[0]).url, healthy(3))
		leader := leaderOf(ms)
		survivor := c.names[0]
		if survivor == leader {
			survivor = c.names[1]
		}
		url := c.node(survivor).url
		killed := time.Now()
		c.kill(leader)
		for {
			code, got := acquire(b, url, fmt.Sprintf("bench-failover-%d", i), 3*time.Second)
			if code == http.StatusOK {
				break
			}
			if time.Since(killed) > 10*time.Second {
				b.Fatalf("no grant on %s within 10s of killing the leader %s: last %d %+v", survivor, leader, code, got)
			}
		}
		total += time.Since(killed)
		c.start(leader)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/failover")
}

func TestServeCluster_FiveNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a five-node cluster")
	}
	c := startCluster(t, 5)
	ms := waitMembers(t, c.node("n4").url, healthy(5))
	if len(ms) != 5 {
		t.Fatalf("five nodes: got %d members", len(ms))
	}
	r := runFence(t, c.node("n2").url, nil, "", "cluster", "status")
	wantCode(t, "fence cluster status", r, 0)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 6 || !strings.HasPrefix(lines[0], "NAME") || strings.Count(r.stdout, "leader") != 1 {
		t.Fatalf("fence cluster status: want a header, five rows, one leader; got\n%s", r.stdout)
	}
}

func TestServeCluster_AddRemoveBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a four-node cluster")
	}
	c := startCluster(t, 3)
	url := c.node("n0").url
	waitMembers(t, url, healthy(3))
	port, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// etcd takes a new member once the others have been connected a few seconds.
	var r result
	for deadline := time.Now().Add(15 * time.Second); ; {
		r = runFence(t, url, nil, "", "cluster", "add", fmt.Sprintf("n3=127.0.0.1:%d", port))
		if r.code == 0 || time.Now().After(deadline) || !strings.Contains(r.stderr, "unavailable") {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	wantCode(t, "fence cluster add", r, 0)
	want := fmt.Sprintf("fence serve --node n3 --peers %s,n3=127.0.0.1:%d --join", c.peers, port)
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("fence cluster add: want the command line %q in\n%s", want, r.stdout)
	}
	ms := clusterStatus(t, url)
	if len(ms) != 4 || ms[3].Name != "n3" || ms[3].Healthy {
		t.Fatalf("after the add: %+v; want n3 fourth, not yet healthy", ms)
	}
	// Start n3 with the printed command line.
	line := want[len("fence serve "):]
	p, err := startServe(filepath.Join(c.dir, "n3"), strings.Fields(line)...)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.procs["n3"] = p
	c.mu.Unlock()
	waitMembers(t, p.url, healthy(4))
	g := mustAcquire(t, p.url, "on-the-new-node")

	file := filepath.Join(t.TempDir(), "backup.db")
	r = runFence(t, p.url, nil, "", "cluster", "backup", file, "-o", "json")
	wantCode(t, "fence cluster backup", r, 0)
	var b struct {
		File  string `json:"file"`
		Bytes int64  `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || b.File != file || b.Bytes < 1024 {
		t.Fatalf("fence cluster backup -o json: %q (%v); want the file and its size", r.stdout, err)
	}
	data, err := os.ReadFile(file)
	if err != nil || int64(len(data)) != b.Bytes || !bytes.Contains(data, []byte("on-the-new-node")) {
		t.Fatalf("backup file: %d bytes (%v); want %d holding the lock taken (token %d)", len(data), err, b.Bytes, g.Token)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file mode %v; want 0600", fi.Mode().Perm())
	}
	r = runFence(t, p.url, nil, "", "cluster", "backup", file)
	wantCode(t, "fence cluster backup to an existing file", r, 1)

	r = runFence(t, url, nil, "", "cluster", "remove", "n3")
	wantCode(t, "fence cluster remove", r, 0)
	select {
	case <-p.done:
		t.Logf("the removed node exited: %v", p.err)
	case <-time.After(15 * time.Second):
		t.Fatal("the removed node's fence serve did not exit within 15s")
	}
	c.mu.Lock()
	delete(c.procs, "n3")
	c.mu.Unlock()
	waitMembers(t, url, healthy(3))
	r = runFence(t, url, nil, "", "cluster", "remove", "n3")
	if r.code != 1 || !strings.Contains(r.stderr, "n3") {
		t.Fatalf("removing n3 again: exit %d, stderr %q; want 1 naming n3", r.code, r.stderr)
	}
}
