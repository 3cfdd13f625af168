// Package faultclock is a clock for fault injection: the real clock plus an offset
// that a test harness steps, forward or backward, while the process runs. A step
// moves both what the process reads as the time (Now, wall and monotonic readings
// alike) and how it measures durations and deadlines: timers of AfterFunc fire by
// the stepped clock, so a forward step past a lease's deadline fires its expiry at
// once, as after a jump of a virtual machine's clock.
//
// The offset lives in a file of package offset, which the harness rewrites; [Open]
// reads it and polls it every PollInterval.
//
// Only the fence binary built with the faultclock build tag uses this package
// (cmd/fence/faultclock_on.go); the default build does not link it.
package faultclock

import (
	"os"
	"sync"
	"time"

	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/faultclock/offset"
)

// PollInterval is how often a Clock of Open looks at its offset file (one stat; a
// read when the file was replaced): a step takes effect within it. An idle fence
// serve spent about 2.5% of a core more with a read every 5ms, about 0.9% with a
// stat every 20ms (a busy 2-core machine, 10 s of CPU time from /proc).
const PollInterval = 20 * time.Millisecond

// Clock is the real clock plus an offset. The zero value is not usable; use [New]
// or [Open]. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	off    time.Duration
	timers map[*timer]struct{} // pending timers, rescheduled by each step
	stop   chan struct{}       // closes the poller of Open; nil for New
	once   sync.Once
}

var _ driver.Clock = (*Clock)(nil)

// New returns a Clock with offset 0 that nothing but Set steps.
func New() *Clock { return &Clock{timers: map[*timer]struct{}{}} }

// Open returns a Clock whose offset is read from the file at path now and every
// PollInterval until Close; each change of the offset is a step (Set), reported to
// onStep if it is not nil. It returns the error of offset.Read.
func Open(path string, onStep func(from, to time.Duration)) (*Clock, error) {
	seen, _ := os.Stat(path) // before the read: a file replaced after it is read again
	off, err := offset.Read(path)
	if err != nil {
		return nil, err
	}
	c := New()
	c.off = off
	c.stop = make(chan struct{})
	go c.poll(path, seen, onStep)
	return c, nil
}

// poll reads the offset file every PollInterval until Close. A file that is briefly
// missing or unreadable (being replaced) keeps the offset as it is.
// seen is the file as it was when last read.
func (c *Clock) poll(path string, seen os.FileInfo, onStep func(from, to time.Duration)) {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		fi, err := os.Stat(path)
		if err != nil || seen != nil && os.SameFile(fi, seen) && fi.ModTime().Equal(seen.ModTime()) && fi.Size() == seen.Size() {
			continue // unchanged: offset.Write replaces the file, a new inode
		}
		off, err := offset.Read(path)
		if err != nil {
			continue
		}
		seen = fi
		if from := c.Offset(); off != from {
			c.Set(off)
			if onStep != nil {
				onStep(from, off)
			}
		}
	}
}

// Close stops the polling of a Clock of Open; the offset stays as it is. It returns
// nil.
func (c *Clock) Close() error {
	c.once.Do(func() {
		if c.stop != nil {
			close(c.stop)
		}
	})
	return nil
}

// Offset returns the current offset from the real clock.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.off
}

// Now returns the real time plus the offset, with its monotonic reading moved by
// the offset too, so that durations between readings across a step include it.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *Clock) nowLocked() time.Time { return time.Now().Add(c.off) }

// Set steps the clock to offset off from the real clock (forward if off is above
// the current offset, backward if below). Pending timers of AfterFunc are
// rescheduled by the new reading: a timer whose time the step passed fires now.
func (c *Clock) Set(off time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = off
	now := c.nowLocked()
	for tm := range c.timers {
		tm.t.Stop()
		tm.scheduleLocked(max(0, tm.at.Sub(now)))
	}
}

// Step moves the clock by d (negative: backward) and returns the new offset.
func (c *Clock) Step(d time.Duration) time.Duration {
	c.mu.Lock()
	off := c.off + d
	c.mu.Unlock()
	c.Set(off)
	return off
}

// AfterFunc calls f in its own goroutine once the clock reads d later than now,
// steps included, and returns a Timer that can stop it.
func (c *Clock) AfterFunc(d time.Duration, f func()) driver.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{c: c, f: f, at: c.nowLocked().Add(d)}
	c.timers[tm] = struct{}{}
	tm.scheduleLocked(max(0, d))
	return tm
}

// timer is a pending call of AfterFunc. Each schedule has a generation, so that a
// real timer of an earlier schedule that fired while a step rescheduled it does not
// call f.
type timer struct {
	c    *Clock
	f    func()
	at   time.Time // when to fire, by the clock
	t    *time.Timer
	gen  int
	done bool // fired or stopped
}

func (tm *timer) scheduleLocked(d time.Duration) {
	tm.gen++
	gen := tm.gen
	tm.t = time.AfterFunc(d, func() { tm.fire(gen) })
}

func (tm *timer) fire(gen int) {
	c := tm.c
	c.mu.Lock()
	if tm.done || tm.gen != gen {
		c.mu.Unlock()
		return
	}
	tm.done = true
	delete(c.timers, tm)
	c.mu.Unlock()
	tm.f()
}

// Stop prevents the call if it has not started; it reports whether it did.
func (tm *timer) Stop() bool {
	c := tm.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if tm.done {
		return false
	}
	tm.done = true
	tm.t.Stop()
	delete(c.timers, tm)
	return true
}
