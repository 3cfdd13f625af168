package bolt

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// setGather makes gather's bound d for the test.
func setGather(t *testing.T, d time.Duration) {
	t.Helper()
	gatherForTest = d
	t.Cleanup(func() { gatherForTest = 0 })
}

// warm takes the store past its first token-ceiling commit, so that the
// commits a test counts carry its operations only.
func warm(t *testing.T, s *Store) {
	t.Helper()
	if err := mustAcquire(t, s, "warm", time.Minute).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (s *Store) setLastOps(n int) {
	s.mu.Lock()
	s.lastOps = n
	s.mu.Unlock()
}

func (s *Store) commits() (commits, grants int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statCommits, s.statGrants
}

// acquireAll acquires names concurrently and fails the test unless every
// acquire returns within 10 s.
func acquireAll(t *testing.T, s *Store, names ...string) {
	t.Helper()
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			_, err := s.Acquire(context.Background(), n, time.Minute)
			errs <- err
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("acquires of %v still waiting after 10s", names)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
	}
}

// TestGather_CommitCarriesAsManyAsTheLastOne: after a commit of four
// operations, the next commit waits for four (the bound is an hour here), so
// four callers arriving one after another share one commit.
func TestGather_CommitCarriesAsManyAsTheLastOne(t *testing.T) {
	setGather(t, time.Hour)
	s := openStore(t, nil)
	warm(t, s)
	for round := range 3 {
		s.setLastOps(4)
		c0, g0 := s.commits()
		names := make([]string, 4)
		for i := range names {
			names[i] = fmt.Sprintf("g%d/%d", round, i)
		}
		acquireAll(t, s, names...)
		c1, g1 := s.commits()
		if c1-c0 != 1 || g1-g0 != 4 {
			t.Fatalf("round %d: %d commits carried %d grants; want 1 commit of 4", round, c1-c0, g1-g0)
		}
	}
}

// TestGather_LoneCallerIsNotHeldBack: a commit that carried one operation
// starts the next at once, however long the bound.
func TestGather_LoneCallerIsNotHeldBack(t *testing.T) {
	setGather(t, time.Hour)
	s := openStore(t, nil)
	warm(t, s)
	for i := range 20 {
		s.setLastOps(1)
		acquireAll(t, s, fmt.Sprintf("lone/%d", i))
	}
}

// TestGather_ThinnedGroupWaitsOnlyTheBound: fewer callers than the last
// commit carried are committed once the bound passes.
func TestGather_ThinnedGroupWaitsOnlyTheBound(t *testing.T) {
	setGather(t, 20*time.Millisecond)
	s := openStore(t, nil)
	warm(t, s)
	s.setLastOps(8)
	c0, g0 := s.commits()
	acquireAll(t, s, "thin/1", "thin/2")
	c1, g1 := s.commits()
	if g1-g0 != 2 || c1-c0 < 1 {
		t.Fatalf("%d commits carried %d grants; want the 2 grants committed", c1-c0, g1-g0)
	}
}

// TestGather_CloseWritesWhatWasGathered: Close while the flusher gathers
// commits the waiting grant (the caller gets it) and the reopened store has it.
func TestGather_CloseWritesWhatWasGathered(t *testing.T) {
	setGather(t, time.Hour)
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	warm(t, s)
	s.setLastOps(3)
	type res struct {
		token fence.Token
		err   error
	}
	got := make(chan res, 1)
	go func() {
		l, err := s.Acquire(context.Background(), "closing", time.Minute)
		if err != nil {
			got <- res{err: err}
			return
		}
		got <- res{token: l.Token()}
	}()
	// The acquire is waiting for the gathered commit once its grant is in memory.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		waiting := s.want != 0 && s.pending.ops == 1
		s.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the acquire did not reach the gathering flusher in 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var r res
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waiting 10s after Close")
	}
	if r.err != nil {
		t.Fatalf("Acquire during Close: %v", r.err)
	}
	s = mustOpen(t, path, nil)
	defer s.Close()
	info, err := s.Inspect(context.Background(), "closing")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Token != r.token {
		t.Fatalf("after reopen: held %v with token %d; want held with %d", info.Held, info.Token, r.token)
	}
}
