package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// restartState is the part of GET /v1/locks/{name} these tests read.
type restartState struct {
	Held  bool   `json:"held"`
	Token uint64 `json:"token"`
}

func restartLockState(t *testing.T, server, name string) restartState {
	t.Helper()
	body, err := httpGet(server + "/v1/locks/" + url.PathEscape(name))
	if err != nil {
		t.Fatalf("GET lock %q: %v", name, err)
	}
	var st restartState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("GET lock %q: not the lock state JSON: %v: %s", name, err, body)
	}
	return st
}

// restartServe starts `fence serve` on addr and data, retrying briefly if the
// port is not free yet, and returns it with how long it took to listen.
func restartServe(t *testing.T, data, addr string) (*serveProc, time.Duration) {
	t.Helper()
	start := time.Now()
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		p, err := startServe(data, "--listen", addr)
		if err == nil {
			return p, time.Since(start)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("fence serve on %s did not start: %v", addr, last)
	return nil, 0
}

// TestServe_Kill9UnderRunningLock_JobSurvivesAndExitsWithItsStatus runs a job of
// 8s under `fence lock --ttl 3s` and, while it runs, kills the server with
// SIGKILL and restarts it, then stops it cleanly (SIGTERM) and restarts it. The
// lease is honoured across both restarts (same token, renewed by the running
// `fence lock`), a name nobody held is granted at once after the kill, and the
// job ends with its own status (7), not 76 (lease lost).
func TestServe_Kill9UnderRunningLock_JobSurvivesAndExitsWithItsStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("restart test: runs an 8s job")
	}
	// A fixed address, so that a restarted server listens where the running
	// `fence lock` renews.
	data, addr := t.TempDir(), freeAddr(t)
	p, _ := restartServe(t, data, addr)
	defer func() { p.stop() }()
	server := p.url
	name := fmt.Sprintf("%s/job", t.Name())

	job := startLockJob(t, server, name, 8*time.Second)
	token := job.token
	if st := restartLockState(t, server, name); !st.Held || fmt.Sprint(st.Token) != token {
		t.Fatalf("before the kill: want %q held with token %s, got %+v", name, token, st)
	}

	// Past the first renewal (at 1s), kill -9 the server and restart it at once.
	time.Sleep(1200 * time.Millisecond)
	killed := time.Now()
	p.kill()
	p, took := restartServe(t, data, addr)
	t.Logf("kill -9 to listening again: %v (fence serve start: %v)", time.Since(killed).Round(time.Millisecond), took.Round(time.Millisecond))
	if st := restartLockState(t, server, name); !st.Held || fmt.Sprint(st.Token) != token {
		t.Fatalf("right after kill -9 and restart: want %q held with token %s, got %+v", name, token, st)
	}
	// A name nobody held is granted at once, and the held one is refused.
	fresh := fmt.Sprintf("%s/fresh", t.Name())
	asked := time.Now()
	wantCode(t, "acquire of a fresh name right after kill -9", runFence(t, server, nil, "", "acquire", fresh, "--wait", "0"), 0)
	t.Logf("fresh name granted %v after the restart, the call took %v", time.Since(killed).Round(time.Millisecond), time.Since(asked).Round(time.Millisecond))
	wantCode(t, "acquire of the job's lock right after kill -9", runFence(t, server, nil, "", "acquire", name, "--wait", "0"), exitNotAcquired)

	// Past another renewal, a clean restart.
	time.Sleep(1500 * time.Millisecond)
	if err := p.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.log())
	}
	p, _ = restartServe(t, data, addr)
	if st := restartLockState(t, server, name); !st.Held || fmt.Sprint(st.Token) != token {
		t.Fatalf("after a clean restart: want %q held with token %s, got %+v", name, token, st)
	}

	job.wait(t, "across the restarts", p.log)
	// Released on exit: the next grant is at once and its token greater.
	r := runFence(t, server, nil, "", "-o", "json", "acquire", name, "--wait", "0")
	wantCode(t, "acquire after the job", r, 0)
	var next struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &next); err != nil {
		t.Fatalf("acquire after the job: not the lease JSON: %v: %s", err, r.stdout)
	}
	var tok uint64
	fmt.Sscan(token, &tok)
	if next.Token <= tok {
		t.Fatalf("token after the job: want greater than %d, got %d", tok, next.Token)
	}
}

// lockJob is a `fence lock NAME --ttl 3s` whose job prints "started $FENCE_TOKEN
// $FENCE_SERVER", sleeps, prints "finished $FENCE_TOKEN" and exits 7.
type lockJob struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	lines  chan string // the job's stdout after its first line
	token  string      // its FENCE_TOKEN
}

// startLockJob starts a lockJob on name through servers (FENCE_SERVER) whose
// job sleeps for sleep, and returns once the job has printed its first line,
// which must name servers; it fails the test otherwise, or after 20s.
func startLockJob(t *testing.T, servers, name string, sleep time.Duration) *lockJob {
	t.Helper()
	j := &lockJob{lines: make(chan string, 16)}
	j.cmd = exec.Command(cli.bin, "lock", name, "--ttl", "3s", "--wait", "10s", "--", "sh", "-c",
		fmt.Sprintf(`echo "started $FENCE_TOKEN $FENCE_SERVER"; sleep %g; echo "finished $FENCE_TOKEN"; exit 7`, sleep.Seconds()))
	j.cmd.Env = append(cleanEnv(), "FENCE_SERVER="+servers)
	j.cmd.Stderr = &j.stderr
	out, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.cmd.Process.Kill() }) // after Wait, harmless
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			j.lines <- sc.Text()
		}
		close(j.lines)
	}()
	select {
	case line := <-j.lines:
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "started" || f[2] != servers {
			t.Fatalf("job's first line: want %q, got %q (stderr: %s)", "started TOKEN "+servers, line, j.stderr.String())
		}
		j.token = f[1]
	case <-time.After(20 * time.Second):
		t.Fatalf("job did not start within 20s; stderr: %s", j.stderr.String())
	}
	return j
}

// wait waits up to 30s for the job to end and fails the test unless it exited
// with its own status, 7, after printing only "finished TOKEN". what says what
// the job went through; log is the server log shown on a failure.
func (j *lockJob) wait(t *testing.T, what string, log func() string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- j.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("job did not end within 30s; stderr: %s", j.stderr.String())
	}
	var rest []string
	for line := range j.lines {
		rest = append(rest, line)
	}
	if code := j.cmd.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("job under fence lock %s: want its own exit status 7, got %d (%v)\nstdout after start: %q\nstderr: %s\nserver log:\n%s",
			what, code, err, rest, j.stderr.String(), log())
	}
	if want := "finished " + j.token; len(rest) != 1 || rest[0] != want {
		t.Fatalf("job's output after start: want [%q], got %q", want, rest)
	}
}
