package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// ttyProc is a running fence binary whose stderr is a terminal (a pseudo-terminal
// the test reads, as a person would see it) and whose stdout is a file.
type ttyProc struct {
	cmd    *exec.Cmd
	lines  chan string   // the terminal's lines, "\r" dropped; closed once it is hung up
	exited chan struct{} // closed when the process has exited
}

// startOnTerminal starts the binary as startFence does, but with stderr on a
// pseudo-terminal; it is killed at the end of the test if still running.
func startOnTerminal(t *testing.T, server string, env []string, args ...string) *ttyProc {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal to run on: %v", err)
	}
	out, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the process has its own copy
	p := &ttyProc{cmd: exec.Command(cli.bin, args...), lines: make(chan string, 100), exited: make(chan struct{})}
	p.cmd.Env = append(append(cleanEnv(), "FENCE_SERVER="+server), env...)
	p.cmd.Stdout, p.cmd.Stderr = out, tty
	err = p.cmd.Start()
	tty.Close() // the process has its own copy: when it exits, reads of ptmx end
	if err != nil {
		ptmx.Close()
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(ptmx)
		for sc.Scan() {
			p.lines <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		ptmx.Close()
	})
	return p
}

// next returns the terminal's next line, failing the test if none comes within
// 30s.
func (p *ttyProc) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s: the terminal was hung up without it", what)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no line on the terminal within 30s", what)
		return ""
	}
}

// finish waits up to 30s for the process to exit and returns its exit status and
// the lines it still wrote on the terminal.
func (p *ttyProc) finish(t *testing.T, what string) (int, []string) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("%s: did not exit within 30s", what)
	}
	var rest []string
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return p.cmd.ProcessState.ExitCode(), rest
			}
			rest = append(rest, l)
		case <-time.After(5 * time.Second):
			return p.cmd.ProcessState.ExitCode(), rest
		}
	}
}

// fence lock waiting on a terminal says who holds the lock (the holder that frees
// a place first), once: not again on a renewal, nor when one of the holders left
// (no other lease holds it); then it takes the lock when it is free.
func TestCLI_Lock_WaitingOnATerminal_SaysWhoHoldsOnce(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	alice := acquireJSON(t, srv, name, "--shared", "--ttl", "1m", "--owner", "alice")
	bob := acquireJSON(t, srv, name, "--shared", "--ttl", "2m", "--owner", "bob")
	p := startOnTerminal(t, srv, nil, "lock", name, "--", "true")
	first := p.next(t, "the waiting line")
	want := regexp.MustCompile(`^waiting for ` + regexp.QuoteMeta(name) + `: held by alice and 1 more, expires in (59|[1-5]\d)\.\ds$`)
	if !want.MatchString(first) {
		t.Fatalf("line on the terminal: want %s, got %q", want, first)
	}
	wantCode(t, "renew alice", runFence(t, srv, nil, "", "renew", name, "--lease", alice.Lease, "--ttl", "1m"), 0)
	wantCode(t, "release alice", runFence(t, srv, nil, "", "release", name, "--lease", alice.Lease), 0)
	time.Sleep(2 * noticeDelay) // time to say something it should not
	wantCode(t, "release bob", runFence(t, srv, nil, "", "release", name, "--lease", bob.Lease), 0)
	code, rest := p.finish(t, "fence lock after the lock was freed")
	if code != 0 || len(rest) != 0 {
		t.Fatalf("fence lock once the lock was free: want exit 0 and no more lines, got %d and %q", code, rest)
	}
}

