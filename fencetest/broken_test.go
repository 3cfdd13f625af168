package fencetest_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

// The suite must be able to fail: each broken implementation below has one
// deliberate bug, and TestSuite_CatchesBrokenImplementations runs the suite on it
// in a child process (this test binary, re-executed) and checks that the suite
// reports the subtests the bug breaks, and passes ones it does not touch.

const brokenEnv = "FENCETEST_BROKEN"

// brokenLocker wraps the reference Locker and injects one bug.
type brokenLocker struct {
	inner *inmem.Locker
	bug   string // "reuses-tokens", "ignores-owners", "grants-before-expiry", "wait-ignores-release", "wait-ignores-context", "words-errors-its-own-way", "wait-leaks-cancelled"

	mu      sync.Mutex
	current map[string]string // name -> lease id of the latest grant
}

func newBrokenLocker(bug string) *brokenLocker {
	return &brokenLocker{inner: inmem.NewLocker(inmem.Options{}), bug: bug, current: map[string]string{}}
}

func (b *brokenLocker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	o := driver.ApplyOptions(opts...)
	start := time.Now()
	// The inner lease is only a grant record: renewal is the wrapper lease's job.
	var inner *fence.Lease
	var err error
	switch b.bug {
	case "wait-ignores-release":
		inner, err = b.acquireWakingOnlyAtExpiry(ctx, name, ttl, o.Wait)
	case "wait-ignores-context":
		// Bug: the wait is bounded by WithWait alone.
		inner, err = b.inner.Acquire(context.Background(), name, ttl, fence.WithWait(o.Wait))
	default:
		inner, err = b.inner.Acquire(ctx, name, ttl, fence.WithWait(o.Wait))
	}
	if err != nil && b.bug == "wait-leaks-cancelled" && ctx.Err() != nil && o.Wait > 0 {
		// Bug: the cancelled waiter's request stays queued at the store (a waiter
		// key or node left behind) and is granted later, to nobody.
		go func() { _, _ = b.inner.Acquire(context.Background(), name, ttl, fence.WithWait(time.Minute)) }()
	}
	if err != nil && b.bug == "grants-before-expiry" && errors.Is(err, fence.ErrNotAcquired) && ctx.Err() == nil {
		// Bug: takes the lock over from a holder whose lease has not expired.
		b.mu.Lock()
		id := b.current[name]
		b.mu.Unlock()
		_ = b.inner.Release(ctx, name, id)
		inner, err = b.inner.Acquire(ctx, name, ttl)
	}
	if err != nil && b.bug == "words-errors-its-own-way" {
		// Bug: an acquire loop of its own, which words its errors as it likes.
		return nil, fmt.Errorf("broken: acquire %q: %w", name, err)
	}
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.current[name] = inner.ID()
	b.mu.Unlock()
	tok := inner.Token()
	if b.bug == "reuses-tokens" {
		tok = 1 // Bug: the counter lives in the lock key and restarts with it.
	}
	return driver.NewLease(driver.LeaseConfig{
		Locker: b, Name: name, Token: tok, ID: inner.ID(), TTL: ttl, Start: start, AutoRenew: o.AutoRenew,
	}), nil
}

// acquireWakingOnlyAtExpiry waits for a held lock by sleeping until the holder's
// lease would expire. Bug: a release does not wake it.
func (b *brokenLocker) acquireWakingOnlyAtExpiry(ctx context.Context, name string, ttl, wait time.Duration) (*fence.Lease, error) {
	deadline := time.Now().Add(wait)
	for {
		lease, err := b.inner.Acquire(ctx, name, ttl)
		var held *fence.HeldError
		if err == nil || !errors.As(err, &held) || wait == 0 {
			return lease, err
		}
		sleep := min(held.ExpiresIn, time.Until(deadline))
		if sleep <= 0 {
			return nil, err
		}
		select {
		case <-time.After(sleep):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		}
	}
}

// owner returns the lease id the bug acts on.
func (b *brokenLocker) owner(name, leaseID string) string {
	if b.bug != "ignores-owners" {
		return leaseID
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if id, ok := b.current[name]; ok {
		return id // Bug: acts on the current holder, whoever asks.
	}
	return leaseID
}

func (b *brokenLocker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	return b.inner.Renew(ctx, name, b.owner(name, leaseID), ttl)
}

func (b *brokenLocker) Release(ctx context.Context, name, leaseID string) error {
	return b.inner.Release(ctx, name, b.owner(name, leaseID))
}

// brokenGuard is a KV with a wrong admission rule; the rest is as inmem's.
// deleteBug injects a fault into Delete: "drops-fence" (the fence goes with the
// value) or "unfenced" (the fence is not checked); purgeBug into Purge:
// "keeps-fence" (only the value goes). issued, if set, is the P9
// check run after validation, before the admission rule.
type brokenGuard struct {
	admit     func(resource string, highest, next fence.Fence) error
	deleteBug string
	purgeBug  string
	issued    func(f fence.Fence) error
	mu        sync.Mutex
	items     map[string]fence.Item
}

// admitsEqualFromOtherLease is fence.Admit without the lease comparison.
func admitsEqualFromOtherLease(res string, hi, next fence.Fence) error {
	if hi.Token != 0 && hi.Name == next.Name && next.Token == hi.Token {
		return nil // Bug: an equal token is taken for the same lease.
	}
	return fence.Admit(res, hi, next)
}

// admitsLower is "last writer wins" within a namespace.
func admitsLower(res string, hi, next fence.Fence) error {
	if hi.Name == next.Name {
		return nil // Bug: the token is not compared at all.
	}
	return fence.Admit(res, hi, next)
}

func (g *brokenGuard) check(key string, f fence.Fence) (fence.Item, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, err
	}
	if err := f.Validate(); err != nil {
		return fence.Item{}, err
	}
	if g.issued != nil {
		if err := g.issued(f); err != nil {
			return fence.Item{}, err
		}
	}
	it := g.items[key]
	return it, g.admit(key, it.Fence, f)
}

