package faultclock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/internal/faultclock/offset"
)

// within reports whether cond became true within d, polling every millisecond.
func within(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return cond()
}

// A step moves Now, wall and monotonic readings alike: the time read, and the
// duration measured across the step.
func TestClock_Step_MovesNowAndDurations(t *testing.T) {
	c := New()
	t0 := c.Now()
	if off := c.Step(5 * time.Second); off != 5*time.Second {
		t.Fatalf("Step(+5s) = %v, want offset 5s", off)
	}
	if d := c.Now().Sub(t0); d < 5*time.Second || d > 6*time.Second {
		t.Errorf("duration across a +5s step = %v, want 5s and a little", d)
	}
	if d := c.Now().Sub(time.Now()); d < 4*time.Second {
		t.Errorf("Now - real = %v, want about 5s", d)
	}
	if w := c.Now().Round(0).Sub(time.Now().Round(0)); w < 4*time.Second {
		t.Errorf("wall reading ahead by %v, want about 5s", w)
	}
	t1 := c.Now()
	c.Step(-8 * time.Second)
	if d := c.Now().Sub(t1); d > -7*time.Second {
		t.Errorf("duration across a -8s step = %v, want about -8s", d)
	}
	if c.Offset() != -3*time.Second {
		t.Errorf("Offset = %v, want -3s", c.Offset())
	}
}

// A forward step past a timer's time fires it at once; a backward step puts it
// off by the step; Stop prevents the call, and reports whether it did.
func TestClock_AfterFunc_FollowsSteps(t *testing.T) {
	c := New()
	fired := make(chan struct{}, 1)
	c.AfterFunc(time.Hour, func() { fired <- struct{}{} })
	c.Step(time.Hour)
	select {
	case <-fired:
	case <-time.After(2 * time.Second):
		t.Fatal("a 1h timer did not fire after a +1h step")
	}

	late := make(chan struct{}, 1)
	c.AfterFunc(50*time.Millisecond, func() { late <- struct{}{} })
	c.Step(-time.Hour)
	select {
	case <-late:
		t.Fatal("a 50ms timer fired after a -1h step, want it put off by an hour")
	case <-time.After(300 * time.Millisecond):
	}
	c.Step(time.Hour)
	select {
	case <-late:
	case <-time.After(2 * time.Second):
		t.Fatal("the timer did not fire once the clock stepped back")
	}

	stopped := c.AfterFunc(20*time.Millisecond, func() { t.Error("a stopped timer fired") })
	if !stopped.Stop() {
		t.Error("Stop of a pending timer = false, want true")
	}
	c.Step(time.Minute)
	time.Sleep(50 * time.Millisecond)
	if stopped.Stop() {
		t.Error("second Stop = true, want false")
	}
}

// The lease deadline of a real store (bolt, with the fault clock as its Clock)
// follows steps: forward past the TTL, the holder's lease ends (Done) and the store
// grants the lock to the next caller; backward, the lease outlives its TTL in real
// time on both sides.
func TestClock_LeaseDeadline_FollowsSteps(t *testing.T) {
	c := New()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), &bolt.Options{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	l, err := s.Acquire(ctx, "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Step(11 * time.Second)
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("a 10s lease is not done after a +11s step")
	}
	if !errors.Is(l.Err(), fence.ErrExpired) {
		t.Errorf("Err after the step = %v, want fence.ErrExpired", l.Err())
	}
	l2, err := s.Acquire(ctx, "a", 300*time.Millisecond, fence.WithWait(time.Second))
	if err != nil {
		t.Fatalf("acquire after a +11s step: %v, want the expired lock granted", err)
	}
	if l2.Fence().Token <= l.Fence().Token {
		t.Errorf("token after the step %d, want above %d", l2.Fence().Token, l.Fence().Token)
	}

	c.Step(-10 * time.Second)
	time.Sleep(600 * time.Millisecond) // twice the TTL, in real time
	if err := l2.Err(); err != nil {
		t.Errorf("a 300ms lease 600ms after a -10s step: Err = %v, want still held", err)
	}
	if _, err := s.Acquire(ctx, "a", time.Second); !errors.Is(err, fence.ErrNotAcquired) {
		t.Errorf("acquire of a lock held past its TTL by a -10s step: %v, want fence.ErrNotAcquired", err)
	}
	c.Step(10 * time.Second)
	if !within(2*time.Second, func() bool { return l2.Err() != nil }) {
		t.Error("the lease did not end once the clock stepped back")
	}
}

// A clock of Open reads its offset file at once and follows each rewrite of it,
// reporting the step.
func TestOpen_FollowsOffsetFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	if err := offset.Write(path, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	steps := make(chan [2]time.Duration, 4)
	c, err := Open(path, func(from, to time.Duration) { steps <- [2]time.Duration{from, to} })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Offset() != 2*time.Second {
		t.Errorf("Offset at Open = %v, want 2s from the file", c.Offset())
	}
	if err := offset.Write(path, -3*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-steps:
		if s != [2]time.Duration{2 * time.Second, -3 * time.Second} {
			t.Errorf("step reported %v, want 2s to -3s", s)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a rewrite of the offset file was not followed")
	}
	if c.Offset() != -3*time.Second {
		t.Errorf("Offset = %v, want -3s", c.Offset())
	}
}

// A missing or malformed offset file is an error at Open (fence.ErrInvalid for a
// malformed one), never a clock at offset 0.
func TestOpen_BadFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none"), nil); err == nil {
		t.Error("Open of a missing file: nil error")
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("5 seconds\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Open of a malformed file = %v, want fence.ErrInvalid", err)
	}
}
