package main

import (
	"bufio"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencelock/fence/internal/servers"
)

// fenceProc is a running fence binary whose stdout the test reads.
type fenceProc struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	stderr fileText
	exited chan struct{} // closed when it has exited
}

// fileText is the path of a file a process writes to; String returns what the file
// holds so far ("" if it cannot be read). The process writes to the file itself, so
// reading it while the process runs is safe.
type fileText string

func (f fileText) String() string {
	b, _ := os.ReadFile(string(f))
	return string(b)
}

// startFence starts the binary with a clean FENCE_* environment pointing at server,
// stdout to a pipe the test reads and stderr to a file; it is killed at the end of
// the test if still running.
func startFence(t testing.TB, server string, env []string, args ...string) *fenceProc {
	t.Helper()
	p := &fenceProc{cmd: exec.Command(cli.bin, args...), stderr: fileText(filepath.Join(t.TempDir(), "stderr")), exited: make(chan struct{})}
	p.cmd.Env = append(append(cleanEnv(), "FENCE_SERVER="+server), env...)
	errf, err := os.Create(string(p.stderr))
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close() // the process has its own copy
	// An os.Pipe of our own, not StdoutPipe: Wait then reaps the process without
	// closing what the test still has to read.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(pr)
	p.cmd.Stdout, p.cmd.Stderr = pw, errf
	p.cmd.WaitDelay = 5 * time.Second
	err = p.cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.alive() {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
		pr.Close()
	})
	return p
}

// wait waits up to 30s for the process to exit and returns its exit status.
func (p *fenceProc) wait(t testing.TB, what string) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("%s: did not exit within 30s", what)
		return -1
	}
}

// within runs f (a read of p's output), killing p if f has not returned within
// 30s, which ends the read.
func (p *fenceProc) within(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("%s: no output within 30s", what)
	}
}

