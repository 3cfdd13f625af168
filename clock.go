package fence

import "time"

// Clock is the time source of leases and of backends that judge expiry locally. The
// system clock is the default; the simulator injects a virtual one to replay races
// tick for tick.
type Clock interface {
	// Now returns the current time. For the system clock it carries a monotonic
	// reading, so durations measured with it survive wall-clock jumps.
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a virtual clock, when time is
	// advanced past it) after d has elapsed, unless the returned Timer is stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled call made by a Clock.
type Timer interface {
	// Stop prevents the call if it has not happened yet; it reports whether it did.
	Stop() bool
}

// SystemClock is the real clock: time.Now and time.AfterFunc.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
