package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// testCluster is a cluster of `fence serve --node` processes on 127.0.0.1.
type testCluster struct {
	t     *testing.T
	dir   string
	peers string   // the --peers flag
	names []string // node names, "n0", "n1", ...
	extra []string // flags every node gets
	mu    sync.Mutex
	procs map[string]*serveProc // the running node of each name
}

// startCluster starts n nodes at once on free ports, with extra flags, and
// stops them in t.Cleanup.
func startCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir(), extra: extra, procs: map[string]*serveProc{}}
	var entries []string
	for i := 0; i < n; i++ {
		port, err := servers.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("n%d", i)
		c.names = append(c.names, name)
		entries = append(entries, fmt.Sprintf("%s=127.0.0.1:%d", name, port))
	}
	c.peers = strings.Join(entries, ",")
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

// grant is an acquire's answer.
type grant struct {
	Token uint64 `json:"token"`
	Lease string `json:"lease"`
	Code  string `json:"code"`
	Error string `json:"error"`
}

// acquire asks the server at url for name, waiting up to wait, and returns the
// status and answer.
func acquire(t *testing.T, url, name string, wait time.Duration) (int, grant) {
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