// alive reports whether the process is still running.
func (p *fenceProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// freeAddr returns a 127.0.0.1 port nothing listens on (it was free a moment ago).
func freeAddr(t testing.TB) string {
	t.Helper()
	port, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func oneLineStderr(t testing.TB, what string, r result) string {
	t.Helper()
	line := strings.TrimSuffix(r.stderr, "\n")
	if line == "" || strings.Contains(line, "\n") || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("%s: want one line on stderr, got %q", what, r.stderr)
	}
	if strings.Count(line, "fence: ") != 1 || strings.Contains(line, "fencehttp: ") {
		t.Fatalf("%s: want the one prefix \"fence: \", got %q", what, line)
	}
	return line
}

// Item 6: without --wait, fence lock waits for as long as the lock is held, over
// several of the server's capped long polls, and runs the command once it has it.
func TestCLI_Lock_WaitsByDefault_AcrossCappedPolls(t *testing.T) {
	p, err := startServe(t.TempDir(), "--max-wait", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	name := uniqName(t)
	held := acquireJSON(t, p.url, name, "--ttl", "10m")
	f := startFence(t, p.url, nil, "lock", name, "--", "sh", "-c", `echo "ran $FENCE_TOKEN"`)
	// Several polls come and go (each capped at 200ms by the server) while it waits.
	waitFor(t, "three long polls of the waiter", func() bool { return metric(t, p.url, "fence_waits_total") >= 3 || !f.alive() })
	if !f.alive() {
		t.Fatalf("fence lock gave up on a held lock: exit %d, stderr %q", f.cmd.ProcessState.ExitCode(), f.stderr)
	}
	wantCode(t, "release", runFence(t, p.url, nil, "", "release", name, "--lease", held.Lease), 0)
	var line string
	f.within(t, "the command's output", func() { line, _ = f.out.ReadString('\n') })
	if code := f.wait(t, "fence lock"); code != 0 {
		t.Fatalf("fence lock after the release: want exit 0, got %d (stderr %q)", code, f.stderr)
	}
	want := fmt.Sprintf("ran %d\n", held.Token+1)
	if line != want {
		t.Fatalf("the command's output: want %q (run with the next token), got %q", want, line)
	}
}

// Item 6: --wait bounds the wait (75) and --wait 0 tries once; the message says
// each fact once.
func TestCLI_Lock_WaitBoundedOrZero_75_OneFactOnce(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	acquireJSON(t, srv, name, "--ttl", "10m")
	for _, wait := range []string{"0", "300ms"} {
		start := time.Now()
		r := runFence(t, srv, nil, "", "lock", name, "--wait", wait, "--", "sh", "-c", "echo ran")
		wantCode(t, "lock --wait "+wait+" of a held lock", r, exitNotAcquired)
		if strings.Contains(r.stdout, "ran") {
			t.Fatalf("lock --wait %s: the command ran without the lock", wait)
		}
		line := oneLineStderr(t, "lock --wait "+wait, r)
		if want := fmt.Sprintf("fence: lock %q is held (expires in ", name); !strings.HasPrefix(line, want) || strings.Count(line, name) != 1 {
			t.Fatalf("lock --wait %s: want %q..., naming the lock once, got %q", wait, want, line)
		}
		if wait == "300ms" && !strings.HasSuffix(line, "; not acquired within --wait 300ms") {
			t.Fatalf("lock --wait 300ms: want the wait that ran out at the end, got %q", line)
		}
		if d := time.Since(start); wait == "300ms" && d < 300*time.Millisecond {
			t.Fatalf("lock --wait 300ms gave up after %v", d)
		}
	}
}

// Item 6: a signal while waiting ends fence lock with 128+N and no command run;
// issue 15 item 4: and so it ends fence elect's campaign.
func TestCLI_Lock_SignalWhileWaiting_143And130(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	acquireJSON(t, srv, name, "--ttl", "10m")
	for _, c := range []struct{ verb, subject, doing string }{
		{"lock", "lock", "waiting for it"},
		{"elect", "election", "campaigning"},
	} {
		for _, tc := range []struct {
			sig  syscall.Signal
			code int
		}{{syscall.SIGTERM, 143}, {syscall.SIGINT, 130}} {
			before := metric(t, srv, "fence_waits_total")
			f := startFence(t, srv, nil, c.verb, name, "--", "sh", "-c", "echo ran")
			waitFor(t, "the waiter to reach the server", func() bool { return metric(t, srv, "fence_waits_total") > before || !f.alive() })
			_ = f.cmd.Process.Signal(tc.sig)
			code := f.wait(t, "fence "+c.verb)
			var rest []byte
			f.within(t, "fence "+c.verb+"'s output", func() { rest, _ = io.ReadAll(f.out) })
			want := fmt.Sprintf("fence: %s %q: interrupted (%s) while %s\n", c.subject, name, unix.SignalName(tc.sig), c.doing)
			if code != tc.code || len(rest) != 0 || f.stderr.String() != want {
				t.Fatalf("%v to fence %s while waiting: want exit %d, nothing run, stderr %q; got %d, stdout %q, stderr %q", tc.sig, c.verb, tc.code, want, code, rest, f.stderr)
			}
		}
	}
}

// startLockHolding starts `fence -o json lock NAME --ttl ttl` without a command on
// a fresh name and returns it with the lease it printed, checked to be NAME's.
func startLockHolding(t *testing.T, ttl string) (*fenceProc, leaseJSON) {
	t.Helper()
	name := uniqName(t)
	f := startFence(t, cli.serve.url, nil, "-o", "json", "lock", name, "--ttl", ttl)
	var l leaseJSON
	var err error
	f.within(t, "the printed lease", func() { err = json.NewDecoder(f.out).Decode(&l) })
	if err != nil {
		t.Fatalf("fence lock without a command: want the lease as JSON on stdout: %v (stderr %q)", err, f.stderr)
	}
	if l.Name != name || l.Token == 0 || len(l.Lease) < 32 {
		t.Fatalf("printed lease: want {name:%q, token, lease}, got %+v", name, l)
	}
	return f, l
}

// Item 6: without a command fence lock prints the lease, holds the lock (renewing
// it past its TTL) until SIGINT or SIGTERM, then releases it and exits 0.
func TestCLI_Lock_NoCommand_HoldsUntilSignalThenReleases(t *testing.T) {
	srv := cli.serve.url
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		f, l := startLockHolding(t, "900ms")
		name := l.Name
		time.Sleep(2 * time.Second) // over two TTLs: held only if renewed
		if s := status(t, srv, name); !s.Held || s.Token != l.Token {
			t.Fatalf("after two TTLs: want %q still held with token %d, got %+v", name, l.Token, s)
		}
		_ = f.cmd.Process.Signal(sig)
		if code := f.wait(t, "fence lock"); code != 0 {
			t.Fatalf("%v to fence lock holding without a command: want exit 0, got %d (stderr %q)", sig, code, f.stderr)
		}
		if s := status(t, srv, name); s.Held {
			t.Fatalf("after %v: want the lock released, got %+v", sig, s)
		}
	}
}

// Item 6: a lease lost while held without a command: exit 76, one line.
func TestCLI_Lock_NoCommand_LeaseLost_76(t *testing.T) {
	srv := cli.serve.url
	f, l := startLockHolding(t, "600ms")
	name := l.Name
	// Released behind its back: the next renewal is refused.
	wantCode(t, "release", runFence(t, srv, nil, "", "release", name, "--lease", l.Lease), 0)
	if code := f.wait(t, "fence lock"); code != exitLeaseLost {
		t.Fatalf("lease lost while held: want exit %d, got %d (stderr %q)", exitLeaseLost, code, f.stderr)
	}
	stderr := f.stderr
	// -o json adds the summary on stderr before the error line, which is JSON too.
	var errLine struct{ Error, Code string }
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &errLine); err != nil ||
		!strings.HasPrefix(errLine.Error, fmt.Sprintf("lock %q: lease lost (", name)) || strings.Count(errLine.Error, name) != 1 || errLine.Code != "lease_lost" {
		t.Fatalf("lease lost: want a last JSON line {\"error\":\"lock NAME: lease lost (...)\",\"code\":\"lease_lost\"} naming the lock once, got %q", stderr)
	}
}

