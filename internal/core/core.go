// Package core carries what package fence and package driver share without
// showing it in fence's API: the clock interface, the acquire options, and the
// constructors and validators that fence implements and driver exports to backend
// authors. Package fence sets the function variables in its init, so they are set
// before any program can reach driver (which imports fence).
package core

import (
	"context"
	"time"
)

// Clock is the time source of leases and of backends that judge expiry locally.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled call made by a Clock.
type Timer interface {
	Stop() bool
}

// SystemClock is time.Now and time.AfterFunc.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// AcquireOptions are the per-call options of an acquire.
type AcquireOptions struct {
	Wait      time.Duration
	AutoRenew bool
	Owner     string
	Limit     int  // semaphore permits; 0 (or 1) is a lock
	Shared    bool // a shared lock
	LimitSet  bool // WithLimit was given (so that a bad 0 is reported)
}

// Holder is what a lease renews and releases through: its Locker.
type Holder interface {
	Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error
	Release(ctx context.Context, name, leaseID string) error
}

// LeaseConfig is what package fence needs to make a lease.
type LeaseConfig struct {
	Holder    Holder
	Name      string
	Token     uint64
	ID        string
	TTL       time.Duration
	Start     time.Time
	Clock     Clock
	AutoRenew bool
	Owner     string
	Slot      int
}

// Set by package fence in its init.
var (
	// NewLease returns a *fence.Lease as any (core cannot name the type).
	NewLease func(LeaseConfig) any
	// ValidateName checks a lock name or key; field names it in the error.
	ValidateName func(field, name string) error
	// ValidateTTL, ValidateToken and ValidateLeaseID are fence's validators.
	ValidateTTL     func(time.Duration) error
	ValidateToken   func(uint64) error
	ValidateLeaseID func(string) error
	ValidateOwner   func(string) error
	ValidateLimit   func(int) error
)
