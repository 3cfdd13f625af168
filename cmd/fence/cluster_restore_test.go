package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/internal/cluster"
)

// runClusterCmd runs `fence ARGS...` in process and returns its standard output
// and error.
func runClusterCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	output = "text" // the global -o flag, as a fresh process starts
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// The commands as an operator types them: migrate a stopped single node's data
// directory, restore the snapshot for each of three nodes; -o json and text.
func TestClusterMigrateRestore_CLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	ctx := context.Background()
	old := t.TempDir()
	s, err := bolt.Open(filepath.Join(old, "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var last fence.Token
	for range 3 {
		l, err := s.Acquire(ctx, "jobs/nightly", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "report", []byte("done"), l.Fence()); err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	snap := filepath.Join(t.TempDir(), "migrated.db")
	out, err := runClusterCmd(t, "cluster", "migrate", "--from", old, "--out", snap, "-o", "json")
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var rep cluster.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("migrate -o json printed %q: %v", out, err)
	}
	if rep.Names != 1 || rep.Items != 1 || rep.MaxToken < uint64(last) || rep.Revision <= int64(rep.MaxToken) || rep.Snapshot != snap {
		t.Fatalf("migrate -o json = %+v; want 1 name, 1 item, max token at least %d, a revision above it", rep, last)
	}

	peers := "a=" + freeAddr(t) + ",b=" + freeAddr(t) + ",c=" + freeAddr(t)
	base := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		data := filepath.Join(base, n)
		args := []string{"cluster", "restore", snap, "--node", n, "--peers", peers, "--data", data}
		if n == "a" {
			args = append(args, "-o", "json")
		}
		out, err := runClusterCmd(t, args...)
		if err != nil {
			t.Fatalf("restore %s: %v", n, err)
		}
		if n == "a" {
			var got struct {
				Node        string `json:"node"`
				Dir         string `json:"dir"`
				Revision    int64  `json:"revision"`
				Bump        uint64 `json:"bump"`
				TokensAbove uint64 `json:"tokens_above"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("restore -o json printed %q: %v", out, err)
			}
			if got.Node != "a" || got.Dir != filepath.Join(data, "cluster") || got.Revision != rep.Revision ||
				got.Bump != cluster.DefaultRevisionBump || got.TokensAbove != uint64(rep.Revision)+cluster.DefaultRevisionBump {
				t.Fatalf("restore -o json = %+v; want node a, dir DATA/cluster, the snapshot's revision %d and the default bump", got, rep.Revision)
			}
		} else if !strings.Contains(out, "restored node "+n) || !strings.Contains(out, "fence serve --node "+n+" --peers "+peers) {
			t.Fatalf("restore text output %q: want what was done and the serve command", out)
		}
		if _, err := os.Stat(filepath.Join(data, "cluster", "etcd", "member")); err != nil {
			t.Fatalf("restore %s wrote no member directory: %v", n, err)
		}
	}

	// Run again onto the same data: refused, one line, code "invalid", exit 1.
	_, err = runClusterCmd(t, "cluster", "restore", snap, "--node", "a", "--peers", peers, "--data", filepath.Join(base, "a"))
	if !errors.Is(err, fence.ErrInvalid) || errorCode(err, exitError) != "invalid" || !strings.Contains(oneLine(err), "already holds") {
		t.Fatalf("restore onto existing data: %v; want a one-line fence.ErrInvalid saying the data is there", err)
	}
	_, err = runClusterCmd(t, "cluster", "migrate", "--from", old, "--out", snap)
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("migrate onto an existing snapshot: %v; want fence.ErrInvalid", err)
	}
}

// Command lines that are wrong are usage errors (exit 2) that say what to fix,
// before anything is read or written.
func TestClusterRestore_CLIUsageErrors(t *testing.T) {
	data := t.TempDir()
	snap := filepath.Join(data, "none.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "restore", "--node", "a", "--peers", "a=127.0.0.1:1"}, "missing a SNAPSHOT"},
		{[]string{"cluster", "restore", snap, "--peers", "a=127.0.0.1:1"}, "--node is required"},
		{[]string{"cluster", "restore", snap, "--node", "a"}, "--peers is required"},
		{[]string{"cluster", "restore", snap, "--node", "z", "--peers", "a=127.0.0.1:1,b=127.0.0.1:2"}, `"z" is not in --peers (a, b)`},
		{[]string{"cluster", "restore", snap, "--node", "a", "--peers", "a=127.0.0.1"}, "want HOST:PORT"},
		{[]string{"cluster", "restore", snap, "--node", "a", "--peers", "a=127.0.0.1:1,a=127.0.0.1:2"}, "named twice"},
		{[]string{"cluster", "restore", snap, "--node", "a", "--peers", "a=127.0.0.1:1", "--bump", "0"}, "--bump 0"},
		{[]string{"cluster", "restore", snap, "--node", "a", "--peers", "a=127.0.0.1:1", "--bump", "-1"}, "--bump"},
		{[]string{"cluster", "migrate", "--out", snap}, "--from and --out are required"},
		{[]string{"cluster", "migrate", "extra"}, "unexpected argument"},
	} {
		_, err := runClusterCmd(t, c.args...)
		if err == nil || errorCode(err, runExitCode(err)) != "usage" || !strings.Contains(oneLine(err), c.want) {
			t.Errorf("%v: %v; want a usage error containing %q", c.args, err, c.want)
		}
	}
	// A snapshot that is not there is no usage error: exit 1, code invalid.
	_, err := runClusterCmd(t, "cluster", "restore", snap, "--node", "a", "--peers", "a=127.0.0.1:1", "--data", data)
	if !errors.Is(err, fence.ErrInvalid) || runExitCode(err) != exitError || !strings.Contains(oneLine(err), "no such file") {
		t.Errorf("restore of a missing snapshot: %v; want exit 1 saying the file is missing", err)
	}
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Errorf("a refused restore wrote into --data: %v", ents)
	}
}

// runExitCode is the exit status run gives err (usage errors included).
func runExitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return exitUsage
	}
	return exitError
}

// --above: the floor the bump is counted from, for a backup taken before an
// earlier restore. The JSON says it and where the tokens start; the serve line
// carries what plain peers off loopback need.
func TestClusterRestore_Above_CLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	old := t.TempDir()
	s, err := bolt.Open(filepath.Join(old, "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(context.Background(), "jobs/nightly", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "migrated.db")
	if _, err := runClusterCmd(t, "cluster", "migrate", "--from", old, "--out", snap); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	rev, err := cluster.SnapshotRevision(snap)
	if err != nil {
		t.Fatal(err)
	}
	const reached = 3_000_000_123 // a token of a cluster restored earlier
	peers := "a=" + freeAddr(t)
	out, err := runClusterCmd(t, "cluster", "restore", snap, "--node", "a", "--peers", peers, "--data", t.TempDir(), "--above", "3000000123", "-o", "json")
	if err != nil {
		t.Fatalf("restore --above: %v", err)
	}
	var got struct {
		Revision    int64  `json:"revision"`
		Bump        uint64 `json:"bump"`
		Above       uint64 `json:"above"`
		TokensAbove uint64 `json:"tokens_above"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("restore -o json printed %q: %v", out, err)
	}
	if got.Revision != rev || got.Above != reached || got.TokensAbove != reached+cluster.DefaultRevisionBump {
		t.Fatalf("restore --above %d -o json = %+v; want revision %d, above %d, tokens above %d", reached, got, rev, reached, reached+cluster.DefaultRevisionBump)
	}

	// Text, with peers off loopback: the serve line says what they need.
	out, err = runClusterCmd(t, "cluster", "restore", snap, "--node", "a", "--peers", "a=10.0.0.1:7431,b=10.0.0.2:7431", "--data", t.TempDir(), "--above", "3000000123")
	if err != nil {
		t.Fatalf("restore --above: %v", err)
	}
	if !strings.Contains(out, "floor 3000000123 (--above)") || !strings.Contains(out, "tokens start above 4000000123") || !strings.Contains(out, "--allow-plain-peers") {
		t.Fatalf("restore --above text output %q: want the floor, where tokens start, and --allow-plain-peers on the serve line", out)
	}
}