// Item 7: --version prints the module version and the VCS revision the build
// recorded.
func TestCLI_Version(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "", "--version")
	wantCode(t, "fence --version", r, 0)
	bi, err := buildinfo.ReadFile(cli.bin)
	if err != nil {
		t.Fatal(err)
	}
	if want := formatVersion(bi) + "\n"; r.stdout != want {
		t.Fatalf("fence --version: want %q, got %q", want, r.stdout)
	}
	if !regexp.MustCompile(`^fence (\(devel\)|v\d\S*)( rev [0-9a-f]{7})?( \(modified\))?\n$`).MatchString(r.stdout) {
		t.Fatalf("fence --version: want \"fence VERSION [rev REV] [(modified)]\", got %q", r.stdout)
	}
}

func TestFormatVersion(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "0ba33aaaa1da59ef87e06214ab9eca7122dfc755"
	for _, tc := range []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"(devel)", vcs(rev, "true"), "fence (devel) rev 0ba33aa (modified)"},
		{"(devel)", nil, "fence (devel)"},
		{"v1.2.3", nil, "fence v1.2.3"},
		{"v1.2.3", vcs(rev, "false"), "fence v1.2.3 rev 0ba33aa"},
		{"v0.0.0-20260101120000-0ba33aaaa1da+dirty", vcs(rev, "true"), "fence (devel) rev 0ba33aa (modified)"},
		{"v1.2.4-0.20260101120000-0ba33aaaa1da", vcs(rev, "false"), "fence v1.2.4-0.20260101120000-0ba33aaaa1da"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/fencelock/fence", Version: tc.version}, Settings: tc.settings}
		if got := formatVersion(bi); got != tc.want {
			t.Errorf("formatVersion(%q, %v) = %q, want %q", tc.version, tc.settings, got, tc.want)
		}
	}
}

