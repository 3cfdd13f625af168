package fencetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fence"
)

// requestCases are TestLocker's checks of request ids (fence.WithRequestID).
// RequestID_Retry_* run on a Locker whose Features declare RequestIDs and skip
// otherwise; the check of bad ids holds for every Locker.
func (s *lockerSuite) requestCases() []suiteCase[fence.Locker] {
	return []suiteCase[fence.Locker]{
		{"RequestID_Retry_ReturnsTheLiveGrant", s.requestRetryLock},
		{"RequestID_Retry_SemaphoreAndSharedReturnTheirGrant", s.requestRetryKinds},
		{"RequestID_BadIDs_Rejected", s.requestBadIDs},
	}
}

// needRequestIDs skips t unless l declares Features.RequestIDs.
func needRequestIDs(t *testing.T, l fence.Locker) {
	t.Helper()
	if !fence.FeaturesOf(l).RequestIDs {
		t.Skipf("%T does not declare Features.RequestIDs", l)
	}
}

// wantSameGrant fails unless retry is the grant of first: same lease id, token
// and slot.
func wantSameGrant(t *testing.T, what string, first, retry *fence.Lease) {
	t.Helper()
	if retry.ID() != first.ID() || retry.Token() != first.Token() || retry.Slot() != first.Slot() {
		t.Fatalf("%s: got lease token %d slot %d (same id: %v); want the first grant's token %d slot %d and lease id",
			what, retry.Token(), retry.Slot(), retry.ID() == first.ID(), first.Token(), first.Slot())
	}
}

func (s *lockerSuite) requestRetryLock(t *testing.T, l fence.Locker) {
	needRequestIDs(t, l)
	name := uniqueName(t, "")
	id := "req-" + uniqueName(t, "a")
	first := acquire(t, l, name, longTTL, fence.WithRequestID(id))
	releaseAtCleanup(t, first)
	retry, err := fence.TryAcquire(testContext(t), l, name, longTTL, fence.WithRequestID(id))
	if err != nil {
		t.Fatalf("a retry of an acquire with the same request id = %v; want the live grant it made", err)
	}
	wantSameGrant(t, "retry with the same request id", first, retry)
	// The retry renewed the grant: it is still live, and still the only one.
	if err := first.Renew(testContext(t), longTTL); err != nil {
		t.Fatalf("Renew of the first lease after its retry = %v; want nil (one grant, still held)", err)
	}
	other, err := fence.TryAcquire(testContext(t), l, name, longTTL, fence.WithRequestID(id+"-other"))
	if err == nil {
		releaseAtCleanup(t, other)
		t.Fatalf("another request id got token %d while the first grant is live; want ErrNotAcquired (P6)", other.Token())
	}
	wantErrIs(t, "TryAcquire with another request id", err, fence.ErrNotAcquired)
	if err := first.Release(testContext(t)); err != nil {
		t.Fatalf("Release = %v; want nil", err)
	}
	again := acquire(t, l, name, longTTL, fence.WithRequestID(id))
	releaseAtCleanup(t, again)
	if again.Token() <= first.Token() || again.ID() == first.ID() {
		t.Fatalf("the request id after its grant ended got token %d (same lease id: %v); want a new grant above token %d",
			again.Token(), again.ID() == first.ID(), first.Token())
	}
}

func (s *lockerSuite) requestRetryKinds(t *testing.T, l fence.Locker) {
	needRequestIDs(t, l)
	f := fence.FeaturesOf(l)
	if f.Semaphores {
		name := uniqueName(t, "sem")
		id := "req-" + uniqueName(t, "s")
		p0 := acquire(t, l, name, longTTL, fence.WithLimit(semN))
		releaseAtCleanup(t, p0)
		p1 := acquire(t, l, name, longTTL, fence.WithLimit(semN), fence.WithRequestID(id))
		releaseAtCleanup(t, p1)
		retry := acquire(t, l, name, longTTL, fence.WithLimit(semN), fence.WithRequestID(id))
		wantSameGrant(t, "semaphore permit retried with its request id", p1, retry)
		p2 := acquire(t, l, name, longTTL, fence.WithLimit(semN))
		releaseAtCleanup(t, p2)
		if p2.Slot() != 2 {
			t.Fatalf("the next permit after a retried one has slot %d; want 2 (the retry took no slot)", p2.Slot())
		}
	}
	if f.Shared {
		name := uniqueName(t, "sh")
		id := "req-" + uniqueName(t, "r")
		a := acquire(t, l, name, longTTL, fence.WithShared(), fence.WithRequestID(id))
		releaseAtCleanup(t, a)
		b := acquire(t, l, name, longTTL, fence.WithShared())
		releaseAtCleanup(t, b)
		retry := acquire(t, l, name, longTTL, fence.WithShared(), fence.WithRequestID(id))
		wantSameGrant(t, "shared lease retried with its request id", a, retry)
		info, err := inspectIfYouCan(t, l, name)
		if err == nil && info != nil && len(info.Holders) != 2 {
			t.Fatalf("after a retried shared acquire, Inspect reports %d holders; want 2", len(info.Holders))
		}
	}
}

func (s *lockerSuite) requestBadIDs(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	for _, id := range []string{"", strings.Repeat("r", fence.MaxRequestIDLen+1), "a b", "caf\u00e9", "tab\t"} {
		lease, err := fence.TryAcquire(testContext(t), l, name, longTTL, fence.WithRequestID(id))
		if err == nil {
			releaseAtCleanup(t, lease)
			t.Fatalf("Acquire with request id %q granted token %d; want ErrInvalid", id, lease.Token())
		}
		wantInvalid(t, "Acquire with request id "+strings.Repeat("x", min(len(id), 8)), err, "request_id")
	}
}

// inspectIfYouCan returns the state of name if l is a fence.Inspector, else nil.
func inspectIfYouCan(t *testing.T, l fence.Locker, name string) (*fence.LockInfo, error) {
	in, ok := l.(fence.Inspector)
	if !ok {
		return nil, errors.New("not an Inspector")
	}
	info, err := in.Inspect(testContext(t), name)
	return &info, err
}