func (g *brokenGuard) Delete(ctx context.Context, key string, f fence.Fence) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	it, err := g.check(key, f)
	switch {
	case err != nil && g.deleteBug == "unfenced" && !errors.Is(err, fence.ErrInvalid):
		it = g.items[key] // Bug: a refused fence deletes anyway.
	case err != nil:
		return err
	}
	if it.Value == nil {
		return fmt.Errorf("broken: delete %q: %w", key, fence.ErrNotFound)
	}
	if g.deleteBug == "drops-fence" {
		delete(g.items, key) // Bug: the fence goes with the value.
		return nil
	}
	g.items[key] = fence.Item{Fence: f}
	return nil
}

func (g *brokenGuard) Purge(ctx context.Context, key string) error {
	if err := fence.ValidateKey(key); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	it, ok := g.items[key]
	if !ok || (g.purgeBug == "keeps-fence" && it.Value == nil) {
		return fmt.Errorf("broken: purge %q: %w", key, fence.ErrNotFound)
	}
	if g.purgeBug == "keeps-fence" {
		g.items[key] = fence.Item{Fence: it.Fence} // Bug: the fence stays.
		return nil
	}
	delete(g.items, key)
	return nil
}

// issuingKV is an IssuingKV for the P9 suite: the reference Locker, whose grants
// it records (each name's last token, each live lease's id), and a brokenGuard
// that checks fences against them. bug injects one fault: "skips-issued-check"
// (no P9 check), "ignores-lease" (tokens are checked, lease ids are not) or
// "admits-leaseless" (a live lease's token without a lease id is admitted).
type issuingKV struct {
	*inmem.Locker
	*brokenGuard
	bug  string
	mu   sync.Mutex
	last map[string]fence.Token
	live map[string]map[fence.Token]string // name -> token -> lease id
}

func newIssuingKV(bug string) *issuingKV {
	k := &issuingKV{
		Locker:      inmem.NewLocker(inmem.Options{}),
		brokenGuard: &brokenGuard{admit: fence.Admit, items: map[string]fence.Item{}},
		bug:         bug,
		last:        map[string]fence.Token{},
		live:        map[string]map[fence.Token]string{},
	}
	if bug != "skips-issued-check" {
		k.brokenGuard.issued = k.checkIssued
	}
	return k
}

func (k *issuingKV) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	l, err := k.Locker.Acquire(ctx, name, ttl, opts...)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last[name] = max(k.last[name], l.Token())
	if k.live[name] == nil {
		k.live[name] = map[fence.Token]string{}
	}
	k.live[name][l.Token()] = l.ID()
	return l, nil
}

func (k *issuingKV) Release(ctx context.Context, name, leaseID string) error {
	k.mu.Lock()
	for tok, id := range k.live[name] {
		if id == leaseID {
			delete(k.live[name], tok)
		}
	}
	k.mu.Unlock()
	return k.Locker.Release(ctx, name, leaseID)
}

func (k *issuingKV) checkIssued(f fence.Fence) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := fence.CheckIssued(f, k.last[f.Name]); err != nil {
		return err
	}
	if id, ok := k.live[f.Name][f.Token]; ok && f.LeaseID != "" && f.LeaseID != id && k.bug != "ignores-lease" {
		return &fence.UnissuedTokenError{Lock: f.Name, Token: f.Token, Last: k.last[f.Name], OtherLease: true}
	}
	if _, live := k.live[f.Name][f.Token]; k.bug != "admits-leaseless" {
		return fence.CheckLeaseGiven(f, live)
	}
	return nil
}

func issuingCase(bug string) func(t *testing.T) {
	return func(t *testing.T) {
		fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return newIssuingKV(bug) })
		fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return newIssuingKV(bug) }, fencetest.WithGuardAsIssuer())
		shared := newIssuingKV(bug)
		t.Run("OneStore", func(t *testing.T) {
			fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return shared }, fencetest.WithIssuer(shared))
		})
	}
}

func (g *brokenGuard) Fence(ctx context.Context, key string, f fence.Fence) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	it, err := g.check(key, f)
	if err != nil {
		return err
	}
	it.Fence = f
	g.items[key] = it
	return nil
}

func (g *brokenGuard) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := g.check(key, f); err != nil {
		return err
	}
	g.items[key] = fence.Item{Value: append([]byte{}, value...), Fence: f}
	return nil
}

func (g *brokenGuard) Get(ctx context.Context, key string) (fence.Item, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	it, ok := g.items[key]
	if !ok {
		return fence.Item{}, fmt.Errorf("broken: get %q: %w", key, fence.ErrNotFound)
	}
	it.Value = append([]byte(nil), it.Value...)
	return it, nil
}