// The notice of a wait (in process, against the test server) says who holds the
// lock when it starts, again when another lease holds it, not on a renewal, and
// not about our own grant, the one that ends the wait.
func TestWaitNotice_AgainOnlyWhenTheHolderChanges_NeverAboutUs(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	c, err := fencehttp.NewClient(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	alice, err := c.Acquire(ctx, name, time.Minute, fence.WithOwner("alice"))
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	stop := (&waitNotice{w: &out, c: c, name: name, self: "me:42"}).start(ctx)
	defer stop()
	said := func(n int) func() bool { return func() bool { return len(out.lines()) >= n } }
	waitFor(t, "the first line", said(1))
	if err := alice.Renew(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := alice.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bob, err := c.Acquire(ctx, name, 2*time.Minute, fence.WithOwner("bob"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the line about bob", said(2))
	if err := bob.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, name, time.Minute, fence.WithOwner("me:42")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * noticeDelay) // time to say something it should not
	stop()
	got := out.lines()
	want := []string{
		`^waiting for ` + regexp.QuoteMeta(name) + `: held by alice, expires in 59\.\ds$`,
		`^waiting for ` + regexp.QuoteMeta(name) + `: held by bob, expires in 1m5\ds$`,
	}
	if len(got) != len(want) {
		t.Fatalf("notice: want %d lines (alice, then bob), got %q", len(want), got)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(got[i]) {
			t.Errorf("notice line %d: want %s, got %q", i+1, w, got[i])
		}
	}
}

// fence elect campaigning on a terminal says who leads.
func TestCLI_Elect_WaitingOnATerminal_SaysWhoLeads(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	leader := acquireJSON(t, srv, name, "--ttl", "1m", "--owner", "ops-1:77 cron")
	p := startOnTerminal(t, srv, nil, "elect", name, "--", "true")
	line := p.next(t, "the waiting line")
	want := regexp.MustCompile(`^waiting for ` + regexp.QuoteMeta(name) + `: held by ops-1:77 cron, expires in (59|[1-5]\d)\.\ds$`)
	if !want.MatchString(line) {
		t.Fatalf("fence elect's line on the terminal: want %s, got %q", want, line)
	}
	wantCode(t, "release the leader's term", runFence(t, srv, nil, "", "release", name, "--lease", leader.Lease), 0)
	if code, rest := p.finish(t, "fence elect after the term was released"); code != 0 || len(rest) != 0 {
		t.Fatalf("fence elect once leading: want exit 0 and no more lines, got %d and %q", code, rest)
	}
}

// Nothing is said while waiting with --quiet on a terminal, nor without a terminal
// (stderr a file), for fence lock and fence elect alike.
func TestCLI_LockAndElect_Waiting_QuietOrNotATerminal_SayNothing(t *testing.T) {
	srv := cli.serve.url
	for _, cmd := range []string{"lock", "elect"} {
		t.Run(cmd, func(t *testing.T) {
			name := uniqName(t)
			acquireJSON(t, srv, name, "--ttl", "1500ms", "--owner", "alice")
			quiet := startOnTerminal(t, srv, nil, cmd, name, "--quiet", "--", "true")
			notty := startFence(t, srv, nil, cmd, name, "--", "true")
			code, lines := quiet.finish(t, cmd+" --quiet on a terminal")
			if code != 0 || len(lines) != 0 {
				t.Errorf("%s --quiet on a terminal: want exit 0 and nothing on it, got %d and %q", cmd, code, lines)
			}
			if code := notty.wait(t, cmd+" with stderr a file"); code != 0 || notty.stderr.String() != "" {
				t.Errorf("%s with stderr a file: want exit 0 and nothing on stderr, got %d and %q", cmd, code, notty.stderr.String())
			}
		})
	}
}

// A --ttl too short to renew is refused before anything is acquired, naming the
// floor; the help says it.
func TestCLI_LockAndElect_TTLBelowTheRenewFloor_Exit2NamesTheFloor(t *testing.T) {
	for _, args := range [][]string{
		{"lock", uniqName(t), "--ttl", "1ms", "--", "true"},
		{"lock", uniqName(t), "--ttl", "99ms"},
		{"elect", uniqName(t), "--ttl", "1ms", "--", "true"},
	} {
		r := runFence(t, cli.serve.url, nil, "", args...)
		what := fmt.Sprintf("fence %q", args)
		wantCode(t, what, r, exitUsage)
		if line := oneLineStderr(t, what, r); !strings.Contains(line, "--ttl "+args[3]) || !strings.Contains(line, "at least 100ms") {
			t.Errorf("%s: want a line naming --ttl %s and the floor 100ms, got %q", what, args[3], line)
		}
		if s := status(t, cli.serve.url, args[1]); s.LastToken != 0 {
			t.Errorf("%s: want nothing acquired, got %+v", what, s)
		}
	}
	for _, cmd := range []string{"lock", "elect"} {
		if r := runFence(t, cli.serve.url, nil, "", cmd, "--help"); !strings.Contains(r.stdout, "at least 100ms") {
			t.Errorf("fence %s --help: want the --ttl floor (at least 100ms) in it, got:\n%s", cmd, r.stdout)
		}
	}
}

func TestRoundLeft_WhatAPersonReads(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Minute + 59968*time.Millisecond, "1m59s"},
		{time.Minute, "1m0s"},
		{time.Hour + 30*time.Minute + 5500*time.Millisecond, "1h30m5s"},
		{59999 * time.Millisecond, "59.9s"},
		{3250 * time.Millisecond, "3.2s"},
		{time.Second, "1s"},
		{999500 * time.Microsecond, "999ms"},
		{40 * time.Millisecond, "40ms"},
		{0, "0s"},
	} {
		if got := roundLeft(tc.d); got != tc.want {
			t.Errorf("roundLeft(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// fence status shows EXPIRES IN as a person reads it: whole seconds past a minute.
func TestCLI_Status_ExpiresInReadable(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	acquireJSON(t, srv, name, "--ttl", "10m", "--owner", "alice")
	r := runFence(t, srv, nil, "", "status", name)
	wantCode(t, "status", r, 0)
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+true\s+\d+\s+\d+\s+9m5\ds\s+alice$`)
	if !row.MatchString(r.stdout) {
		t.Fatalf("status of a lock held for 10m: want EXPIRES IN as 9m5Ns, got:\n%s", r.stdout)
	}
}