// Item 7: no arguments: the usage on stderr, exit 2.
func TestCLI_NoArguments_UsageOnStderrExit2(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "")
	wantCode(t, "fence", r, exitUsage)
	if r.stdout != "" || !strings.Contains(r.stderr, "Usage:") || !strings.Contains(r.stderr, "lock") {
		t.Fatalf("fence without arguments: want the usage on stderr only, got stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// Item 7: cobra's default messages become one actionable line, exit 2.
func TestCLI_UsageErrors_OneActionableLine(t *testing.T) {
	const lockUsage = "usage: fence lock NAME [--ttl 30s] [--wait DURATION] [--owner S] [-n N | --shared] [-- CMD [ARGS...]]"
	const electUsage = "usage: fence elect NAME [--ttl 30s] [--owner S] [--rejoin] -- CMD [ARGS...]"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"lock", "foo", "--"}, []string{"lock: missing the command after --", lockUsage}},
		{[]string{"lock"}, []string{"lock: missing a lock NAME", lockUsage}},
		{[]string{"lock", "--", "true"}, []string{"lock: missing the lock NAME before --", lockUsage}},
		{[]string{"lock", "a", "true"}, []string{`unexpected argument "true": put the command after --`, lockUsage}},
		{[]string{"elect", "foo"}, []string{"elect: missing the command after --", electUsage}},
		{[]string{"elect", "foo", "--"}, []string{"elect: missing the command after --", electUsage}},
		{[]string{"elect"}, []string{"elect: missing an election NAME", electUsage}},
		{[]string{"elect", "--", "true"}, []string{"elect: missing the election NAME before --", electUsage}},
		{[]string{"elect", "a", "true"}, []string{`unexpected argument "true": put the command after --`, electUsage}},
		{[]string{"elect", "", "--", "true"}, []string{`fence: election name "": is empty`}},
		{[]string{"leader"}, []string{"leader: missing an election NAME", "usage: fence leader NAME [--watch]"}},
		{[]string{"lokc"}, []string{`unknown command "lokc" for "fence" (did you mean "lock"?)`, "fence --help"}},
		{[]string{"kv", "pt"}, []string{`unknown command "pt" for "fence kv" (did you mean "put"?)`, "fence kv --help"}},
		{[]string{"kv"}, []string{"kv: missing a subcommand: put, get, delete or purge"}},
		{[]string{"acquire"}, []string{"acquire: missing a lock NAME", "usage: fence acquire NAME"}},
		{[]string{"acquire", "a", "b"}, []string{`acquire: unexpected argument "b"`, "usage: fence acquire NAME"}},
		{[]string{"kv", "put", "k"}, []string{"kv put: missing a VALUE (or - to read standard input)", "usage: fence kv put KEY"}},
		{[]string{"status", "a", "b"}, []string{`status: unexpected argument "b"`}},
		{[]string{"serve", "x"}, []string{`serve: unexpected argument "x" (it takes no arguments)`}},
		{[]string{"acquire", "a", "--bogus"}, []string{"acquire: unknown flag --bogus", "fence acquire --help"}},
		{[]string{"acquire", "a", "-z"}, []string{"acquire: unknown flag -z"}},
		{[]string{"acquire", "a", "--ttl"}, []string{"acquire: --ttl needs a value"}},
		{[]string{"acquire", "a", "--ttl", "soon"}, []string{`acquire: --ttl "soon": want a duration such as 500ms, 30s or 5m`}},
		{[]string{"acquire", ""}, []string{`fence: lock name "": is empty`}},
		{[]string{"chaos", "--workers", "1", "--duration", "1s"}, []string{"--workers 1: want 2 to 64 worker processes"}},
		{[]string{"simulate", "--scenario", "random", "--workers", "30"}, []string{"simulate: --workers: workers must be 1 to 26, got 30"}},
	} {
		r := runFence(t, cli.serve.url, nil, "", tc.args...)
		what := fmt.Sprintf("fence %q", tc.args)
		wantCode(t, what, r, exitUsage)
		line := oneLineStderr(t, what, r)
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: want a line containing %q, got %q", what, w, line)
			}
		}
		for _, cobraism := range []string{"arg(s)", "Run '", "Did you mean", "flag needs an argument", "\" flag: "} {
			if strings.Contains(line, cobraism) {
				t.Errorf("%s: cobra's default wording %q in %q", what, cobraism, line)
			}
		}
	}
}

