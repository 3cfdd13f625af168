// Package driver is for authors of fence backends, as database/sql/driver is for
// authors of SQL drivers: applications use package fence, a backend implements
// fence.Locker with the help of this package.
//
// A backend writes "try once": a TryFunc that grants the lock or says how it is
// held and when it may be free. The Engine does the rest of Acquire once for every
// backend: it validates the arguments, bounds the wait, sleeps until the backend's
// wake-up (a release message, a watch event), the holder's expiry or a fallback
// poll, rides out transient failures while it waits, stops at cancellation or
// Close, words every error the same way, and makes the *fence.Lease.
//
// The package also holds what only backends need: the validators behind fence's
// documented limits, lease ids, lease construction and the Clock that leases and
// local expiry are measured by. Where package fence must own a piece (a Lease is
// made inside fence, and fence checks its own arguments), this package names it
// by a type alias or a one-line call: driver imports fence, never the reverse, and
// nothing is wired at init.
package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/fencelock/fence"
)

// Clock is fence.Clock, the time source of leases and of backends that judge
// expiry locally. The system clock is the default; the simulator injects a virtual
// one.
type Clock = fence.Clock

// Timer is fence.Timer, a scheduled call made by a Clock.
type Timer = fence.Timer

// SystemClock is the real clock: time.Now and time.AfterFunc.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// AcquireOptions is fence.AcquireOptions, the per-call options of an acquire as
// its fence.AcquireOption values set them: Wait (0 tries once, fence.WaitForever
// waits until the context ends), AutoRenew, Owner (validated by the Engine; a
// backend stores it with the grant and reports it in fence.LockInfo.Owner), Limit,
// Shared and RequestID (validated by the Engine, and "" for a backend whose
// Engine.Features lack RequestIDs; see Retried).
//
// In the Request a TryFunc gets, Limit is 0 for a lock (WithLimit(1) included) and
// 2 to fence.MaxLimit for a semaphore, and Shared is never set with a Limit: the
// Engine has validated and normalised them (LimitSet and RequestIDSet are for the Engine only).
type AcquireOptions = fence.AcquireOptions

// ApplyOptions returns the options that opts set; nil options are skipped.
func ApplyOptions(opts ...fence.AcquireOption) AcquireOptions {
	var o AcquireOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// ValidateLease validates the name and lease id of a Renew or Release: a
// *fence.InvalidError for a bad name, or for a bad lease id with the name before it.
func ValidateLease(name, leaseID string) error {
	if err := fence.ValidateName(name); err != nil {
		return err
	}
	if err := fence.ValidateLeaseID(leaseID); err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	return nil
}

// ValidateFence validates the key and fence of a fenced write (Put, Fence, Do): a
// *fence.InvalidError for a bad key, or for a bad fence (see fence.Fence.Validate)
// with the key before it.
func ValidateFence(key string, f fence.Fence) error {
	if err := fence.ValidateKey(key); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%q: %w", key, err)
	}
	return nil
}

// ListLimit returns limit, or fence.DefaultListLimit if limit <= 0: the number of
// locks an Inspector's List returns at most.
func ListLimit(limit int) int {
	if limit <= 0 {
		return fence.DefaultListLimit
	}
	return limit
}

// Listed reports whether a lock in state info belongs in a listing by opts:
// always with opts.All, else only while it is held.
func Listed(info fence.LockInfo, opts fence.ListOptions) bool { return opts.All || info.Held }

// ListInspected is an Inspector's List for a store that reads each lock's state
// apart: it inspects names (sorted, each starting with opts.Prefix) in order
// and returns the states Listed keeps, at most ListLimit(opts.Limit) of them, so
// free names before the held ones never shorten a held-only listing. It returns
// the first error of inspect, unchanged.
func ListInspected(ctx context.Context, names []string, opts fence.ListOptions,
	inspect func(ctx context.Context, name string) (fence.LockInfo, error)) ([]fence.LockInfo, error) {
	limit := ListLimit(opts.Limit)
	out := make([]fence.LockInfo, 0, min(limit, len(names)))
	for _, name := range names {
		if len(out) == limit {
			break
		}
		info, err := inspect(ctx, name)
		if err != nil {
			return nil, err
		}
		if Listed(info, opts) {
			out = append(out, info)
		}
	}
	return out, nil
}

// NewLeaseID returns a new lease id: 128 bits from crypto/rand, as 32 hex digits.
// Lease ids are credentials: only their holder can renew or release the lease (P5).
func NewLeaseID() string {
	var b [16]byte
	// crypto/rand.Read never returns an error on supported platforms (Go 1.24+: it
	// crashes the program rather than return weak randomness).
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// LeaseConfig is fence.LeaseConfig, what a backend knows of a grant, for NewLease.
type LeaseConfig = fence.LeaseConfig

// NewLease returns a held lease for a grant, with its expiry timer (and renewal, if
// configured) running; it calls fence.NewLease. Engine.Acquire makes the leases of
// every grant it makes; a backend calls NewLease only for grants made outside it.
func NewLease(c LeaseConfig) *fence.Lease { return fence.NewLease(c) }
