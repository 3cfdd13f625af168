package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// The owner and revoke commands run against a server over the reference store:
// what is tested is the command line (the tours run them on `fence serve`).

// holdersServer starts a server over locker (a fresh inmem one if nil) and an
// inmem KV, and returns its URL.
func holdersServer(t *testing.T, locker fence.Locker) string {
	t.Helper()
	if locker == nil {
		locker = inmem.NewLocker(inmem.Options{})
	}
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: locker, KV: inmem.NewGuard()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

type ownerJSON struct {
	Name  string `json:"name"`
	Held  bool   `json:"held"`
	Owner string `json:"owner"`
}

// Item: `fence acquire --owner S` names the holder; `fence status` shows it in the
// OWNER column (last, as it may hold spaces) and in -o json, never the lease id; a
// bad --owner is a usage error naming the flag.
func TestCLI_AcquireOwner_StatusShowsIt(t *testing.T) {
	srv := holdersServer(t, nil)
	l := acquireJSON(t, srv, "backup", "--owner", "ops-1:77 nightly backup", "--ttl", "10m")
	acquireJSON(t, srv, "other", "--ttl", "10m") // no owner
	r := runFence(t, srv, nil, "", "status")
	wantCode(t, "status", r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^NAME\s+HELD\s+TOKEN\s+LAST TOKEN\s+EXPIRES IN\s+OWNER$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^backup\s+true\s+1\s+1\s+\S+\s+ops-1:77 nightly backup$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^other\s+true\s+1\s+1\s+\S+\s+-$`).MatchString(lines[2]) {
		t.Fatalf("status: want a header with OWNER last, backup's owner and - for none, got:\n%s", r.stdout)
	}
	r = runFence(t, srv, nil, "", "-o", "json", "status", "backup")
	wantCode(t, "status -o json", r, 0)
	if s := decode[ownerJSON](t, "status -o json", r); s.Owner != "ops-1:77 nightly backup" || !s.Held {
		t.Fatalf("status -o json: want the owner, got %s", r.stdout)
	}
	if strings.Contains(r.stdout, l.Lease) {
		t.Fatalf("status shows the lease id: %s", r.stdout)
	}

	r = runFence(t, srv, nil, "", "acquire", "x", "--owner", "two\nlines")
	wantCode(t, "acquire --owner with a newline", r, exitUsage)
	if want := "fence: --owner \"two\\nlines\": contains the unprintable character U+000A\n"; r.stderr != want {
		t.Fatalf("acquire --owner with a newline:\nwant %q\ngot  %q", want, r.stderr)
	}
	r = runFence(t, srv, nil, "", "lock", "x", "--owner", strings.Repeat("o", fence.MaxOwnerLen+1), "--", "true")
	wantCode(t, "lock --owner of 257 bytes", r, exitUsage)
	oneLineStderr(t, "lock --owner of 257 bytes", r)
}

// Item: `fence lock` names its holder "HOST:PID COMMAND" by default (its own pid,
// the command as given), --owner S names S and --owner "" none.
func TestCLI_Lock_DefaultOwner_HostPidCommand(t *testing.T) {
	srv := holdersServer(t, nil)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// The child reports fence lock's pid ($PPID) and the lock's state as it sees it.
	const script = `echo "$PPID"; fence -o json status "$FENCE_LOCK"`
	for _, tc := range []struct {
		what  string
		flags []string
		want  func(pid string) string
	}{
		{"default", nil, func(pid string) string { return host + ":" + pid + " sh -c " + script }},
		{"--owner", []string{"--owner", "deploy bot"}, func(string) string { return "deploy bot" }},
		{"--owner \"\"", []string{"--owner", ""}, func(string) string { return "" }},
	} {
		args := append(append([]string{"lock", "job"}, tc.flags...), "--", "sh", "-c", script)
		r := runFence(t, srv, nil, "", args...)
		wantCode(t, "lock "+tc.what, r, 0)
		pid, js, _ := strings.Cut(r.stdout, "\n")
		var s ownerJSON
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatalf("lock %s: the child's output is not its pid and the status JSON: %q", tc.what, r.stdout)
		}
		if want := tc.want(pid); s.Owner != want || !s.Held {
			t.Fatalf("lock %s: want the lock held by owner %q, got %q", tc.what, want, s.Owner)
		}
	}
}

func TestDefaultOwner_AlwaysAValidOwner(t *testing.T) {
	host, _ := os.Hostname()
	prefix := fmt.Sprintf("%s:%d", host, os.Getpid())
	for _, tc := range []struct {
		what string
		argv []string
		want string // "" to check only validity, length and the "..." ending
	}{
		{"no command", nil, prefix},
		{"a command", []string{"./job.sh", "--day", "mon"}, prefix + " ./job.sh --day mon"},
		{"a newline and a tab", []string{"sh", "-c", "a\nb\tc"}, prefix + " sh -c a b c"},
		{"invalid UTF-8", []string{"x\xffy"}, prefix + " x y"},
		{"too long, multibyte at the cut", []string{strings.Repeat("é", 200)}, ""},
		{"too long, ASCII", []string{strings.Repeat("a", 300)}, ""},
	} {
		got := defaultOwner(tc.argv)
		if err := fence.ValidateOwner(got); err != nil {
			t.Errorf("%s: defaultOwner = %q, not a valid owner: %v", tc.what, got, err)
			continue
		}
		switch {
		case tc.want != "" && got != tc.want:
			t.Errorf("%s: defaultOwner = %q, want %q", tc.what, got, tc.want)
		case tc.want == "" && (!strings.HasSuffix(got, "...") || len(got) > fence.MaxOwnerLen || len(got) < fence.MaxOwnerLen-4 || !utf8.ValidString(got)):
			t.Errorf("%s: defaultOwner = %q (%d bytes), want it cut to end in \"...\" within %d bytes", tc.what, got, len(got), fence.MaxOwnerLen)
		}
	}
}

// Item: `fence revoke NAME` ends the current lease (its holder's renew then fails,
// exit 1), prints what it did (-o json {"name","revoked":true}); a lock that no
// lease holds, or a store that cannot revoke, is exit 1 with one line; no NAME is
// a usage error.
func TestCLI_Revoke(t *testing.T) {
	srv := holdersServer(t, nil)
	l := acquireJSON(t, srv, "stuck", "--ttl", "10m")
	r := runFence(t, srv, nil, "", "revoke", "stuck")
	wantCode(t, "revoke", r, 0)
	if r.stdout != "revoked stuck\n" {
		t.Fatalf("revoke: want \"revoked stuck\", got %q", r.stdout)
	}
	r = runFence(t, srv, nil, "", "renew", "stuck", "--lease", l.Lease)
	wantCode(t, "the revoked holder's renew", r, exitError)
	next := acquireJSON(t, srv, "stuck")
	if next.Token <= l.Token {
		t.Fatalf("grant after the revoke: token %d, want above the revoked %d", next.Token, l.Token)
	}
	r = runFence(t, srv, nil, "", "-o", "json", "revoke", "stuck")
	wantCode(t, "revoke -o json", r, 0)
	if got := decode[fencehttp.Revoked](t, "revoke -o json", r); got != (fencehttp.Revoked{Name: "stuck", Revoked: true}) {
		t.Fatalf("revoke -o json: want {name, revoked: true}, got %s", r.stdout)
	}

	r = runFence(t, srv, nil, "", "revoke", "stuck")
	wantCode(t, "revoke of a free lock", r, exitError)
	if want := "fence: revoke \"stuck\": not held (free, or its lease expired): nothing to revoke\n"; r.stderr != want {
		t.Fatalf("revoke of a free lock:\nwant %q\ngot  %q", want, r.stderr)
	}
	r = runFence(t, holdersServer(t, lockerOnly{inmem.NewLocker(inmem.Options{})}), nil, "", "revoke", "stuck")
	wantCode(t, "revoke on a store without Revoker", r, exitError)
	if line := oneLineStderr(t, "revoke on a store without Revoker", r); !strings.Contains(line, "not supported by this server's store") {
		t.Fatalf("revoke on a store without Revoker: want it said, got %q", line)
	}
	r = runFence(t, srv, nil, "", "revoke")
	wantCode(t, "revoke without NAME", r, exitUsage)
	if want := "fence: revoke: missing a lock NAME; usage: fence revoke NAME\n"; r.stderr != want {
		t.Fatalf("revoke without NAME:\nwant %q\ngot  %q", want, r.stderr)
	}
}

// Item: a `fence lock` whose lease is revoked learns it at its next renewal: its
// command gets SIGTERM and it exits 76.
func TestCLI_Lock_Revoked_SIGTERMThen76(t *testing.T) {
	srv := holdersServer(t, nil)
	f := startFence(t, srv, nil, "lock", "job", "--ttl", "900ms", "--", "sh", "-c", `trap 'echo got-TERM; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
	var line string
	f.within(t, "the command's start", func() { line, _ = f.out.ReadString('\n') })
	if line != "started\n" {
		t.Fatalf("fence lock: want the command started, got %q (stderr %q)", line, f.stderr)
	}
	wantCode(t, "revoke", runFence(t, srv, nil, "", "revoke", "job"), 0)
	if code := f.wait(t, "fence lock after the revoke"); code != exitLeaseLost {
		t.Fatalf("fence lock after the revoke: want exit %d, got %d (stderr %q)", exitLeaseLost, code, f.stderr)
	}
	if rest, _ := f.out.ReadString('\n'); rest != "got-TERM\n" {
		t.Fatalf("the command after the revoke: want it sent SIGTERM, got %q", rest)
	}
	if !strings.Contains(f.stderr.String(), `fence: lock "job": lease lost (the server refused to renew it: not held any more)`) {
		t.Fatalf("fence lock after the revoke: want the loss said, got %q", f.stderr)
	}
}

// lockerOnly hides everything but fence.Locker: a store without Revoker.
type lockerOnly struct{ fence.Locker }