// Item 8: an unreachable server is named with the reason, in one line; a bare
// HOST:PORT means http://HOST:PORT; fence lock's default (unbounded) wait does not
// hide it.
func TestCLI_ServerUnreachable_NamesTheServer(t *testing.T) {
	addr := freeAddr(t)
	want := fmt.Sprintf("fence: cannot reach the fence server at http://%s: connection refused\n", addr)
	for _, tc := range []struct {
		server string
		args   []string
	}{
		{"http://" + addr, []string{"acquire", "x"}},
		{addr, []string{"status", "x"}},
		{"http://" + addr, []string{"lock", "x", "--", "true"}},
		{"http://" + addr, []string{"elect", "x", "--", "true"}},
		{addr, []string{"leader", "x"}},
		{"http://" + addr, []string{"release", "x", "--lease", "0123456789abcdef0123456789abcdef"}},
	} {
		start := time.Now()
		r := runFence(t, tc.server, nil, "", tc.args...)
		wantCode(t, fmt.Sprintf("fence %q with nothing at %s", tc.args, tc.server), r, exitError)
		if r.stderr != want {
			t.Errorf("fence %q with nothing at %s:\nwant %q\ngot  %q", tc.args, tc.server, want, r.stderr)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("fence %q took %v to report an unreachable server", tc.args, d)
		}
	}
}

// Item 8: the server's message, once: no package prefixes, the name said once.
func TestCLI_Release_NotHeld_OneFactOnce(t *testing.T) {
	name := uniqName(t)
	r := runFence(t, cli.serve.url, nil, "", "release", name, "--lease", "0123456789abcdef0123456789abcdef")
	wantCode(t, "release of a lease never granted", r, exitError)
	if want := fmt.Sprintf("fence: release %q: lease not held (expired, released, or never granted)\n", name); r.stderr != want {
		t.Fatalf("release of a lease never granted:\nwant %q\ngot  %q", want, r.stderr)
	}
}

// Item 8: acquire of a held lock says so once, with the time left.
func TestCLI_Acquire_Held_OneFactOnce(t *testing.T) {
	name := uniqName(t)
	acquireJSON(t, cli.serve.url, name, "--ttl", "10m")
	r := runFence(t, cli.serve.url, nil, "", "acquire", name)
	wantCode(t, "acquire of a held lock", r, exitNotAcquired)
	line := oneLineStderr(t, "acquire of a held lock", r)
	if !regexp.MustCompile(`^fence: lock "` + regexp.QuoteMeta(name) + `" is held \(expires in \d+m[\d.]+s\)$`).MatchString(line) {
		t.Fatalf("acquire of a held lock: want `fence: lock %q is held (expires in 9m59.9s)`, got %q", name, line)
	}
}

