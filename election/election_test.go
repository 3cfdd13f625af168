package election_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/election"
	"github.com/fencelock/fence/inmem"
)

const (
	// longTTL is a term TTL no test waits out: a handoff that took it would fail
	// the test's bound first.
	longTTL = time.Minute
	// promptly bounds what must happen at once (a handoff, a campaign ending on
	// cancel), generously for a loaded machine and far below longTTL.
	promptly = 5 * time.Second
	// settle is how long a test lets a campaign start waiting: no locker says
	// "now waiting", and a test passes whether or not it already was.
	settle = 50 * time.Millisecond
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newElection returns the election name on l, failing the test on an error.
func newElection(t *testing.T, l fence.Locker, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(l, name, opts...)
	if err != nil {
		t.Fatalf("election.New(%q) = %v", name, err)
	}
	return e
}

// campaign wins e's election or fails the test; the term is resigned at cleanup.
func campaign(t *testing.T, e *election.Election) *election.Term {
	t.Helper()
	term, err := e.Campaign(testContext(t))
	if err != nil {
		t.Fatalf("Campaign(%q) = %v; want a term", e.Name(), err)
	}
	t.Cleanup(func() { _ = term.Resign(context.Background()) })
	return term
}

type campaignResult struct {
	term *election.Term
	err  error
}

// goCampaign campaigns in a goroutine; a term it wins is resigned at cleanup.
func goCampaign(t *testing.T, ctx context.Context, e *election.Election) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		term, err := e.Campaign(ctx)
		ch <- campaignResult{term, err}
	}()
	t.Cleanup(func() {
		select {
		case r := <-ch:
			if r.term != nil {
				_ = r.term.Resign(context.Background())
			}
		default:
		}
	})
	return ch
}

// wantWaiting fails the test if the campaign behind ch returns within settle.
func wantWaiting(t *testing.T, ch <-chan campaignResult, why string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: Campaign returned (%v, %v) while another candidate leads; want it to wait", why, r.term, r.err)
	case <-time.After(settle):
	}
}

// wantElected returns the term the campaign behind ch wins within promptly.
func wantElected(t *testing.T, ch <-chan campaignResult, why string) *election.Term {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Campaign = %v; want a term", why, r.err)
		}
		t.Cleanup(func() { _ = r.term.Resign(context.Background()) })
		return r.term
	case <-time.After(promptly):
		t.Fatalf("%s: Campaign still waiting after %v (TTL %v); want it elected at once", why, promptly, longTTL)
		return nil
	}
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s = %v; want an error matching %v", what, err, target)
	}
}

// plainLocker is the reference Locker with its optional capabilities hidden:
// only fence.Locker's methods, as a backend without Inspect or Watch offers.
type plainLocker struct{ l *inmem.Locker }

func (p plainLocker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	return p.l.Acquire(ctx, name, ttl, opts...)
}

func (p plainLocker) Renew(ctx context.Context, name, id string, ttl time.Duration) error {
	return p.l.Renew(ctx, name, id, ttl)
}

func (p plainLocker) Release(ctx context.Context, name, id string) error {
	return p.l.Release(ctx, name, id)
}

func TestNew_NilLocker_ErrInvalid(t *testing.T) {
	for _, tc := range []struct {
		what string
		l    fence.Locker
	}{
		{"nil", nil},
		{"nil *inmem.Locker", (*inmem.Locker)(nil)},
	} {
		e, err := election.New(tc.l, "jobs")
		if e != nil || !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "locker") {
			t.Errorf("New(%s) = %v, %v; want nil and an error matching ErrInvalid that names the locker", tc.what, e, err)
		}
	}
}

