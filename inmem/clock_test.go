package inmem_test

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence/inmem"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestManualClock_Advance_RunsCallbacksInDeadlineOrder(t *testing.T) {
	c := inmem.NewManualClock(t0)
	var got []string
	var at []time.Duration
	add := func(name string, d time.Duration) {
		c.AfterFunc(d, func() {
			got = append(got, name)
			at = append(at, c.Now().Sub(t0))
		})
	}
	add("c", 30*time.Millisecond)
	add("a", 10*time.Millisecond)
	add("b1", 20*time.Millisecond)
	add("b2", 20*time.Millisecond) // tie: scheduling order
	add("late", time.Hour)

	c.Advance(25 * time.Millisecond)
	if want := []string{"a", "b1", "b2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after Advance(25ms) ran %v, want %v", got, want)
	}
	if want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}; !reflect.DeepEqual(at, want) {
		t.Errorf("callbacks saw Now()-t0 = %v, want their deadlines %v", at, want)
	}
	if got, want := c.Now(), t0.Add(25*time.Millisecond); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
	c.Advance(5 * time.Millisecond)
	if want := []string{"a", "b1", "b2", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after Advance(30ms total) ran %v, want %v", got, want)
	}
	if n := c.Pending(); n != 1 {
		t.Errorf("Pending() = %d, want 1 (the hour timer)", n)
	}
}

func TestManualClock_CallbackSchedulesCallback_RunsInSameAdvance(t *testing.T) {
	c := inmem.NewManualClock(t0)
	var got []time.Duration
	var tick func()
	tick = func() {
		got = append(got, c.Now().Sub(t0))
		if len(got) < 5 {
			c.AfterFunc(10*time.Millisecond, tick)
		}
	}
	c.AfterFunc(10*time.Millisecond, tick)
	c.Advance(time.Second)
	want := []time.Duration{10, 20, 30, 40, 50}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chained callbacks ran at %v, want %v", got, want)
	}
}

func TestManualClock_Stop_PreventsCallback(t *testing.T) {
	c := inmem.NewManualClock(t0)
	ran := false
	tm := c.AfterFunc(time.Millisecond, func() { ran = true })
	if !tm.Stop() {
		t.Fatal("Stop() before the deadline = false, want true")
	}
	if tm.Stop() {
		t.Error("second Stop() = true, want false")
	}
	c.Advance(time.Second)
	if ran {
		t.Error("stopped callback ran")
	}
	tm2 := c.AfterFunc(time.Millisecond, func() {})
	c.Advance(time.Millisecond)
	if tm2.Stop() {
		t.Error("Stop() after the callback ran = true, want false")
	}
}

func TestManualClock_AfterFuncDue_RunsAtNextAdvanceNotInside(t *testing.T) {
	c := inmem.NewManualClock(t0)
	var mu sync.Mutex
	ran := false
	mu.Lock()
	// Scheduling while holding a lock the callback takes must not deadlock.
	c.AfterFunc(0, func() { mu.Lock(); ran = true; mu.Unlock() })
	c.AfterFunc(-time.Second, func() {})
	mu.Unlock()
	if ran {
		t.Fatal("due callback ran inside AfterFunc")
	}
	c.Advance(0)
	if !ran {
		t.Fatal("due callback did not run at Advance(0)")
	}
}

func TestManualClock_Set_ForwardRunsDueBackwardRunsNothing(t *testing.T) {
	c := inmem.NewManualClock(t0)
	n := 0
	c.AfterFunc(time.Minute, func() { n++ })
	c.Set(t0.Add(-time.Hour))
	if n != 0 || !c.Now().Equal(t0.Add(-time.Hour)) {
		t.Fatalf("after Set(back an hour): ran %d, Now %v; want 0 and %v", n, c.Now(), t0.Add(-time.Hour))
	}
	c.Set(t0.Add(time.Minute))
	if n != 1 {
		t.Fatalf("after Set(t0+1m): ran %d callbacks, want 1", n)
	}
}

func TestManualClock_ConcurrentUse_IsRaceFree(t *testing.T) {
	c := inmem.NewManualClock(t0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := 0
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.AfterFunc(time.Duration(j)*time.Millisecond, func() { mu.Lock(); ran++; mu.Unlock() })
				_ = c.Now()
			}
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.Advance(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	c.Advance(time.Hour)
	if ran != 800 {
		t.Fatalf("ran %d callbacks, want 800", ran)
	}
}