// Item 8: --server and FENCE_SERVER take a bare HOST:PORT; the child of fence lock
// gets the full URL.
func TestCLI_Server_BareHostPort(t *testing.T) {
	srv := cli.serve.url
	bare := strings.TrimPrefix(srv, "http://")
	name := uniqName(t)
	l := acquireJSON(t, bare, name) // as FENCE_SERVER
	wantCode(t, "release --server HOST:PORT", runFence(t, "", nil, "", "release", name, "--lease", l.Lease, "--server", bare), 0)
	r := runFence(t, bare, nil, "", "lock", name, "--", "sh", "-c", `echo "$FENCE_SERVER"`)
	wantCode(t, "lock with FENCE_SERVER=HOST:PORT", r, 0)
	if strings.TrimSpace(r.stdout) != srv {
		t.Fatalf("child's FENCE_SERVER: want %s, got %q", srv, r.stdout)
	}
	r = runFence(t, "", nil, "", "status", "--server", "not a url")
	wantCode(t, "--server 'not a url'", r, exitUsage)
	if line := oneLineStderr(t, "--server 'not a url'", r); line != `fence: --server "not a url": want http://HOST:PORT, https://HOST:PORT or HOST:PORT` {
		t.Fatalf("--server 'not a url': got %q", line)
	}
}

