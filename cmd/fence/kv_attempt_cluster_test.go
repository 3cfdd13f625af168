package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Cluster mode: a fenced write's retry is applied through one node, the holder
// writes again through another, and the write's first attempt lands last on a
// third node (a paused node resuming, a retransmit after a partition), with the
// same token and lease. With the write's Fence-Attempt, which every client sends
// on all attempts of a write, the late attempt is answered 200 and writes
// nothing: the holder's later write stays (P3).
func TestServeCluster_LateWriteAttemptOnAnotherNode_LaterWriteStays(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := startCluster(t, 3)
	n0, n1, n2 := c.node("n0").url, c.node("n1").url, c.node("n2").url
	g := mustAcquire(t, n0, "ledger")
	hc := &http.Client{Timeout: 30 * time.Second}
	put := func(node, attempt, value string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, node+"/v1/kv/balance", strings.NewReader(value))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Fence-Token", fmt.Sprint(g.Token))
		req.Header.Set("Fence-Lock", "ledger")
		req.Header.Set("Fence-Lease", g.Lease)
		req.Header.Set("Fence-Attempt", attempt)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("PUT %s through %s: %v", value, node, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(n0, "write-1", "v1"); code != http.StatusOK {
		t.Fatalf("PUT v1 (write 1's retry) through n0: %d; want 200", code)
	}
	if code := put(n1, "write-2", "v2"); code != http.StatusOK {
		t.Fatalf("PUT v2 (write 2) through n1: %d; want 200", code)
	}
	if code := put(n2, "write-1", "v1"); code != http.StatusOK {
		t.Fatalf("PUT v1 (write 1's late first attempt) through n2: %d; want 200 (its write was applied)", code)
	}
	resp, err := hc.Get(n0 + "/v1/kv/balance")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "v2" {
		t.Fatalf("GET after write 1's late first attempt: %d %q; want 200 v2 (the holder's later, acknowledged write)", resp.StatusCode, body)
	}
}
