// Package fencetest is the conformance suite of fence: the shared, executable
// definition of a correct fence.Locker (TestLocker) and of a correct fence.Guard
// with a fenced key-value view (TestGuard). Every backend and guard runs it from
// its own tests:
//
//	func TestLocker(t *testing.T) {
//		fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newLocker(t) })
//	}
//
// A store that both grants locks and keeps the fenced key-value store refuses
// fences it never issued (P9): it runs TestGuard with WithIssuer (or
// WithGuardAsIssuer), so the guard suite writes with the store's own grants, and
// TestIssuedKV, the P9 suite and a key's lifecycle (Delete, Purge):
//
//	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return store }, fencetest.WithIssuer(store))
//	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return store })
//
// Each subtest calls the factory once and uses its own unique lock names and keys,
// so one server can serve the whole suite. Run it under the race detector.
//
// A KV that keeps write attempt ids (fence.WithWriteAttempt: a late attempt of
// a write never replaces a later write of the same holder, P3) runs
// TestWriteAttempts, with the options it gives TestGuard.
//
// The suite measures time with the system clock, so the implementation under
// test must judge expiry by real time (not by an injected virtual clock).
//
// Optional capabilities are probed, not required: a Locker that also implements
// fence.Inspector or fence.Healer gets those checked too.
//
// Semaphores and shared locks are suites of their own within TestLocker, run by
// what fence.FeaturesOf(locker) declares: the Semaphore_* subtests (fence.WithLimit:
// at most N permits, one per slot, the lowest free slot, one counter for every
// slot, *fence.LimitError for a disagreeing limit) and the Shared_* subtests
// (fence.WithShared: many readers or one writer, writer preference without
// starvation). A kind a Locker does not declare must give fence.ErrNotImplemented.
// BenchmarkAcquireRelease and BenchmarkHandoff take acquire options, and
// BenchmarkPermitHandoff measures a permit's handoff, so a backend compares a
// lock, a permit and a shared lease on one server in one run.
//
// Timing assertions use generous bounds ("returns within 5s" where the failure
// would wait 30s or a minute) so the suite does not flake on a loaded machine; the
// expiry tests use a short TTL (WithShortTTL, default 150ms), and timing-sensitive
// checks are written so that a slow machine can only make them inconclusive,
// never wrong.
package fencetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// DefaultShortTTL is the TTL the expiry tests use unless WithShortTTL says
// otherwise.
const DefaultShortTTL = 150 * time.Millisecond

const (
	// longTTL is the TTL of leases that must stay held for the whole subtest.
	longTTL = time.Minute
	// longWait is a wait that a correct implementation never uses up.
	longWait = 30 * time.Second
	// promptly bounds what must happen "at once" (a release waking a waiter, a
	// cancelled context ending a wait), generously for loaded machines.
	promptly = 5 * time.Second
	// subtestTimeout bounds each subtest's context.
	subtestTimeout = 90 * time.Second
)

// Option configures a suite run.
type Option func(*config)

type config struct {
	shortTTL    time.Duration
	issuer      fence.Locker
	guardIssues bool
}

func newConfig(opts []Option) config {
	c := config{shortTTL: DefaultShortTTL}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithShortTTL sets the TTL the expiry tests use (default 150ms). Backends whose
// lease clocks are coarse raise it: etcd counts lease TTLs in whole seconds.
// Values that fence.ValidateTTL rejects are ignored.
func WithShortTTL(d time.Duration) Option {
	return func(c *config) {
		if fence.ValidateTTL(d) == nil {
			c.shortTTL = d
		}
	}
}

// WithIssuer makes TestGuard draw every fence it writes from l instead of making
// fences up: for each lock name a subtest uses, the suite acquires l's lock on that
// name and releases it at once (fence.Locker.Acquire with a one-minute TTL, then
// Release), as many times as the subtest needs tokens, and writes with the real
// grants' fences: their increasing tokens and their lease ids. A guard that checks
// fences against the locker that issued them (P9: a store that both grants the
// locks and keeps the fenced KV, such as the embedded bolt store) refuses made-up
// tokens, and needs this option to run TestGuard; l is usually the guard itself.
//
// With an issuer, the suite's checks are the same, with three differences: the
// tokens are the grants' (not the small integers of the made-up fences), the
// write at fence.MaxToken is skipped, and where a subtest presents a grant's token
// under another lease id, the suite accepts a *fence.UnissuedTokenError with
// OtherLease (the store proved the lease wrong, P9) as well as the
// *fence.StaleTokenError a guard without P9 returns. l must grant each name at
// once when it is free (no other holder uses the suite's names). A nil l is
// ignored. TestLocker and the other suites ignore this option.
func WithIssuer(l fence.Locker) Option {
	return func(c *config) {
		if l != nil {
			c.issuer = l
		}
	}
}

// WithGuardAsIssuer is WithIssuer for a guard that is itself the Locker and is
// made afresh for each subtest (one store per subtest): each subtest draws its
// fences from the Guarded its factory returned, which must implement
// fence.Locker (the subtest fails otherwise). It overrides WithIssuer.
func WithGuardAsIssuer() Option {
	return func(c *config) { c.guardIssues = true }
}

// Guarded is what TestGuard tests: a fence.Guard that also offers the fenced
// key-value view (a SQL guard wraps a test table to offer Put and Get).
type Guarded interface {
	fence.Guard
	fence.KV
}

// suiteCase is one named check of a conformance suite on a T.
type suiteCase[T any] struct {
	name string
	f    func(*testing.T, T)
}

// runCases runs each case as a subtest of t on a fresh T from newT, and fails a
// subtest whose factory returned nil (what names T in that message).
func runCases[T comparable](t *testing.T, what string, newT func(*testing.T) T, cases []suiteCase[T]) {
	t.Helper()
	var none T
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newT(t)
			if v == none {
				t.Fatalf("fencetest: the factory returned a nil %s", what)
			}
			tc.f(t, v)
		})
	}
}

// uniqueName returns a lock name or key unique to this run of t, built from the
// last element of t.Name() and random hex, using only characters every backend
// accepts in keys.
func uniqueName(t testing.TB, suffix string) string {
	base := t.Name()
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	var b strings.Builder
	b.WriteString("ft-")
	for _, r := range base {
		if b.Len() >= 48 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	b.WriteByte('-')
	b.WriteString(driver.NewLeaseID()[:12])
	if suffix != "" {
		b.WriteByte('-')
		b.WriteString(suffix)
	}
	return b.String()
}

// testContext returns a context bounded by subtestTimeout, cancelled at cleanup.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), subtestTimeout)
	t.Cleanup(cancel)
	return ctx
}