// Item 8: --auth-token-file joins FENCE_AUTH_TOKEN: the flag wins, the content is
// trimmed, an empty file is a usage error; fence lock hands the token to its child.
func TestCLI_AuthTokenFile(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("client-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startServe(filepath.Join(dir, "data"), "--auth-token-file", tokens)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	mine := filepath.Join(dir, "mine")
	if err := os.WriteFile(mine, []byte("  client-token \n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := uniqName(t)
	wantCode(t, "status with a wrong $FENCE_AUTH_TOKEN", runFence(t, p.url, []string{"FENCE_AUTH_TOKEN=nope"}, "", "status", name), exitError)
	wantCode(t, "status --auth-token-file over a wrong $FENCE_AUTH_TOKEN",
		runFence(t, p.url, []string{"FENCE_AUTH_TOKEN=nope"}, "", "status", name, "--auth-token-file", mine), 0)
	r := runFence(t, p.url, nil, "", "lock", name, "--auth-token-file", mine, "--", "sh", "-c", `fence status "$FENCE_LOCK" >/dev/null`)
	wantCode(t, "lock --auth-token-file -- fence status (the child uses the token)", r, 0)
	r = runFence(t, p.url, nil, "", "status", name, "--auth-token-file", empty)
	wantCode(t, "status --auth-token-file EMPTY", r, exitUsage)
	if line := oneLineStderr(t, "empty token file", r); !strings.Contains(line, "--auth-token-file "+empty+": the file is empty") {
		t.Fatalf("empty token file: want it named as empty, got %q", line)
	}
	r = runFence(t, p.url, nil, "", "status", name, "--auth-token-file", filepath.Join(dir, "nonexistent"))
	wantCode(t, "status --auth-token-file MISSING", r, exitUsage)
	oneLineStderr(t, "missing token file", r)
}

// Item 9: with stdout not a terminal, fence chaos prints whole progress lines (no
// "\r") before the table, and a legend that explains overlaps.
func TestChaos_ProgressLinesWhenNotATerminal(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "", "chaos", "--duration", "3s", "--nemesis", "none",
		"--workers", "2", "--ttl", "5s", "--results", t.TempDir())
	wantCode(t, "fence chaos (fencing on, no faults)", r, exitOK)
	if strings.Contains(r.stdout+r.stderr, "\r") || !strings.HasSuffix(r.stdout, "\n") {
		t.Fatalf("chaos output to pipes: want whole lines without \\r, got stdout %q, stderr %q", r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	progress, table := 0, -1
	for i, l := range lines {
		if strings.HasPrefix(l, "chaos fenced") && strings.Contains(l, "ops") {
			progress++
			if table >= 0 {
				t.Fatalf("progress line after the table: %q\n%s", l, r.stdout)
			}
		}
		if strings.HasPrefix(l, "backend") && table < 0 {
			table = i
		}
	}
	if progress < 1 || table < 0 {
		t.Fatalf("chaos output: want at least one progress line, then the table; got %d progress lines, table at %d:\n%s", progress, table, r.stdout)
	}
	for _, w := range []string{"overlaps", "believed they held the lock at once", "own", "clock", "rejected the stale"} {
		if !strings.Contains(strings.Join(lines[table+1:], " "), w) {
			t.Errorf("the legend after the table does not explain overlaps (%q missing):\n%s", w, r.stdout)
		}
	}
}

// Item 10: kv --help describes its subcommands and where their defaults come from.
func TestCLI_KVHelp_DescribesSubcommands(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "", "kv", "--help")
	wantCode(t, "kv --help", r, 0)
	for _, w := range []string{"fence kv put KEY --lock NAME --token N [--lease ID] (VALUE | -)", "fence kv get KEY",
		"fence kv delete KEY --lock NAME --token N [--lease ID]", "fence kv purge KEY", "never issued",
		"standard input when VALUE is -", "$FENCE_LOCK", "$FENCE_TOKEN", "$FENCE_LEASE", "-o json", "--lock is required"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("kv --help: want %q in it, got:\n%s", w, r.stdout)
		}
	}
}

// Item 10: kv put needs a lock (the server requires Fence-Lock), and sends it.
func TestCLI_KVPut_AlwaysSendsFenceLock(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "", "kv", "put", uniqName(t), "--token", "1", "v")
	wantCode(t, "kv put without a lock", r, exitUsage)
	if line := oneLineStderr(t, "kv put without a lock", r); !strings.Contains(line, "--lock") || !strings.Contains(line, "$FENCE_LOCK") {
		t.Fatalf("kv put without a lock: want a line naming --lock and $FENCE_LOCK, got %q", line)
	}
	var mu sync.Mutex
	var got []http.Header
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got = append(got, req.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	defer ts.Close()
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{[]string{"FENCE_LOCK=job", "FENCE_TOKEN=5"}, []string{"kv", "put", "k", "v"}},
		{nil, []string{"kv", "put", "k", "--lock", "job", "--token", "5", "v"}},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		r := runFence(t, ts.URL, tc.env, "", tc.args...)
		wantCode(t, fmt.Sprintf("fence %q (env %q)", tc.args, tc.env), r, 0)
		mu.Lock()
		if len(got) != 1 || got[0].Get("Fence-Lock") != "job" || got[0].Get("Fence-Token") != "5" {
			t.Errorf("fence %q (env %q): want one request with Fence-Lock: job, Fence-Token: 5, got %v", tc.args, tc.env, got)
		}
		mu.Unlock()
	}
}

// `fence bench` is in the contract, but the benchmark is its own command: the
// product answers with a usage error that says how to run it, whatever the flags.
func TestCLI_Bench_SaysWhereItWent(t *testing.T) {
	for _, args := range [][]string{{"bench"}, {"bench", "--rows", "fence-bolt", "--rounds", "1"}, {"-o", "json", "bench"}} {
		what := fmt.Sprintf("fence %q", args)
		r := runFence(t, cli.serve.url, nil, "", args...)
		wantCode(t, what, r, exitUsage)
		if r.stdout != "" {
			t.Errorf("%s: stdout %q, want nothing", what, r.stdout)
		}
		if !strings.Contains(r.stderr, "go run ./cmd/fence-bench") {
			t.Errorf("%s: stderr %q, want it to name go run ./cmd/fence-bench", what, r.stderr)
		}
	}
	r := runFence(t, cli.serve.url, nil, "", "bench", "--help")
	wantCode(t, "fence bench --help", r, exitOK)
	if !strings.Contains(r.stdout, "go run ./cmd/fence-bench") {
		t.Errorf("fence bench --help: stdout %q, want it to name go run ./cmd/fence-bench", r.stdout)
	}
}