// brokenWatcher is the reference Locker with a broken Watch.
type brokenWatcher struct {
	*inmem.Locker
	bug    string // "polls-only", "replays-stale", "skips-acquires"
	engine driver.Engine
}

func newBrokenWatcher(bug string) *brokenWatcher {
	b := &brokenWatcher{Locker: inmem.NewLocker(inmem.Options{}), bug: bug}
	b.engine = driver.Engine{Backend: "broken", Locker: b}
	return b
}

func (b *brokenWatcher) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	if b.bug == "polls-only" {
		// Bug: nothing signals a change; only the fallback poll and the holder's
		// expiry make the watch look again.
		never := func(context.Context, string) (<-chan struct{}, error) { return make(chan struct{}), nil }
		return b.engine.Watch(ctx, name, never, b.Inspect)
	}
	if b.bug == "skips-acquires" {
		// Bug: only a release (or revoke) signals a change, as if the backend
		// published on release alone; an acquire is found by the fallback poll.
		onRelease := func(ctx context.Context, name string) (<-chan struct{}, error) {
			c := make(chan struct{}, 1)
			go func() {
				for info, err := range b.Locker.Watch(ctx, name) {
					if err == nil && !info.Held {
						select {
						case c <- struct{}{}:
						default:
						}
					}
				}
			}()
			return c, nil
		}
		return b.engine.Watch(ctx, name, onRelease, b.Inspect)
	}
	return func(yield func(fence.LockInfo, error) bool) {
		// Bug: a cache that hands out the previous state again after each new one.
		var prev *fence.LockInfo
		for info, err := range b.Locker.Watch(ctx, name) {
			if !yield(info, err) {
				return
			}
			if prev != nil && !yield(*prev, nil) {
				return
			}
			prev = &info
		}
	}
}

// brokenHealer is the reference Locker with a Heal that has one bug:
// "heals-every-name" raises every name it granted to seen too (one counter for
// every name, as the embedded store had before the heal bound), "ignores-bound"
// answers nil to a heal beyond fence.MaxHealAhead, healing nothing.
type brokenHealer struct {
	*inmem.Locker
	bug string

	mu    sync.Mutex
	names map[string]bool
}

func newBrokenHealer(bug string) *brokenHealer {
	return &brokenHealer{Locker: inmem.NewLocker(inmem.Options{}), bug: bug, names: map[string]bool{}}
}

func (b *brokenHealer) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	b.mu.Lock()
	b.names[name] = true
	b.mu.Unlock()
	return b.Locker.Acquire(ctx, name, ttl, opts...)
}

func (b *brokenHealer) Heal(ctx context.Context, name string, seen fence.Token) error {
	err := b.Locker.Heal(ctx, name, seen)
	var bound *fence.HealBoundError
	switch {
	case b.bug == "ignores-bound" && errors.As(err, &bound):
		return nil // Bug: says healed.
	case b.bug == "heals-every-name" && err == nil:
		b.mu.Lock()
		defer b.mu.Unlock()
		for other := range b.names {
			// Bug: the other names' counters move too (in steps, as the
			// reference bounds each heal).
			for other != name && errors.As(b.Locker.Heal(ctx, other, seen), &bound) {
				if err := b.Locker.Heal(ctx, other, bound.Last+fence.MaxHealAhead); err != nil {
					return err
				}
			}
		}
	}
	return err
}

type brokenCase struct {
	run      func(t *testing.T)
	wantFail []string // subtests the bug must make fail
	wantPass []string // subtests it does not touch, which must still pass
}

func lockerCase(bug string) func(t *testing.T) {
	return func(t *testing.T) {
		fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newBrokenLocker(bug) })
	}
}

func guardCase(admit func(string, fence.Fence, fence.Fence) error) func(t *testing.T) {
	return guardDeleteCase(admit, "")
}

func guardDeleteCase(admit func(string, fence.Fence, fence.Fence) error, deleteBug string) func(t *testing.T) {
	return func(t *testing.T) {
		fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded {
			return &brokenGuard{admit: admit, deleteBug: deleteBug, items: map[string]fence.Item{}}
		})
	}
}

