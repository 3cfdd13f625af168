package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// statusNames returns the lock names of `fence -o json status ARGS...`, in order.
func statusNames(t *testing.T, srv string, args ...string) []string {
	t.Helper()
	r := runFence(t, srv, nil, "", append([]string{"-o", "json", "status"}, args...)...)
	wantCode(t, "status -o json "+strings.Join(args, " "), r, 0)
	names := []string{}
	for _, l := range decode[struct{ Locks []statusJSON }](t, "status -o json", r).Locks {
		names = append(names, l.Name)
	}
	return names
}

// Item: `fence status` lists the held locks (a semaphore once, with a row per
// holder), `fence status --all` every name the store knows, free ones too, in
// text and -o json; --limit counts held locks, however many free names sort
// first; NAME with --all is a usage error; an empty listing says so on stderr.
func TestCLI_Status_HeldByDefault_AllListsFree(t *testing.T) {
	srv := holdersServer(t, nil)
	for _, n := range []string{"a-free", "b-free"} {
		l := acquireJSON(t, srv, n)
		wantCode(t, "release "+n, runFence(t, srv, nil, "", "release", n, "--lease", l.Lease), 0)
	}
	acquireJSON(t, srv, "c-held", "--ttl", "10m", "--owner", "ops-1:77 backup")
	acquireJSON(t, srv, "d-pool", "-n", "3", "--ttl", "10m", "--owner", "worker one")
	acquireJSON(t, srv, "d-pool", "-n", "3", "--ttl", "10m", "--owner", "worker two")

	r := runFence(t, srv, nil, "", "status")
	wantCode(t, "status", r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := []string{
		`^NAME\s+HELD\s+TOKEN\s+LAST TOKEN\s+EXPIRES IN\s+OWNER$`,
		`^c-held\s+true\s+1\s+1\s+\S+\s+ops-1:77 backup$`,
		`^d-pool\s+2/3\s+-\s+2\s+-\s+-$`,
		`^  slot 0\s+1\s+\S+\s+worker one$`,
		`^  slot 1\s+2\s+\S+\s+worker two$`,
	}
	if len(lines) != len(want) || r.stderr != "" {
		t.Fatalf("status: want the header, c-held and d-pool with its two holders, nothing on stderr; got:\n%s\nstderr: %q", r.stdout, r.stderr)
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Fatalf("status line %d: want it to match %s, got:\n%s", i, re, r.stdout)
		}
	}

	r = runFence(t, srv, nil, "", "status", "--all")
	wantCode(t, "status --all", r, 0)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 7 || !regexp.MustCompile(`^a-free\s+false\s+-\s+1\s+-\s+-$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^b-free\s+false\s+-\s+1\s+-\s+-$`).MatchString(lines[2]) ||
		!strings.HasPrefix(lines[3], "c-held ") || !strings.HasPrefix(lines[4], "d-pool ") {
		t.Fatalf("status --all: want the free names a-free and b-free before the held ones, got:\n%s", r.stdout)
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"c-held", "d-pool"}},
		{[]string{"--limit", "1"}, []string{"c-held"}},
		{[]string{"--all"}, []string{"a-free", "b-free", "c-held", "d-pool"}},
		{[]string{"--all", "--limit", "1"}, []string{"a-free"}},
		{[]string{"--all", "--prefix", "b"}, []string{"b-free"}},
		{[]string{"--prefix", "b"}, []string{}},
	} {
		if got := statusNames(t, srv, tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("status -o json %q: want %q, got %q", tc.args, tc.want, got)
		}
	}

	r = runFence(t, srv, nil, "", "status", "--prefix", "b")
	wantCode(t, "status --prefix b", r, 0)
	if !regexp.MustCompile(want[0]).MatchString(strings.TrimSpace(r.stdout)) || !strings.Contains(r.stderr, `no lock whose name starts with "b" is held; --all`) {
		t.Fatalf("status with no held lock: want the header alone and a line on stderr pointing at --all, got:\n%s\nstderr: %q", r.stdout, r.stderr)
	}

	r = runFence(t, srv, nil, "", "status", "a-free", "--all")
	wantCode(t, "status NAME --all", r, exitUsage)
	oneLineStderr(t, "status NAME --all", r)
	// NAME alone shows the lock, free or not.
	if s := status(t, srv, "a-free"); s.Held || s.LastToken != 1 {
		t.Fatalf("status a-free: want it free with last token 1, got %+v", s)
	}
}
