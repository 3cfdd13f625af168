package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/internal/servers/servertest/etcdtest"
)

// TestLock_FailoverServerKilled_JobKeepsRunningAndExitsWithItsStatus runs a job
// of 6s under `fence lock --ttl 3s` with FENCE_SERVER listing two `fence serve
// --store etcd://` servers on one etcd. After the first renewal it kills -9 the
// server the job's `fence lock` talks to (the first: a client sticks to the server
// that answered). The renewals move to the other server, nobody else is granted
// the lock meanwhile, and the job ends with its own status (7), not 76.
func TestLock_FailoverServerKilled_JobKeepsRunningAndExitsWithItsStatus(t *testing.T) {
	servertest.SkipIfShort(t)
	m := etcdtest.New(t)
	store := "etcd://" + strings.TrimPrefix(m.Endpoints[0], "http://") + "/fence-failover-test/"
	var procs []*serveProc
	for range 2 {
		p, err := startServe(t.TempDir(), "--store", store)
		if err != nil {
			t.Fatalf("fence serve --store %s: %v", store, err)
		}
		t.Cleanup(p.kill)
		procs = append(procs, p)
	}
	lockJobAcrossKill(t, procs[0].url+","+procs[1].url, procs[0], procs[1].url, "failover/job", procs[1].log)
}

// TestServeCluster_LockJobKeepsRunningWhenItsNodeIsKilled is the same on a
// cluster: FENCE_SERVER lists the three nodes, and the node `fence lock` talks
// to (the first) is killed with -9 while the job runs.
func TestServeCluster_LockJobKeepsRunningWhenItsNodeIsKilled(t *testing.T) {
	servertest.SkipIfShort(t)
	c := startCluster(t, 3)
	var urls []string
	for _, n := range c.names {
		urls = append(urls, c.node(n).url)
	}
	survivor := c.node(c.names[1])
	lockJobAcrossKill(t, strings.Join(urls, ","), c.node(c.names[0]), survivor.url, "cluster/job", survivor.log)
}

// lockJobAcrossKill runs a job of 6s under `fence lock --ttl 3s` with
// FENCE_SERVER set to servers, kills victim (the first of servers) with -9 after
// the first renewal, checks through survivor, once a second, that the lock stays
// the job's and that nobody else is granted it, and that the job ends with its
// own status, 7. survivorLog is shown when it does not.
func lockJobAcrossKill(t *testing.T, servers string, victim *serveProc, survivor, name string, survivorLog func() string) {
	t.Helper()

	job := startLockJob(t, servers, name, 6*time.Second)
	token := job.token

	// Past the first renewal (at 1s), kill -9 the server `fence lock` uses.
	time.Sleep(1200 * time.Millisecond)
	victim.kill()
	// If the victim led a cluster, the survivor answers 503 until a new leader is
	// elected (about a second): wait for its first answer about the lock.
	waitAnswers(t, survivor+"/v1/locks/"+url.PathEscape(name), 5*time.Second)
	// Through the survivor, the lock stays the job's for the rest of its run
	// (several renewals: one a second) and nobody else is granted it.
	for i := 0; i < 3; i++ {
		if st := restartLockState(t, survivor, name); !st.Held || fmt.Sprint(st.Token) != token {
			t.Fatalf("%v after the kill: want %q held with token %s, got %+v", time.Duration(i)*time.Second, name, token, st)
		}
		wantCode(t, "acquire of the job's lock on the survivor", runFence(t, survivor, nil, "", "acquire", name, "--wait", "0"), exitNotAcquired)
		time.Sleep(time.Second)
	}

	job.wait(t, "across the kill", survivorLog)
	// Released on exit through the survivor: granted again at once.
	wantCode(t, "acquire after the job", runFence(t, survivor, nil, "", "acquire", name, "--wait", "0"), 0)
}

// waitAnswers polls GET u until it answers anything but 503, within limit.
func waitAnswers(t *testing.T, u string, limit time.Duration) {
	t.Helper()
	client := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := client.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: still unavailable after %v (%v)", u, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FENCE_SERVER and --server take a comma-separated list; each entry is checked.
func TestClientFlags_ServerList(t *testing.T) {
	cf := &clientFlags{server: "127.0.0.1:1, http://127.0.0.1:2/,https://h:3"}
	got, err := cf.serverURL()
	if want := "http://127.0.0.1:1,http://127.0.0.1:2,https://h:3"; err != nil || got != want {
		t.Fatalf("serverURL() = %q, %v; want %q", got, err, want)
	}
	c, err := cf.client()
	if err != nil || len(c.Servers()) != 3 {
		t.Fatalf("client() = %v; want a client of 3 servers", err)
	}
	for _, bad := range []string{"127.0.0.1:1,", "127.0.0.1:1,ftp://x:2", ",127.0.0.1:1"} {
		cf := &clientFlags{server: bad}
		if _, err := cf.serverURL(); err == nil || !strings.Contains(err.Error(), "comma-separated") {
			t.Errorf("serverURL() of --server %q = %v; want a usage error about the list", bad, err)
		}
	}
}