var brokenCases = map[string]brokenCase{
	// The control: the same harness on the reference implementation passes.
	"reference-locker": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return inmem.NewLocker(inmem.Options{}) })
		},
		wantPass: []string{"Token_IncreasesUnder16Goroutines", "Owner_OnlyHolderRenewsOrReleases", "Expiry_NotGrantedBeforeGrantedAfter", "AcquireErrors_WordedAlikeOnEveryBackend",
			"Inspector_ReportsState", "Inspector_ListHeldByDefault_AllListsFree_LimitCountsHeld",
			"Healer_NextTokenAboveSeen", "Healer_OneNameDoesNotMoveAnothersToken", "Healer_BeyondMaxHealAhead_Refused",
			"Watcher_YieldsEveryChangeInOrder", "Watcher_SlowReceiverGetsLatest", "Watcher_BadNameAndCancelEnd",
			"Election_OneLeaderPerEpoch_EpochsIncrease", "Election_ObserversSeeEveryChangeInOrder", "Election_ResignHandsOffAtOnce", "Election_CancelledCampaignLeavesNothing"},
	},
	// The reference without its optional capabilities: the election subtests that
	// need none of them still pass through the brokenLocker wrapper.
	"reference-wrapped-locker": {
		run:      lockerCase(""),
		wantPass: []string{"Election_OneLeaderPerEpoch_EpochsIncrease", "Election_ResignHandsOffAtOnce", "Election_CancelledCampaignLeavesNothing"},
	},
	"reference-guard": {
		run: guardCase(fence.Admit),
		wantPass: []string{"Put_LowerToken_RejectedWithHighest", "Put_EqualTokenOtherLease_Rejected", "Concurrent_16Goroutines_HighestWins",
			"Delete_RemovesValue_KeepsFence_StaleWriterRefused", "Delete_UnderTheWritersLease_Accepted", "Delete_LowerOtherLeaseOrNamespace_Refused_ValueKept",
			"Delete_NoValue_ErrNotFound_NothingChanged", "Delete_BadKeysAndFences_RejectedWithErrInvalid", "Purge_RemovesValueAndFence_LowerTokenAdmittedAfter"},
	},
	// The control for the P9 suite, and TestGuard drawing real fences from it,
	// one store per subtest and one store for all (OneStore).
	"reference-issuing-kv": {
		run: issuingCase(""),
		wantPass: []string{"TokenAboveLastIssued_Refused_NothingWritten", "LockNeverGranted_Refused_NothingWritten", "OtherLeaseForLiveLeasesToken_Refused",
			"RealHoldersFence_Admitted", "LiveLeasesTokenWithoutLease_Refused_EndedLeasesAdmitted",
			"Delete_KeepsFence_StaleWriterRefused_NeverWrittenNotFound", "Purge_RemovesValueAndFence",
			"Put_EqualTokenOtherLease_Rejected", "Fence_LowerOrOtherLease_Rejected", "Concurrent_16Goroutines_HighestWins", "Put_HigherToken_Accepted_TokensMaySkip",
			"Delete_LowerOtherLeaseOrNamespace_Refused_ValueKept", "Purge_RemovesValueAndFence_LowerTokenAdmittedAfter",
			"Permit_OtherPermitsLease_Refused_EachOwnAdmitted", "OneStore"},
	},
	"issuing-kv-skips-issued-check": {
		run:      issuingCase("skips-issued-check"),
		wantFail: []string{"TokenAboveLastIssued_Refused_NothingWritten", "LockNeverGranted_Refused_NothingWritten", "OtherLeaseForLiveLeasesToken_Refused"},
		wantPass: []string{"RealHoldersFence_Admitted", "Delete_KeepsFence_StaleWriterRefused_NeverWrittenNotFound", "Purge_RemovesValueAndFence", "Put_EqualTokenOtherLease_Rejected"},
	},
	// The holder of a live lease fenced out by anyone who read its token: a
	// lease-less write is stored and refuses the holder's own.
	"issuing-kv-admits-leaseless": {
		run:      issuingCase("admits-leaseless"),
		wantFail: []string{"LiveLeasesTokenWithoutLease_Refused_EndedLeasesAdmitted", "Permit_OtherPermitsLease_Refused_EachOwnAdmitted"},
		wantPass: []string{"TokenAboveLastIssued_Refused_NothingWritten", "OtherLeaseForLiveLeasesToken_Refused", "RealHoldersFence_Admitted"},
	},
	"issuing-kv-ignores-lease": {
		run:      issuingCase("ignores-lease"),
		wantFail: []string{"OtherLeaseForLiveLeasesToken_Refused", "Permit_OtherPermitsLease_Refused_EachOwnAdmitted"},
		wantPass: []string{"TokenAboveLastIssued_Refused_NothingWritten", "LockNeverGranted_Refused_NothingWritten", "RealHoldersFence_Admitted"},
	},
	"guard-delete-drops-fence": {
		run:      guardDeleteCase(fence.Admit, "drops-fence"),
		wantFail: []string{"Delete_RemovesValue_KeepsFence_StaleWriterRefused", "Delete_UnderTheWritersLease_Accepted"},
		wantPass: []string{"Delete_LowerOtherLeaseOrNamespace_Refused_ValueKept", "Delete_NoValue_ErrNotFound_NothingChanged", "Put_LowerToken_RejectedWithHighest"},
	},
	"guard-delete-unfenced": {
		run:      guardDeleteCase(fence.Admit, "unfenced"),
		wantFail: []string{"Delete_LowerOtherLeaseOrNamespace_Refused_ValueKept"},
		wantPass: []string{"Delete_RemovesValue_KeepsFence_StaleWriterRefused", "Delete_BadKeysAndFences_RejectedWithErrInvalid", "Put_LowerToken_RejectedWithHighest"},
	},
	"guard-purge-keeps-fence": {
		run: func(t *testing.T) {
			fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded {
				return &brokenGuard{admit: fence.Admit, purgeBug: "keeps-fence", items: map[string]fence.Item{}}
			})
		},
		wantFail: []string{"Purge_RemovesValueAndFence_LowerTokenAdmittedAfter"},
		wantPass: []string{"Delete_RemovesValue_KeepsFence_StaleWriterRefused", "Put_LowerToken_RejectedWithHighest"},
	},
	// The control of the write-attempt suite, and a KV that ignores attempt ids.
	"reference-write-attempts": {
		run: func(t *testing.T) {
			fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return inmem.NewGuard() })
		},
		wantPass: writeAttemptSubtests,
	},
	"kv-ignores-write-attempts": {
		run: func(t *testing.T) {
			fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded {
				return &brokenGuard{admit: fence.Admit, items: map[string]fence.Item{}}
			})
		},
		wantFail: []string{"Put_LateAttempt_LaterWriteStays", "Delete_LateAttempt_LaterWriteStays", "Delete_RetryAfterApplied_Succeeds",
			"SameIDOtherContent_AnotherWrite_Applied", "Remembered_ForMaxWriteAttemptsWrites", "BadAttemptID_ErrInvalid_NothingChanged"},
		wantPass: []string{"FenceMoved_LateAttemptStale_IDsForgotten"},
	},
	"healer-heals-every-name": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newBrokenHealer("heals-every-name") })
		},
		wantFail: []string{"Healer_OneNameDoesNotMoveAnothersToken"},
		wantPass: []string{"Healer_NextTokenAboveSeen", "Healer_BeyondMaxHealAhead_Refused"},
	},
	"healer-ignores-bound": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newBrokenHealer("ignores-bound") })
		},
		wantFail: []string{"Healer_BeyondMaxHealAhead_Refused"},
		wantPass: []string{"Healer_NextTokenAboveSeen", "Healer_OneNameDoesNotMoveAnothersToken"},
	},
	"locker-reuses-tokens": {
		run:      lockerCase("reuses-tokens"),
		wantFail: []string{"Token_IncreasesUnder16Goroutines", "Token_IncreasesAfterReleaseAndExpiry", "Release_ThenRenewAndReleaseGiveErrNotHeld", "Election_OneLeaderPerEpoch_EpochsIncrease"},
		wantPass: []string{"Owner_OnlyHolderRenewsOrReleases", "BadTTLs_Rejected"},
	},
	"locker-ignores-owners": {
		run:      lockerCase("ignores-owners"),
		wantFail: []string{"Owner_OnlyHolderRenewsOrReleases", "Release_Retried_NeverReleasesNextHolder", "ExpiredLease_CannotRenewOrReleaseNextHolder"},
		wantPass: []string{"Token_IncreasesUnder16Goroutines", "BadTTLs_Rejected"},
	},
	"locker-grants-before-expiry": {
		run:      lockerCase("grants-before-expiry"),
		wantFail: []string{"Acquire_HeldLock_ErrNotAcquired", "Expiry_NotGrantedBeforeGrantedAfter", "Wait_BoundedByWait"},
		wantPass: []string{"LeaseIDs_DistinctAndAtLeast128Bits", "BadNames_Rejected"},
	},
	"locker-wait-ignores-release": {
		run:      lockerCase("wait-ignores-release"),
		wantFail: []string{"Wait_WokenByRelease", "Election_ResignHandsOffAtOnce", "Election_CancelledCampaignLeavesNothing"},
		wantPass: []string{"Expiry_NotGrantedBeforeGrantedAfter", "Wait_ContextCancelReturnsPromptly"},
	},
	// A bug the locker subtests miss: every wait ends as it should.
	"locker-wait-leaks-cancelled": {
		run:      lockerCase("wait-leaks-cancelled"),
		wantFail: []string{"Election_CancelledCampaignLeavesNothing"},
		wantPass: []string{"Wait_ContextCancelReturnsPromptly", "Wait_ContextDeadlineReturnsPromptly", "Wait_WokenByRelease", "Election_ResignHandsOffAtOnce"},
	},
	"locker-wait-ignores-context": {
		run:      lockerCase("wait-ignores-context"),
		wantFail: []string{"Wait_ContextCancelReturnsPromptly", "Wait_ContextDeadlineReturnsPromptly"},
		wantPass: []string{"Wait_WokenByRelease", "Wait_BoundedByWait"},
	},
	"locker-words-errors-its-own-way": {
		run:      lockerCase("words-errors-its-own-way"),
		wantFail: []string{"AcquireErrors_WordedAlikeOnEveryBackend"},
		wantPass: []string{"Acquire_HeldLock_ErrNotAcquired", "Wait_BoundedByWait"},
	},
	"watcher-polls-only": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newBrokenWatcher("polls-only") })
		},
		wantFail: []string{"Watcher_YieldsEveryChangeInOrder"},
		wantPass: []string{"Watcher_BadNameAndCancelEnd", "Revoker_EndsLeaseWakesWaiterNextTokenHigher"},
	},
	"watcher-replays-stale": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newBrokenWatcher("replays-stale") })
		},
		wantFail: []string{"Watcher_YieldsEveryChangeInOrder", "Watcher_SlowReceiverGetsLatest", "Election_ObserversSeeEveryChangeInOrder"},
		wantPass: []string{"Watcher_BadNameAndCancelEnd", "Wait_WokenByRelease"},
	},
	"watcher-skips-acquires": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newBrokenWatcher("skips-acquires") })
		},
		wantFail: []string{"Election_ObserversSeeEveryChangeInOrder", "Watcher_YieldsEveryChangeInOrder"},
		wantPass: []string{"Watcher_BadNameAndCancelEnd", "Election_ResignHandsOffAtOnce", "Election_OneLeaderPerEpoch_EpochsIncrease"},
	},
	"lister-limits-before-held": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
				return &brokenLister{Locker: inmem.NewLocker(inmem.Options{}), bug: "limits-before-held"}
			})
		},
		wantFail: []string{"Inspector_ListHeldByDefault_AllListsFree_LimitCountsHeld"},
		wantPass: []string{"Inspector_ReportsState", "Owner_ReportedWhileHeldNeverTheLeaseID"},
	},
	"lister-lists-free": {
		run: func(t *testing.T) {
			fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
				return &brokenLister{Locker: inmem.NewLocker(inmem.Options{}), bug: "lists-free"}
			})
		},
		wantFail: []string{"Inspector_ListHeldByDefault_AllListsFree_LimitCountsHeld"},
		wantPass: []string{"Inspector_ReportsState", "Owner_ReportedWhileHeldNeverTheLeaseID"},
	},
	// The control for the semaphore and shared-lock subtests: a correct
	// Engine-based locker that declares both.
	"reference-sem-locker": {
		run:      semCase(""),
		wantPass: append(append(semaphoreSubtests, sharedSubtests...), "Inspector_ListHeldByDefault_AllListsFree_LimitCountsHeld"),
	},
	"sem-grants-n-plus-1": {
		run:      semCase("grants-n-plus-1"),
		wantFail: []string{"Semaphore_AtMostNUnder16Goroutines", "Semaphore_NPlus1thHeld_LowestFreeSlotReused", "Semaphore_OwnerOnly_RenewReleaseTouchOnePermit", "Semaphore_Expiry_FreesOnePermitDoneCloses"},
		wantPass: []string{"Semaphore_LimitMismatch_LimitErrorWhileLive", "Semaphore_Inspector_HoldersInSlotOrder", "Shared_WriterNotStarvedByStreamOfReaders"},
	},
	"sem-reuses-slot": {
		run:      semCase("reuses-slot"),
		wantFail: []string{"Semaphore_NPlus1thHeld_LowestFreeSlotReused", "Semaphore_OwnerOnly_RenewReleaseTouchOnePermit", "Semaphore_AtMostNUnder16Goroutines"},
		wantPass: []string{"Semaphore_TokensIncreaseAcrossSlotsAndLocks", "Semaphore_LimitMismatch_LimitErrorWhileLive", "Shared_ManyHolders_ExclusiveHeld_TokensIncrease"},
	},
	"sem-no-writer-preference": {
		run:      semCase("no-writer-preference"),
		wantFail: []string{"Shared_WriterPreferred_NewSharedHeldWhileExclusiveWaits", "Shared_WriterNotStarvedByStreamOfReaders", "Shared_WriterWithShortTTL_PreferredWhileItWaits"},
		wantPass: []string{"Shared_ExclusiveWaiter_GrantedWhenLastLeaves", "Shared_ExclusiveWaiterGivesUp_SharedAgainWithinItsTTL", "Semaphore_AtMostNUnder16Goroutines"},
	},
	"sem-waiter-record-lapses": {
		run:      semCase("waiter-record-lapses"),
		wantFail: []string{"Shared_WriterWithShortTTL_PreferredWhileItWaits"},
		wantPass: []string{"Shared_WriterPreferred_NewSharedHeldWhileExclusiveWaits", "Shared_WriterNotStarvedByStreamOfReaders", "Shared_ExclusiveWaiterGivesUp_SharedAgainWithinItsTTL"},
	},
	"sem-ignores-limit-mismatch": {
		run:      semCase("ignores-limit-mismatch"),
		wantFail: []string{"Semaphore_LimitMismatch_LimitErrorWhileLive"},
		wantPass: []string{"Semaphore_AtMostNUnder16Goroutines", "Semaphore_NPlus1thHeld_LowestFreeSlotReused", "Shared_MixedWithLimit_LimitError"},
	},
	"guard-admits-equal-token-from-other-lease": {
		run:      guardCase(admitsEqualFromOtherLease),
		wantFail: []string{"Put_EqualTokenOtherLease_Rejected", "Fence_LowerOrOtherLease_Rejected"},
		wantPass: []string{"Put_LowerToken_RejectedWithHighest", "Put_OtherNamespace_Rejected"},
	},
	"guard-admits-lower-token": {
		run:      guardCase(admitsLower),
		wantFail: []string{"Put_LowerToken_RejectedWithHighest", "Put_Rejected_LeavesOldValue", "Fence_AdvancesWithoutData_FencesOffOlder"},
		wantPass: []string{"Put_SeveralWritesUnderOneLease_Accepted", "Put_OtherNamespace_Rejected"},
	},
}

