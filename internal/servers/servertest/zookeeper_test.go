package servertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
)

func TestZooKeeper_StandaloneServesAndCloses(t *testing.T) {
	servertest.SkipIfShort(t)
	s := servertest.ZooKeeper(t)
	mode, err := servers.ZooKeeperMode(s.Addr)
	if err != nil || mode != "standalone" {
		t.Fatalf("ZooKeeperMode(%s) = %q, %v; want \"standalone\", nil", s.Addr, mode, err)
	}
	s.Close()
	if _, err := servers.ZooKeeperMode(s.Addr); err == nil {
		t.Fatalf("ZooKeeperMode(%s) after Close = nil error; want the server gone", s.Addr)
	}
}

func TestZooKeeperEnsemble_LeaderKilled_NewLeaderElectedOldRejoins(t *testing.T) {
	servertest.SkipIfShort(t)
	e := servertest.NewZooKeeperEnsemble(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old.Kill()
	if old.Alive() {
		t.Fatalf("member %d alive after Kill; want it dead", old.ID)
	}
	nu, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("no new leader after member %d was killed: %v", old.ID, err)
	}
	if nu.ID == old.ID {
		t.Fatalf("leader after killing member %d is member %d; want another member", old.ID, nu.ID)
	}
	// Restarted on its data, the old leader rejoins the new leader's ensemble.
	if err := old.Restart(); err != nil {
		t.Fatalf("Restart of member %d: %v", old.ID, err)
	}
	if mode, err := servers.ZooKeeperMode(old.Addr); err != nil || mode != "follower" {
		t.Fatalf("member %d after Restart: mode %q, %v; want \"follower\" of member %d", old.ID, mode, err, nu.ID)
	}
}
