package main

import (
	"bufio"
	"bytes"
	"fmt"
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
	servers := procs[0].url + "," + procs[1].url
	survivor := procs[1].url
	name := "failover/job"

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
	procs[0].kill()
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
			code, err, rest, stderr.String(), procs[1].log())
	}
	if want := "finished " + token; len(rest) != 1 || rest[0] != want {
		t.Fatalf("job's output after start: want [%q], got %q", want, rest)
	}
	// Released on exit through the survivor: granted again at once.
	wantCode(t, "acquire after the job", runFence(t, survivor, nil, "", "acquire", name, "--wait", "0"), 0)
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