// The subtests of semaphores and shared locks, which the control must pass.
var (
	semaphoreSubtests = []string{"Semaphore_AtMostNUnder16Goroutines", "Semaphore_NPlus1thHeld_LowestFreeSlotReused",
		"Semaphore_TokensIncreaseAcrossSlotsAndLocks", "Semaphore_LimitMismatch_LimitErrorWhileLive",
		"Semaphore_OwnerOnly_RenewReleaseTouchOnePermit", "Semaphore_Expiry_FreesOnePermitDoneCloses",
		"Semaphore_Wait_WokenByOneRelease", "Semaphore_Wait_ContextCancelReturnsPromptly",
		"Semaphore_Inspector_HoldersInSlotOrder", "Semaphore_Revoker_EndsEveryLease",
		"Semaphore_BadLimits_Rejected", "Semaphore_Limit1_IsALock"}
	sharedSubtests = []string{"Shared_ManyHolders_ExclusiveHeld_TokensIncrease", "Shared_ExclusiveWaiter_GrantedWhenLastLeaves",
		"Shared_HeldWhileExclusive_WokenByRelease", "Shared_WriterPreferred_NewSharedHeldWhileExclusiveWaits",
		"Shared_WriterNotStarvedByStreamOfReaders", "Shared_WriterWithShortTTL_PreferredWhileItWaits", "Shared_ExclusiveWaiterGivesUp_SharedAgainWithinItsTTL",
		"Shared_OwnerOnlyAndExpiry", "Shared_Inspector_HoldersInTokenOrder", "Shared_Revoker_EndsEveryLease",
		"Shared_MixedWithLimit_LimitError"}
)

