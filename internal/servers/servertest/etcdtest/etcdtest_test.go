package etcdtest

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fence/internal/servers/etcdmember"
	"github.com/fencelock/fence/internal/servers/servertest"
)

func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestStart_ServesThenCloseRemovesDir(t *testing.T) {
	s, err := etcdmember.Start()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := etcdClient(t, s.Endpoints)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("Put = %v", err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, %v; want k=v", resp, err)
	}
	// The minimum lease TTL is what MinLeaseTTL says.
	g, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(etcdmember.MinLeaseTTL / time.Second); g.TTL != want {
		t.Errorf("Grant(1s).TTL = %d; want %d (MinLeaseTTL)", g.TTL, want)
	}
	s.Close()
	s.Close() // idempotent
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) after Close = %v; want it removed", s.Dir, err)
	}
}

func TestStartDefaultTiming_MinLeaseTTL(t *testing.T) {
	s, err := etcdmember.StartDefaultTiming()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := etcdClient(t, s.Endpoints).Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(etcdmember.DefaultMinLeaseTTL / time.Second); g.TTL != want {
		t.Errorf("Grant(1s).TTL = %d; want %d (DefaultMinLeaseTTL)", g.TTL, want)
	}
}

func TestCluster_LeaderKilled_NewLeaderServes(t *testing.T) {
	servertest.SkipIfShort(t)
	c := NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := etcdClient(t, c.Endpoints())
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	if leader.Alive() {
		t.Fatal("leader still alive after Kill")
	}
	if n := len(c.Endpoints()); n != 2 {
		t.Fatalf("Endpoints() after a kill has %d members; want 2", n)
	}
	next, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("leader after the kill is still %s", leader.Name)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
		t.Fatalf("Get after the leader was killed = %v, %v; want k=before", resp, err)
	}
}