func TestCampaign_BadInput_ErrInvalid(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	ctx := testContext(t)
	for _, tc := range []struct {
		what, field string
		name        string
		opts        []election.Option
	}{
		{"empty name", "name", "", nil},
		{"zero TTL", "ttl", "jobs", []election.Option{election.WithTTL(0)}},
		{"negative TTL", "ttl", "jobs", []election.Option{election.WithTTL(-time.Second)}},
		{"owner with a newline", "owner", "jobs", []election.Option{election.WithOwner("a\nb")}},
		{"owner too long", "owner", "jobs", []election.Option{election.WithOwner(strings.Repeat("o", fence.MaxOwnerLen+1))}},
	} {
		e := newElection(t, l, tc.name, tc.opts...)
		term, err := e.Campaign(ctx)
		if term != nil || !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Campaign with %s = %v, %v; want nil and an error matching ErrInvalid naming the %s", tc.what, term, err, tc.field)
		}
		runErr := e.Run(ctx, election.Callbacks{OnStartedLeading: func(context.Context, *election.Term) {
			t.Errorf("Run with %s: OnStartedLeading called", tc.what)
		}})
		if !errors.Is(runErr, fence.ErrInvalid) {
			t.Errorf("Run with %s = %v; want an error matching ErrInvalid", tc.what, runErr)
		}
	}
}

func TestTerm_EpochFenceOwnerLeaderAndResign(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	ctx := testContext(t)
	e := newElection(t, l, "jobs", election.WithTTL(longTTL), election.WithOwner("node-a"))

	_, err := e.Leader(ctx)
	wantErrIs(t, "Leader of a vacant election", err, fence.ErrNotHeld)

	term := campaign(t, e)
	if term.Epoch() == 0 || term.Epoch() != term.Lease().Token() {
		t.Errorf("Epoch() = %d, lease token %d; want the lease's token, above 0", term.Epoch(), term.Lease().Token())
	}
	if got, want := term.Fence(), term.Lease().Fence(); got != want {
		t.Errorf("Fence() = %+v; want the lease's %+v", got, want)
	}
	if term.Owner() != "node-a" || term.Err() != nil {
		t.Errorf("Owner() = %q, Err() = %v; want node-a and nil", term.Owner(), term.Err())
	}
	ld, err := e.Leader(ctx)
	if err != nil || ld.Name != "jobs" || ld.Owner != "node-a" || ld.Epoch != term.Epoch() || !ld.Leading() ||
		ld.ExpiresIn <= 0 || ld.ExpiresIn > longTTL {
		t.Errorf("Leader() = %+v, %v; want jobs led by node-a in epoch %d with 0 < ExpiresIn <= %v", ld, err, term.Epoch(), longTTL)
	}

	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign = %v", err)
	}
	select {
	case <-term.Done():
	default:
		t.Fatal("Done still open after Resign")
	}
	wantErrIs(t, "Err() after Resign", term.Err(), fence.ErrReleased)
	wantErrIs(t, "context.Cause(Context()) after Resign", context.Cause(term.Context()), fence.ErrReleased)
	wantErrIs(t, "second Resign", term.Resign(ctx), fence.ErrNotHeld)
	ld, err = e.Leader(ctx)
	wantErrIs(t, "Leader after Resign", err, fence.ErrNotHeld)
	if ld.Leading() || ld.Name != "jobs" {
		t.Errorf("Leader() after Resign = %+v; want {Name: jobs} and nobody leading", ld)
	}
	next := campaign(t, e)
	if next.Epoch() <= term.Epoch() {
		t.Errorf("next term's epoch %d; want above %d", next.Epoch(), term.Epoch())
	}
}

func TestCampaign_Cancelled_ReturnsPromptlyLeavesNothing(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	e := newElection(t, l, "jobs", election.WithTTL(longTTL))
	leader := campaign(t, e)
	ctx, cancel := context.WithCancel(testContext(t))
	ch := goCampaign(t, ctx, e)
	wantWaiting(t, ch, "a second candidate")
	cancel()
	select {
	case r := <-ch:
		if r.term != nil || !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, fence.ErrNotAcquired) {
			t.Fatalf("cancelled Campaign = %v, %v; want an error matching context.Canceled and ErrNotAcquired", r.term, r.err)
		}
	case <-time.After(promptly):
		t.Fatalf("cancelled Campaign still waiting after %v", promptly)
	}
	info, err := l.Inspect(testContext(t), "jobs")
	if err != nil || !info.Held || info.Token != leader.Epoch() || info.LastToken != leader.Epoch() {
		t.Fatalf("Inspect after the cancelled campaign = %+v, %v; want held in epoch %d and no later token", info, err, leader.Epoch())
	}
}