// The subtests of TestWriteAttempts, which the control must pass.
var writeAttemptSubtests = []string{"Put_LateAttempt_LaterWriteStays", "Delete_LateAttempt_LaterWriteStays", "Delete_RetryAfterApplied_Succeeds",
	"FenceMoved_LateAttemptStale_IDsForgotten", "SameIDOtherContent_AnotherWrite_Applied", "Remembered_ForMaxWriteAttemptsWrites",
	"Bounded_ForgottenAfterMaxWriteAttemptsWrites", "BadAttemptID_ErrInvalid_NothingChanged"}

// TestBrokenSubject is the child side: it runs the suite on the implementation
// named by $FENCETEST_BROKEN. Outside a child it skips.
func TestBrokenSubject(t *testing.T) {
	kind := os.Getenv(brokenEnv)
	if kind == "" {
		t.Skip("runs only in the child process started by TestSuite_CatchesBrokenImplementations")
	}
	c, ok := brokenCases[kind]
	if !ok {
		t.Fatalf("unknown %s=%q", brokenEnv, kind)
	}
	c.run(t)
}

func TestSuite_CatchesBrokenImplementations(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("already in a child process")
	}
	for kind, c := range brokenCases {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// Only the subtests the case names run, which keeps seven children cheap
			// enough not to slow each other into timing failures.
			pattern := "^TestBrokenSubject$/^(" + strings.Join(append(append([]string(nil), c.wantFail...), c.wantPass...), "|") + ")$"
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1", "-test.timeout=3m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+kind)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			switch {
			case len(c.wantFail) == 0 && err != nil:
				t.Fatalf("suite on %s failed (%v); want it to pass. Output:\n%s", kind, err, out)
			case len(c.wantFail) > 0 && err == nil:
				t.Fatalf("suite on %s passed; want it to fail. Output:\n%s", kind, out)
			case err != nil && !errors.As(err, &exit):
				t.Fatalf("running the child: %v", err)
			}
			for _, name := range c.wantFail {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenSubject/"+name+" (") {
					t.Errorf("suite on %s: want subtest %s reported as failing; output:\n%s", kind, name, out)
				}
			}
			for _, name := range c.wantPass {
				if !strings.Contains(string(out), "--- PASS: TestBrokenSubject/"+name+" (") {
					t.Errorf("suite on %s: want subtest %s to pass (the bug does not touch it); output:\n%s", kind, name, out)
				}
			}
		})
	}
}

