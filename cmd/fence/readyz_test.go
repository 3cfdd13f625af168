package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readyz is one answer of GET /readyz.
type readyz struct {
	status int
	body   struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Code   string `json:"code"`
	}
	raw string
}

// getReadyz asks url's /readyz, with a client timeout so that a probe never hangs.
func getReadyz(t testing.TB, url string) readyz {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url + "/readyz")
	if err != nil {
		t.Fatalf("GET %s/readyz: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s/readyz: reading the body: %v", url, err)
	}
	r := readyz{status: resp.StatusCode, raw: string(b)}
	if err := json.Unmarshal(b, &r.body); err != nil {
		t.Fatalf("GET %s/readyz: %d, not JSON: %v: %s", url, resp.StatusCode, err, b)
	}
	return r
}

// waitReadyz polls url's /readyz every 50ms until it answers status, for at
// most limit, and returns that answer and how long it took.
func waitReadyz(t testing.TB, url string, status int, limit time.Duration) (readyz, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		r := getReadyz(t, url)
		if r.status == status {
			return r, time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("GET %s/readyz: want %d within %v, still %d %s", url, status, limit, r.status, r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Outside cluster mode a server is ready while it serves.
func TestServe_Readyz_200OutsideClusterMode(t *testing.T) {
	p, err := startServe(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	if r := getReadyz(t, p.url); r.status != http.StatusOK || r.body.Status != "ready" {
		t.Fatalf("readyz of fence serve: want 200 {\"status\":\"ready\"}, got %d %s", r.status, r.raw)
	}
}

// In cluster mode /readyz is 200 on every node of a formed cluster, turns 503
// on a node cut off from the majority (two of three killed) within a few
// election timeouts, saying why, while /healthz stays 200 (the process
// serves), and turns 200 again once a majority is back.
func TestServeCluster_Readyz_503OnANodeCutOffFromTheMajority(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := startCluster(t, 3)
	for _, name := range c.names {
		if r, took := waitReadyz(t, c.node(name).url, http.StatusOK, 10*time.Second); r.body.Status != "ready" {
			t.Fatalf("readyz of %s: want {\"status\":\"ready\"}, got %s after %v", name, r.raw, took)
		}
	}

	n0 := c.node("n0").url
	c.kill("n1")
	c.kill("n2")
	// The default election timeout is 500ms: a follower campaigns, or a leader
	// steps down, within about two of them. 5s leaves room for a loaded machine.
	r, took := waitReadyz(t, n0, http.StatusServiceUnavailable, 5*time.Second)
	t.Logf("readyz of the survivor: 503 after %v: %s", took, r.raw)
	if r.body.Code != "unavailable" || !strings.Contains(r.body.Error, "no leader") {
		t.Fatalf("readyz of the survivor: want code unavailable and a message saying the cluster has no leader, got %s", r.raw)
	}
	if body, err := httpGet(n0 + "/healthz"); err != nil || !strings.Contains(body, `"ok"`) {
		t.Fatalf("healthz of the survivor: want 200 ok (it serves), got %v %s", err, body)
	}

	c.start("n1")
	waitReadyz(t, n0, http.StatusOK, 10*time.Second)
}