func TestCapabilities_MissingGiveErrNotImplemented(t *testing.T) {
	ctx := testContext(t)
	l := plainLocker{inmem.NewLocker(inmem.Options{})}
	e := newElection(t, l, "jobs")

	_, err := e.Leader(ctx)
	wantErrIs(t, "Leader on a locker without Inspect", err, fence.ErrNotImplemented)

	var errs []error
	for ld, err := range e.Observe(ctx) {
		if ld != (election.Leader{}) {
			t.Errorf("Observe on a locker without Watch yielded %+v", ld)
		}
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], fence.ErrNotImplemented) {
		t.Errorf("Observe on a locker without Watch yielded %v; want one error matching ErrNotImplemented, then the end", errs)
	}

	err = e.Run(ctx, election.Callbacks{
		OnStartedLeading: func(context.Context, *election.Term) { t.Error("OnStartedLeading called") },
		OnNewLeader:      func(election.Leader) {},
	})
	wantErrIs(t, "Run with OnNewLeader on a locker without Watch", err, fence.ErrNotImplemented)
	// Nothing was changed: the election is still free.
	lease, err := fence.TryAcquire(ctx, l, "jobs", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the refused Run = %v; want the lock free", err)
	}
	if lease.Token() != 1 {
		t.Errorf("first grant after the refused Run has token %d; want 1 (Run campaigned)", lease.Token())
	}
	_ = lease.Release(ctx)

	// Without OnNewLeader, Run works on any Locker.
	err = e.Run(ctx, election.Callbacks{OnStartedLeading: func(context.Context, *election.Term) {}})
	if err != nil {
		t.Errorf("Run without OnNewLeader on a plain Locker = %v; want nil", err)
	}
}

func TestRun_NilOnStartedLeading_ErrInvalid(t *testing.T) {
	e := newElection(t, inmem.NewLocker(inmem.Options{}), "jobs")
	err := e.Run(testContext(t), election.Callbacks{OnStoppedLeading: func() {}})
	if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "OnStartedLeading") {
		t.Fatalf("Run without OnStartedLeading = %v; want an error matching ErrInvalid naming OnStartedLeading", err)
	}
}

// runner runs e.Run in a goroutine and records what it called.
type runner struct {
	terms   chan *election.Term // each OnStartedLeading's term
	stopped chan struct{}       // a value per OnStoppedLeading
	done    chan error          // Run's result
	// work, if set, is OnStartedLeading's body; by default it waits for ctx.
	work func(ctx context.Context, term *election.Term)
}

func startRun(t *testing.T, ctx context.Context, e *election.Election, r *runner, onNewLeader func(election.Leader)) *runner {
	t.Helper()
	r.terms, r.stopped, r.done = make(chan *election.Term, 16), make(chan struct{}, 16), make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		r.done <- e.Run(ctx, election.Callbacks{
			OnStartedLeading: func(ctx context.Context, term *election.Term) {
				r.terms <- term
				if r.work != nil {
					r.work(ctx, term)
					return
				}
				<-ctx.Done()
			},
			OnStoppedLeading: func() { r.stopped <- struct{}{} },
			OnNewLeader:      onNewLeader,
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(promptly):
			t.Errorf("Run still running %v after its context was cancelled", promptly)
		}
	})
	return r
}

func (r *runner) nextTerm(t *testing.T, why string) *election.Term {
	t.Helper()
	select {
	case term := <-r.terms:
		return term
	case err := <-r.done:
		r.done <- err // for result and the cleanup
		select {
		case term := <-r.terms: // called, and Run returned since
			return term
		default:
		}
		t.Fatalf("%s: Run returned %v; want OnStartedLeading called", why, err)
	case <-time.After(promptly):
		t.Fatalf("%s: OnStartedLeading not called within %v", why, promptly)
	}
	return nil
}

func (r *runner) wantStopped(t *testing.T, why string) {
	t.Helper()
	select {
	case <-r.stopped:
	case <-time.After(promptly):
		t.Fatalf("%s: OnStoppedLeading not called within %v", why, promptly)
	}
}

func (r *runner) result(t *testing.T, why string) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(promptly):
		t.Fatalf("%s: Run still running after %v", why, promptly)
		return nil
	}
}