// semLocker is a small Locker of locks, semaphores and shared locks on the one
// acquire engine, deciding grants with driver.Decide; bug injects one fault:
// "grants-n-plus-1" (one permit beyond the limit), "reuses-slot" (a slot by
// count, not the lowest free one), "no-writer-preference" (a waiting exclusive
// acquire does not hold new shared ones off), "waiter-record-lapses" (a waiting
// exclusive acquire holds them off for its TTL only) or "ignores-limit-mismatch"
// (a semaphore acquire with another limit is decided by its own). With no bug
// it is the control for the suites.
type semLocker struct {
	bug    string
	engine driver.Engine

	mu    sync.Mutex
	names map[string]*semState
}

type semState struct {
	counter     fence.Token
	live        []driver.Holding
	waiterUntil time.Time     // an exclusive acquire waits for shared holders until then
	ended       chan struct{} // closed (and replaced) when a lease is released or revoked
}

var (
	_ fence.FeatureLocker = (*semLocker)(nil)
	_ fence.Inspector     = (*semLocker)(nil)
	_ fence.Revoker       = (*semLocker)(nil)
)

func newSemLocker(bug string) *semLocker {
	s := &semLocker{bug: bug, names: map[string]*semState{}}
	s.engine = driver.Engine{Backend: "sem", Locker: s, Features: s.Features()}
	return s
}

func (s *semLocker) Features() fence.Features { return fence.Features{Semaphores: true, Shared: true} }

// stateLocked returns name's state with its expired leases dropped. s.mu is held.
func (s *semLocker) stateLocked(name string, now time.Time) *semState {
	st := s.names[name]
	if st == nil {
		st = &semState{ended: make(chan struct{})}
		s.names[name] = st
	}
	st.live = slices.DeleteFunc(st.live, func(h driver.Holding) bool { return !now.Before(h.Expires) })
	return st
}

func (s *semLocker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	return s.engine.Acquire(ctx, name, ttl, opts, s.try)
}

