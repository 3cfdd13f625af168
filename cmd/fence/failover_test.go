package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
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

	job := exec.Command(cli.bin, "lock", name, "--ttl", "3s", "--wait", "10s", "--",
		"sh", "-c", `echo "started $FENCE_TOKEN $FENCE_SERVER"; sleep 6; echo "finished $FENCE_TOKEN"; exit 7`)
	job.Env = append(cleanEnv(), "FENCE_SERVER="+servers)
	var stderr bytes.Buffer
	job.Stderr = &stderr
	out, err := job.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = job.Process.Kill() }) // after Wait, harmless
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var token string
	select {
	case line := <-lines:
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "started" || f[2] != servers {
			t.Fatalf("job's first line: want %q, got %q (stderr: %s)", "started TOKEN "+servers, line, stderr.String())
		}
		token = f[1]
	case <-time.After(20 * time.Second):
		t.Fatalf("job did not start within 20s; stderr: %s", stderr.String())
	}

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

	done := make(chan error, 1)
	go func() { done <- job.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("job did not end within 30s; stderr: %s", stderr.String())
	}
	var rest []string
	for line := range lines {
		rest = append(rest, line)
	}
	if code := job.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("job under fence lock across the kill: want its own exit status 7, got %d (%v)\nstdout after start: %q\nstderr: %s\nsurvivor's log:\n%s",
			code, err, rest, stderr.String(), survivorLog())
	}
	if want := "finished " + token; len(rest) != 1 || rest[0] != want {
		t.Fatalf("job's output after start: want [%q], got %q", want, rest)
	}
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
