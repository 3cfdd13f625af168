package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// startSentinel runs one redis-server in sentinel mode (it needs a writable config
// file, which the servers of internal/servers do not have) monitoring primary as "mymaster" with
// quorum 1, and stops it when t ends. It returns the sentinel's address.
func startSentinel(t *testing.T, primary *servers.Redis) string {
	t.Helper()
	bin := servertest.RequireBinary(t, "redis-server", "redis-server")
	port, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
dir %s
sentinel monitor mymaster 127.0.0.1 %d 1
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
`, port, dir, primary.Port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "sentinel.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: addr})
	defer sc.Close()
	// Ready when it answers and has found the replica through the primary's INFO.
	deadline := time.Now().Add(15 * time.Second)
	for {
		replicas, err := sc.Replicas(context.Background(), "mymaster").Result()
		if err == nil && len(replicas) == 1 && !strings.Contains(replicas[0]["flags"], "down") {
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Fatalf("sentinel %s not ready: replicas %v, %v\n%s", addr, replicas, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSentinel_ClientFollowsFailover acquires through a Sentinel failover client,
// fails over with SENTINEL FAILOVER, and shows the same Locker granting on the new
// primary with tokens that keep increasing, and waking waiters and watchers there.
func TestSentinel_ClientFollowsFailover(t *testing.T) {
	servertest.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 28*time.Second)
	defer cancel()
	primary := servertest.Redis(t, "--repl-diskless-sync-delay", "0")
	replica := servertest.RedisReplica(t, primary, "--repl-diskless-sync-delay", "0")
	sentinel := startSentinel(t, primary)

	client := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel}})
	defer client.Close()
	l, err := NewLocker(client, &Options{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const name = "sentinel-job"
	var last fence.Token
	for i := 0; i < 2; i++ {
		lease, err := l.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire before failover: %v", err)
		}
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitCounter(t, replica, l, name, last.String())
	w := startWatching(t, l, name)
	w.await(promptly, "the state before the failover", func(i fence.LockInfo) bool { return !i.Held && i.LastToken == last })

	sc := goredis.NewSentinelClient(&goredis.Options{Addr: sentinel})
	defer sc.Close()
	for {
		err := sc.Failover(ctx, "mymaster").Err()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // e.g. NOGOODSLAVE until the replica's INFO is fresh
	}
	for {
		addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		if err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica.Port) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("sentinel still reports primary %v, %v; want :%d", addr, err, replica.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Until Sentinel has demoted the old primary, it still accepts writes, and a grant
	// made there in that window is lost when it resyncs from the new primary (an
	// asynchronous-replication hazard the package documentation describes). Wait for
	// the demotion, then show the client following.
	for {
		info, err := primary.CLI("INFO", "replication")
		if err == nil && strings.Contains(info, "role:slave") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("old primary not demoted: %v\n%s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The client follows the switch; while it does, calls may fail as unavailable
	// (READONLY from the demoted primary, closed connections), never with a grant.
	var lease *fence.Lease
	for attempts := 0; ; attempts++ {
		lease, err = l.Acquire(ctx, name, 10*time.Second)
		if err == nil {
			t.Logf("first grant after failover on attempt %d", attempts+1)
			break
		}
		if !errors.Is(err, fence.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("Acquire after failover: %v; want success or ErrUnavailable while switching", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("last token before failover %d, first after %d", last, lease.Token())
	if lease.Token() != last+1 {
		t.Errorf("token after failover %d, want %d", lease.Token(), last+1)
	}
	if got, err := replica.CLI("GET", l.keysFor(name).token); err != nil || got != lease.Token().String() {
		t.Errorf("counter on the new primary = %q, %v; want %s (the grant went there)", got, err, lease.Token())
	}

	// The watch, whose connection went to the old primary, follows too: it sees
	// the grant on the new one, and its release, without waiting for the poll.
	w.await(promptly, "the first grant after the failover", held(lease.Token()))
	if n, err := replica.CLI("PUBSUB", "SHARDNUMSUB", l.keysFor(name).wake); err != nil || !strings.HasSuffix(n, "\n1") {
		t.Errorf("watch subscriptions on the new primary = %q, %v; want 1", n, err)
	}

	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.await(promptly, "the release on the new primary", free)
	w.stop() // waiters are counted by their subscriptions below
	if lease, err = l.Acquire(ctx, name, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// Waiters on the new primary are woken by a release there.
	wakesOnRelease(t, ctx, l, newClient(t, replica.Addr), lease)
}