func (s *semLocker) try(_ context.Context, r *driver.Request) (driver.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	st := s.stateLocked(r.Name, now)
	live, waiterUntil := st.live, st.waiterUntil
	switch s.bug {
	case "no-writer-preference":
		waiterUntil = time.Time{} // Bug: the waiting writer is not recorded.
	case "ignores-limit-mismatch":
		live = slices.Clone(live)
		for i := range live {
			if live[i].Limit > 0 && r.Options.Limit > 0 {
				live[i].Limit = r.Options.Limit // Bug: each acquirer's limit is taken as the name's.
			}
		}
	}
	d, err := driver.Decide(r, live, now, waiterUntil)
	if err != nil {
		return driver.Result{}, err
	}
	limit := r.Options.Limit
	switch {
	case s.bug == "grants-n-plus-1" && !d.Grant && limit > 0 && len(live) == limit:
		d = driver.Decision{Grant: true, Slot: limit} // Bug: off by one.
	case s.bug == "reuses-slot" && d.Grant && limit > 0:
		d.Slot = len(live) % limit // Bug: the next slot by count, live or not.
	}
	if !d.Grant {
		res := driver.Result{ExpiresIn: d.ExpiresIn, Wake: st.ended}
		if d.MarkWaiter {
			// Try again before the record ends, so a waiter keeps its preference.
			st.waiterUntil = now.Add(driver.WaiterFor(r))
			if s.bug != "waiter-record-lapses" { // Bug: the waiter tries again only when woken.
				res.Retry = min(d.ExpiresIn, driver.WaiterFor(r)/2)
			}
		}
		return res, nil
	}
	if st.counter >= fence.MaxToken {
		return driver.Result{}, fence.ErrTokenExhausted
	}
	st.counter++
	if limit == 0 && !r.Options.Shared {
		st.waiterUntil = time.Time{}
	}
	st.live = append(st.live, driver.Holding{
		ID: r.ID, Token: st.counter, Owner: r.Options.Owner, Slot: d.Slot, Limit: limit,
		Shared: r.Options.Shared, Expires: now.Add(r.TTL),
	})
	return driver.Result{Token: st.counter, Slot: d.Slot}, nil
}

// find returns name's state and the index of leaseID's live lease in it, or
// ErrNotHeld. s.mu is held.
func (s *semLocker) findLocked(op, name, leaseID string) (*semState, int, error) {
	if err := driver.ValidateLease(name, leaseID); err != nil {
		return nil, 0, fmt.Errorf("sem: %s: %w", op, err)
	}
	st := s.stateLocked(name, time.Now())
	i := slices.IndexFunc(st.live, func(h driver.Holding) bool { return h.ID == leaseID })
	if i < 0 {
		return nil, 0, fmt.Errorf("sem: %s %q: %w", op, name, fence.ErrNotHeld)
	}
	return st, i, nil
}

func (s *semLocker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, i, err := s.findLocked("renew", name, leaseID)
	if err != nil {
		return err
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("sem: renew %q: %w", name, err)
	}
	st.live[i].Expires = time.Now().Add(ttl)
	return nil
}

func (s *semLocker) Release(ctx context.Context, name, leaseID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, i, err := s.findLocked("release", name, leaseID)
	if err != nil {
		return err
	}
	st.live = slices.Delete(st.live, i, i+1)
	st.endLocked()
	return nil
}

func (s *semLocker) Revoke(ctx context.Context, name string) error {
	if err := fence.ValidateName(name); err != nil {
		return fmt.Errorf("sem: revoke: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(name, time.Now())
	if len(st.live) == 0 {
		return fmt.Errorf("sem: revoke %q: %w", name, fence.ErrNotHeld)
	}
	st.live = nil
	st.endLocked()
	return nil
}

// endLocked wakes the waiters after a lease ended.
func (st *semState) endLocked() {
	close(st.ended)
	st.ended = make(chan struct{})
}

func (s *semLocker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := fence.ValidateName(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("sem: inspect: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	st := s.stateLocked(name, now)
	return driver.Info(name, st.live, st.counter, now), nil
}

func (s *semLocker) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []fence.LockInfo
	for _, name := range slices.Sorted(maps.Keys(s.names)) {
		st := s.stateLocked(name, now)
		info := driver.Info(name, st.live, st.counter, now)
		if st.counter > 0 && strings.HasPrefix(name, opts.Prefix) && driver.Listed(info, opts) && len(out) < driver.ListLimit(opts.Limit) {
			out = append(out, info)
		}
	}
	return out, nil
}

// brokenLister is the reference Locker with a broken List.
type brokenLister struct {
	*inmem.Locker
	bug string // "limits-before-held", "lists-free"
}

func (b *brokenLister) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	if b.bug == "lists-free" {
		opts.All = true // Bug: free names are listed as if All were asked for.
		return b.Locker.List(ctx, opts)
	}
	// Bug: the limit is applied to the names, before the free ones are dropped.
	list, err := b.Locker.List(ctx, fence.ListOptions{Prefix: opts.Prefix, Limit: opts.Limit, All: true})
	return slices.DeleteFunc(list, func(i fence.LockInfo) bool { return !driver.Listed(i, opts) }), err
}

func semCase(bug string) func(t *testing.T) {
	return func(t *testing.T) {
		fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return newSemLocker(bug) })
	}
}
