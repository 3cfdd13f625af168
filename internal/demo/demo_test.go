package demo

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestPlay_ShowsCorruptionOffAndRejectionOn(t *testing.T) {
	rep, err := Play(context.Background(), Options{TTL: 100 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Play: %v", err)
	}
	if !rep.Off.Corrupted || rep.Off.Final != "written by A" {
		t.Errorf("fencing off: want A's stale write to overwrite B's, got final %q corrupted=%v", rep.Off.Final, rep.Off.Corrupted)
	}
	if rep.Off.Rejected {
		t.Errorf("fencing off: nothing should reject A's write")
	}
	if !rep.On.Rejected || rep.On.Final != "written by B" {
		t.Errorf("fencing on: want A rejected and B's write kept, got final %q rejected=%v", rep.On.Final, rep.On.Rejected)
	}
	if !rep.OK() {
		t.Errorf("OK() = false for a report with both outcomes")
	}
	var rejection string
	for _, e := range rep.On.Events {
		if e.Error != "" {
			rejection = e.Error
		}
	}
	if !strings.Contains(rejection, "stale token 1") || !strings.Contains(rejection, "highest seen 2") {
		t.Errorf("fencing on: want the stale-token error naming tokens 1 and 2, got %q", rejection)
	}
}

func TestPlay_RequiresDir(t *testing.T) {
	if _, err := Play(context.Background(), Options{}); err == nil {
		t.Fatal("Play without a directory: want an error, got nil")
	}
}