func TestRun_CampaignsAgainAfterLostTerm(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	// A short TTL: the revoked term is noticed at its next renewal (TTL/3).
	e := newElection(t, l, "jobs", election.WithTTL(300*time.Millisecond))
	r := startRun(t, testContext(t), e, &runner{}, nil)
	first := r.nextTerm(t, "first term")
	if err := l.Revoke(testContext(t), "jobs"); err != nil {
		t.Fatalf("Revoke = %v", err)
	}
	r.wantStopped(t, "after the revoke")
	wantErrIs(t, "revoked term's Err()", first.Err(), fence.ErrNotHeld)
	second := r.nextTerm(t, "after the revoke")
	if second.Epoch() <= first.Epoch() || second.Err() != nil {
		t.Fatalf("second term: epoch %d, Err %v; want above %d and live", second.Epoch(), second.Err(), first.Epoch())
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v while leading its second term", err)
	default:
	}
}

func TestRun_ContextEnds_WorkStopsThenHandsOverAtOnce(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	a := newElection(t, l, "jobs", election.WithTTL(longTTL), election.WithOwner("a"))
	b := newElection(t, l, "jobs", election.WithTTL(longTTL), election.WithOwner("b"))
	var workStopped atomic.Bool
	var cause error
	ctx, cancel := context.WithCancelCause(testContext(t))
	stopReason := errors.New("shutting down")
	r := startRun(t, ctx, a, &runner{work: func(ctx context.Context, term *election.Term) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		time.Sleep(settle) // the leader's work takes a moment to stop
		workStopped.Store(true)
	}}, nil)
	term := r.nextTerm(t, "a's term")
	ch := goCampaign(t, testContext(t), b)
	wantWaiting(t, ch, "b while a leads")

	cancelled := time.Now()
	cancel(stopReason)
	bTerm := wantElected(t, ch, "b after a's Run was cancelled")
	if !workStopped.Load() {
		t.Error("b was elected before a's OnStartedLeading returned; want a's work stopped first")
	}
	if d := time.Since(cancelled); d > promptly {
		t.Errorf("handoff took %v; want well under the %v TTL", d, longTTL)
	}
	if bTerm.Epoch() <= term.Epoch() {
		t.Errorf("b's epoch %d; want above a's %d", bTerm.Epoch(), term.Epoch())
	}
	if err := r.result(t, "after cancel"); !errors.Is(err, context.Canceled) {
		t.Errorf("Run after its context was cancelled = %v; want context.Canceled", err)
	}
	r.wantStopped(t, "after cancel")
	if cause != stopReason {
		t.Errorf("context.Cause of the leader's context = %v; want Run's context's cause %v", cause, stopReason)
	}
	wantErrIs(t, "a's term after Run returned", term.Err(), fence.ErrReleased)
}

func TestRun_WorkDone_ResignsAndReturnsNil(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	e := newElection(t, l, "jobs", election.WithTTL(longTTL))
	r := startRun(t, testContext(t), e, &runner{work: func(context.Context, *election.Term) {}}, nil)
	term := r.nextTerm(t, "the term")
	if err := r.result(t, "after the work"); err != nil {
		t.Fatalf("Run whose OnStartedLeading returned while leading = %v; want nil", err)
	}
	r.wantStopped(t, "after the work")
	wantErrIs(t, "term after Run returned", term.Err(), fence.ErrReleased)
	if _, err := e.Leader(testContext(t)); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Leader after Run returned = %v; want ErrNotHeld (resigned, not left to expire)", err)
	}
}

