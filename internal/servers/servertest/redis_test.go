package servertest_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

func TestRedis_StartAnswersClient(t *testing.T) {
	servertest.SkipIfShort(t)
	srv := servertest.Redis(t)
	wantOwnPort(t, srv.Port, 6379)
	if want := "127.0.0.1:" + strconv.Itoa(srv.Port); srv.Addr != want {
		t.Fatalf("Addr = %q, want %q", srv.Addr, want)
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	got, err := srv.CLI("GET", "k")
	if err != nil {
		t.Fatalf("CLI GET: %v", err)
	}
	if got != "v" {
		t.Fatalf("CLI GET k = %q, want %q", got, "v")
	}
	if got, err := srv.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("Do GET k = %q, %v; want %q, nil", got, err, "v")
	}
	if _, err := srv.Do("NOSUCHCOMMAND"); err == nil || !strings.Contains(err.Error(), "ERR") {
		t.Fatalf("Do NOSUCHCOMMAND error = %v, want an ERR reply", err)
	}
}

func TestRedis_ExtraArgsApplied(t *testing.T) {
	servertest.SkipIfShort(t)
	srv := servertest.Redis(t, "--maxmemory-policy", "noeviction", "--appendonly", "yes")
	got, err := srv.Do("CONFIG", "GET", "appendonly")
	if err != nil {
		t.Fatal(err)
	}
	if want := "appendonly\nyes"; got != want {
		t.Fatalf("CONFIG GET appendonly = %q, want %q", got, want)
	}
}

// Kill then Restart keeps the port and directory; a key written before the crash is
// there afterwards with AOF fsync always, and gone with the default (no persistence).
func TestRedis_KillThenRestart_SamePortDataOnlyIfPersistent(t *testing.T) {
	servertest.SkipIfShort(t)
	for _, c := range []struct {
		name     string
		args     []string
		survives string // EXISTS k after the restart
	}{
		{"AOFFsyncAlways_KeepsData", []string{"--appendonly", "yes", "--appendfsync", "always"}, "1"},
		{"NoPersistence_LosesData", nil, "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := servertest.Redis(t, c.args...)
			port, dir := srv.Port, srv.Dir
			if _, err := srv.Do("SET", "k", "1"); err != nil {
				t.Fatal(err)
			}
			srv.Kill()
			if _, err := srv.Do("PING"); err == nil {
				t.Fatal("PING after Kill succeeded, want a connection error")
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			if srv.Port != port || srv.Dir != dir {
				t.Fatalf("after Restart port, dir = %d, %q; want %d, %q", srv.Port, srv.Dir, port, dir)
			}
			if got, err := srv.Do("EXISTS", "k"); err != nil || got != c.survives {
				t.Fatalf("EXISTS k after kill+restart = %q, %v; want %q, nil", got, err, c.survives)
			}
		})
	}
}

func TestRedis_Replica_FollowsPrimary(t *testing.T) {
	servertest.SkipIfShort(t)
	primary := servertest.Redis(t)
	if _, err := primary.Do("SET", "before", "1"); err != nil {
		t.Fatal(err)
	}
	replica := servertest.RedisReplica(t, primary)
	if got, err := replica.Do("GET", "before"); err != nil || got != "1" {
		t.Fatalf("replica GET before = %q, %v; want %q after initial sync", got, err, "1")
	}
	if _, err := replica.Do("SET", "x", "1"); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("replica SET error = %v, want READONLY", err)
	}
}

func TestRedis_CloseTwiceAndRestartAfterClose(t *testing.T) {
	servertest.SkipIfShort(t)
	srv, err := servers.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv.Close()
	if err := srv.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded, want an error")
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING after Close succeeded, want a connection error")
	}
}

func TestFindBinary_Missing_NamesPackage(t *testing.T) {
	_, err := servers.FindBinary("no-such-server-binary", "no-such-package")
	if !errors.Is(err, servers.ErrNotFound) {
		t.Fatalf("error = %v, want ErrNotFound", err)
	}
	if want := "servers: no-such-server-binary not found: apt-get install no-such-package"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %q, want it to contain %q", err, want)
	}
}

func TestStartRedis_BinaryMissing_SaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // redis-server lives in /usr/bin, found only through PATH
	srv, err := servers.StartRedis()
	if err == nil {
		srv.Close()
		t.Fatal("StartRedis with redis-server not in PATH succeeded, want an error")
	}
	if want := "redis-server not found: apt-get install redis-server"; !errors.Is(err, servers.ErrNotFound) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %q, want ErrNotFound saying %q", err, want)
	}
}

func TestFreePort_NeverReserved(t *testing.T) {
	for i := 0; i < 20; i++ {
		p, err := servers.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p == 6379 || p == 5432 || p == 3306 || p <= 0 {
			t.Fatalf("FreePort = %d, want a positive port other than 6379, 5432, 3306", p)
		}
	}
}
