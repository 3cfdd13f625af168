package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/internal/servers/servertest/etcdtest"
)

// playRaceAcrossServers plays the seed's race with A on server one and B on server
// two, both serving the same --store: B must wait out A's lease (shared locks), get
// a higher token, and A's late write through its own server must be refused (shared
// fenced data).
func playRaceAcrossServers(t *testing.T, store string) {
	t.Helper()
	one, err := startServe(t.TempDir(), "--store", store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = one.stop() })
	two, err := startServe(t.TempDir(), "--store", store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = two.stop() })

	name := uniqName(t)
	key := "ledger-" + strings.ReplaceAll(name, "/", "-")
	a := acquireJSON(t, one.url, name, "--ttl", "2s")
	// B asks through the other server while A holds the lock: refused at once.
	r := runFence(t, two.url, nil, "", "acquire", name, "--ttl", "10s")
	wantCode(t, "acquire through server two while A holds the lock", r, exitNotAcquired)
	// A "pauses"; B waits through server two and gets the lock once A's lease expires.
	start := time.Now()
	b := acquireJSON(t, two.url, name, "--ttl", "10s", "--wait", "20s")
	if b.Token <= a.Token {
		t.Fatalf("B's token through server two: want > A's %d, got %d", a.Token, b.Token)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Fatalf("B waited %v for a 2s lease", waited)
	}
	env := []string{"FENCE_LOCK=" + name}
	r = runFence(t, two.url, env, "", "kv", "put", key, "--token", fmt.Sprint(b.Token), "--lease", b.Lease, "written by B")
	wantCode(t, "B's write through server two", r, 0)
	r = runFence(t, one.url, env, "", "kv", "put", key, "--token", fmt.Sprint(a.Token), "--lease", a.Lease, "written by A")
	wantCode(t, "A's stale write through server one", r, 1)
	if want := fmt.Sprintf("highest seen %d", b.Token); !strings.Contains(r.stderr, want) {
		t.Fatalf("A's stale write: want an error saying %q, got %q", want, r.stderr)
	}
	r = runFence(t, one.url, nil, "", "kv", "get", key)
	wantCode(t, "kv get through server one", r, 0)
	if got := strings.TrimSpace(r.stdout); got != "written by B" {
		t.Fatalf("value after the race, read through server one: want %q, got %q", "written by B", got)
	}
}

// TestServe_Store_TwoServersShareLocksAndData plays the race across two servers on
// each shared --store backend (etcd as a three-member cluster).
func TestServe_Store_TwoServersShareLocksAndData(t *testing.T) {
	servertest.SkipIfShort(t)
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string // the --store URL of a fresh server
	}{
		{"postgres", func(t *testing.T) string { return servertest.Postgres(t).CreateDatabase(t) }},
		{"redis", func(t *testing.T) string { return "redis://" + servertest.Redis(t).Addr }},
		{"zookeeper", func(t *testing.T) string { return "zk://" + servertest.ZooKeeper(t).Addr }},
		{"etcd", func(t *testing.T) string {
			var hosts []string
			for _, ep := range etcdtest.NewCluster(t, 3).Endpoints() {
				hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
			}
			return "etcd://" + strings.Join(hosts, ",") + "/fence-cli-test/"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { playRaceAcrossServers(t, tc.store(t)) })
	}
}

func TestServe_StoreZooKeeper_BadURL_UsageError(t *testing.T) {
	for _, store := range []string{
		"zk://",                        // no host
		"zk://127.0.0.1:2181,",         // empty host in the list
		"zk://127.0.0.1:2181/?bogus=1", // unknown parameter
		"zk://127.0.0.1:2181?session_timeout=-1s",
		"zk://user:secret@127.0.0.1:2181",    // user info, never echoed
		"zk://127.0.0.1:2181/relative//root", // bad root
	} {
		_, err := openStore(context.Background(), store, t.TempDir())
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("openStore(%q) = %v; want a usage error", store, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("openStore(%q) = %v; want the password redacted", store, err)
		}
	}
}