func TestRun_OnNewLeader_EveryChangeInOrder(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	other := newElection(t, l, "jobs", election.WithTTL(longTTL), election.WithOwner("other"))
	e := newElection(t, l, "jobs", election.WithTTL(longTTL), election.WithOwner("me"))
	before := campaign(t, other)

	var mu sync.Mutex
	var seen []election.Leader
	changed := make(chan struct{}, 64)
	ctx, cancel := context.WithCancel(testContext(t))
	r := startRun(t, ctx, e, &runner{}, func(ld election.Leader) {
		mu.Lock()
		seen = append(seen, ld)
		mu.Unlock()
		changed <- struct{}{}
	})
	waitSeen := func(why string, ok func(election.Leader) bool) {
		t.Helper()
		deadline := time.After(promptly)
		for {
			mu.Lock()
			found := len(seen) > 0 && ok(seen[len(seen)-1])
			mu.Unlock()
			if found {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("OnNewLeader: %s not seen within %v (seen %+v)", why, promptly, seen)
			}
		}
	}
	waitSeen("the other candidate's term", func(ld election.Leader) bool { return ld.Epoch == before.Epoch() && ld.Owner == "other" })
	if err := before.Resign(ctx); err != nil {
		t.Fatalf("Resign = %v", err)
	}
	mine := r.nextTerm(t, "after the other resigned")
	waitSeen("Run's own term", func(ld election.Leader) bool { return ld.Epoch == mine.Epoch() && ld.Owner == "me" })
	cancel()
	if err := r.result(t, "after cancel"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want context.Canceled", err)
	}
	mu.Lock()
	// The other's term, maybe the vacancy between, Run's own term: in order, no
	// change twice, and nothing after Run returned.
	var terms []fence.Token
	for i, ld := range seen {
		if i > 0 && ld.Epoch == seen[i-1].Epoch {
			t.Errorf("OnNewLeader called twice in a row with epoch %d: %+v", ld.Epoch, seen)
		}
		if ld.Leading() {
			terms = append(terms, ld.Epoch)
		}
	}
	if len(terms) != 2 || terms[0] != before.Epoch() || terms[1] != mine.Epoch() {
		t.Errorf("OnNewLeader terms = %v (all calls %+v); want [%d %d]", terms, seen, before.Epoch(), mine.Epoch())
	}
	n := len(seen)
	mu.Unlock()
	time.Sleep(settle)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Errorf("OnNewLeader called after Run returned: %+v", seen[n:])
	}
}

// observe ranges over e.Observe(ctx) in a goroutine until cleanup; next returns
// what it yields next, failing the test if nothing comes within promptly.
func observe(t *testing.T, ctx context.Context, e *election.Election) (next func(*testing.T) (election.Leader, error)) {
	type yielded struct {
		ld  election.Leader
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan yielded, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ld, err := range e.Observe(ctx) {
			select {
			case out <- yielded{ld, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(t *testing.T) (election.Leader, error) {
		t.Helper()
		select {
		case y := <-out:
			return y.ld, y.err
		case <-time.After(promptly):
			t.Fatalf("Observe yielded nothing within %v", promptly)
			return election.Leader{}, nil
		}
	}
}

func TestObserve_RenewalAndBookkeepingAreNoChange(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	ctx := testContext(t)
	e := newElection(t, l, "jobs", election.WithTTL(longTTL), election.WithOwner("a"))
	next := observe(t, ctx, e)
	if ld, err := next(t); err != nil || ld.Leading() || ld.Name != "jobs" {
		t.Fatalf("first Observe = %+v, %v; want jobs with nobody leading", ld, err)
	}
	// A heal moves the lock's index while nobody leads: no leader change.
	if err := l.Heal(ctx, "jobs", 10); err != nil {
		t.Fatal(err)
	}
	term := campaign(t, e)
	if ld, err := next(t); err != nil || ld.Epoch != term.Epoch() || ld.Owner != "a" {
		t.Fatalf("Observe after the heal and the campaign = %+v, %v; want a's term %d (the heal is no change)", ld, err, term.Epoch())
	}
	if err := term.Lease().Renew(ctx, longTTL); err != nil {
		t.Fatal(err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ld, err := next(t); err != nil || ld.Leading() {
		t.Fatalf("Observe after the renewal and Resign = %+v, %v; want the vacancy (the renewal is no change)", ld, err)
	}
}

func TestObserve_BadName_ErrInvalidAndEnds(t *testing.T) {
	e := newElection(t, inmem.NewLocker(inmem.Options{}), "")
	var errs []error
	for _, err := range e.Observe(testContext(t)) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], fence.ErrInvalid) {
		t.Fatalf("Observe with an empty name yielded %v; want one error matching ErrInvalid, then the end", errs)
	}
}
