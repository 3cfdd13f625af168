package fencetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/election"
	"github.com/fencelock/fence/inmem"
)

// The election suite: package election on the Locker under test. It needs only
// fence.Locker; where a check needs fence.Inspector or fence.Watcher it probes
// for it.

// newElection returns an election on name through l for candidate owner, with a
// TTL no subtest waits out (a handoff that took it fails the bound first).
func newElection(t *testing.T, l fence.Locker, name, owner string) *election.Election {
	t.Helper()
	e, err := election.New(l, name, election.WithTTL(longTTL), election.WithOwner(owner))
	if err != nil {
		t.Fatalf("election.New(%q) = %v", name, err)
	}
	return e
}

type campaignResult struct {
	term *election.Term
	err  error
}

// goCampaign campaigns in a goroutine. At cleanup a campaign still waiting is
// cancelled, and a term it won is resigned.
func goCampaign(t *testing.T, ctx context.Context, e *election.Election) <-chan campaignResult {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan campaignResult, 1)
	done := make(chan struct{})
	var term *election.Term
	go func() {
		defer close(done)
		var err error
		term, err = e.Campaign(ctx)
		ch <- campaignResult{term, err}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
			if term != nil {
				resignAtCleanup(term)
			}
		case <-time.After(promptly):
			t.Errorf("Campaign(%q) still running %v after its context was cancelled", e.Name(), promptly)
		}
	})
	return ch
}

// campaign wins e's election within promptly or fails the test.
func campaign(t *testing.T, e *election.Election, why string) *election.Term {
	t.Helper()
	return elected(t, goCampaign(t, testContext(t), e), why)
}

// elected returns the term the campaign behind ch wins within promptly, or
// fails the test.
func elected(t *testing.T, ch <-chan campaignResult, why string) *election.Term {
	t.Helper()
	start := time.Now()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Campaign = %v; want a term", why, r.err)
		}
		return r.term
	case <-time.After(promptly):
		t.Fatalf("%s: Campaign still waiting %v later (TTL %v); want the candidate elected at once", why, time.Since(start).Round(time.Millisecond), longTTL)
		return nil
	}
}

// stillWaiting gives a campaign time to start waiting, as lockerSuite.settle
// does for an acquire, and fails the test if it returned meanwhile.
func (s *lockerSuite) stillWaiting(t *testing.T, ch <-chan campaignResult, why string) {
	t.Helper()
	select {
	case r := <-ch:
		if r.term != nil {
			t.Fatalf("%s: candidate elected in epoch %d while another leads", why, r.term.Epoch())
		}
		t.Fatalf("%s: Campaign returned early with %v; want it to keep waiting", why, r.err)
	case <-time.After(s.cfg.shortTTL):
	}
}

func resignAtCleanup(term *election.Term) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = term.Resign(ctx) // ErrNotHeld is expected for terms a test ended
}

func resign(t *testing.T, term *election.Term, who string) {
	t.Helper()
	if err := term.Resign(testContext(t)); err != nil {
		t.Fatalf("%s's Resign = %v", who, err)
	}
}

// wantLeader checks, if l is a fence.Inspector, that Leader reports term's
// owner and epoch.
func wantLeader(t *testing.T, l fence.Locker, e *election.Election, term *election.Term, owner string) {
	t.Helper()
	if _, ok := l.(fence.Inspector); !ok {
		return
	}
	ld, err := e.Leader(testContext(t))
	if err != nil || ld.Owner != owner || ld.Epoch != term.Epoch() || ld.ExpiresIn <= 0 || ld.ExpiresIn > longTTL {
		t.Fatalf("Leader() = %+v, %v; want %s in epoch %d with ExpiresIn in (0, %v]", ld, err, owner, term.Epoch(), longTTL)
	}
}

// electionOneLeader has candidates campaign concurrently, each leading in turn
// and resigning, and checks that no two lead at once, that every epoch is used
// once and epochs increase in the order terms begin, that a guard admits every
// leader's write with its term's fence, and that each resigned leader's later
// write is refused once a newer leader has written.
func (s *lockerSuite) electionOneLeader(t *testing.T, l fence.Locker) {
	const candidates, terms = 4, 3
	// The first failure cancels the other candidates' campaigns, which then
	// return nil: the failure is the first one's to report.
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	name := uniqueName(t, "")
	guard := inmem.NewGuard()
	var (
		mu      sync.Mutex
		order   []*election.Term // in the order terms began: appended while leading
		leading atomic.Int32
	)
	t.Cleanup(func() {
		for _, term := range order {
			resignAtCleanup(term)
		}
	})
	lead := func(owner string, term *election.Term) error {
		defer leading.Add(-1)
		if n := leading.Add(1); n != 1 {
			return fmt.Errorf("%s elected in epoch %d while %d other candidates lead", owner, term.Epoch(), n-1)
		}
		mu.Lock()
		order = append(order, term)
		mu.Unlock()
		if err := guard.Put(ctx, "schedule", []byte(owner), term.Fence()); err != nil {
			return fmt.Errorf("%s's write as leader in epoch %d refused: %w; want every new leader's write admitted", owner, term.Epoch(), err)
		}
		if term.Err() != nil {
			return fmt.Errorf("%s's term %d ended while leading: %w", owner, term.Epoch(), term.Err())
		}
		return nil
	}
	inParallel(t, candidates, func(c int) error {
		owner := fmt.Sprintf("candidate-%d", c)
		e, err := election.New(l, name, election.WithTTL(longTTL), election.WithOwner(owner))
		if err != nil {
			return err
		}
		for i := 0; i < terms; i++ {
			term, err := e.Campaign(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%s: Campaign: %w", owner, err)
			}
			if err := lead(owner, term); err != nil {
				cancel()
				return err
			}
			if err := term.Resign(ctx); err != nil {
				cancel()
				return fmt.Errorf("%s: Resign of term %d: %w", owner, term.Epoch(), err)
			}
		}
		return nil
	})
	if len(order) != candidates*terms {
		t.Fatalf("%d terms; want %d", len(order), candidates*terms)
	}
	for i := 1; i < len(order); i++ {
		if order[i].Epoch() <= order[i-1].Epoch() {
			t.Fatalf("term %d began in epoch %d after term %d in epoch %d; want epochs strictly increasing",
				i, order[i].Epoch(), i-1, order[i-1].Epoch())
		}
	}
	last := order[len(order)-1]
	for _, old := range order[:len(order)-1] {
		err := guard.Put(ctx, "schedule", []byte("late"), old.Fence())
		var st *fence.StaleTokenError
		if !errors.As(err, &st) || st.Highest != last.Epoch() {
			t.Fatalf("resigned leader's write with epoch %d = %v; want a *StaleTokenError with Highest %d (the last leader's)", old.Epoch(), err, last.Epoch())
		}
	}
	// Leader reports each candidate while it leads.
	e := newElection(t, l, name, "reporter")
	term := campaign(t, e, "a fresh candidate after every term was resigned")
	wantLeader(t, l, e, term, "reporter")
	if term.Epoch() <= last.Epoch() {
		t.Fatalf("epoch %d after epoch %d; want higher", term.Epoch(), last.Epoch())
	}
}

// observing is an election's Observe in the shape of a fence.Watcher, so that
// the watch suite's startWatch serves observers too: a leader is a held lock
// whose token is the epoch, a vacancy a free lock.
type observing struct{ e *election.Election }

func (o observing) Watch(ctx context.Context, _ string) iter.Seq2[fence.LockInfo, error] {
	return func(yield func(fence.LockInfo, error) bool) {
		for ld, err := range o.e.Observe(ctx) {
			if !yield(fence.LockInfo{Name: ld.Name, Held: ld.Leading(), Token: ld.Epoch, Owner: ld.Owner}, err) {
				return
			}
		}
	}
}

// startObserve ranges over e.Observe until cleanup, as startWatch does.
func startObserve(t *testing.T, e *election.Election, gate <-chan struct{}) <-chan watched {
	states, _, _ := startWatch(t, observing{e}, e.Name(), gate)
	return states
}

// nextLeader returns what the observer behind ch yields next within
// watchPromptly, failing the test on an error or a timeout.
func nextLeader(t *testing.T, ch <-chan watched, waitingFor string) election.Leader {
	t.Helper()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatalf("Observe yielded %v while waiting for %s", o.err, waitingFor)
		}
		return election.Leader{Name: o.info.Name, Owner: o.info.Owner, Epoch: o.info.Token}
	case <-time.After(watchPromptly):
		t.Fatalf("Observe yielded nothing within %v while waiting for %s", watchPromptly, waitingFor)
		return election.Leader{}
	}
}

// electionObservers checks Observe on a Watcher: observers that keep up see
// every change of leader (terms and vacancies), each soon after it happens and
// in order, with the leader's owner and epoch; an observer that falls behind
// skips changes but gets them in order and ends on the latest.
func (s *lockerSuite) electionObservers(t *testing.T, l fence.Locker) {
	probe[fence.Watcher](t, l)
	name := uniqueName(t, "")
	const changes = 3
	cands := make([]*election.Election, changes)
	for i := range cands {
		cands[i] = newElection(t, l, name, fmt.Sprintf("candidate-%d", i))
	}
	prompt := []<-chan watched{startObserve(t, cands[0], nil), startObserve(t, cands[1], nil)}
	gate := make(chan struct{})
	slow := startObserve(t, cands[2], gate)

	// history is the election's every state, in order: a vacancy first.
	history := []election.Leader{{Name: name}}
	see := func(what string) {
		t.Helper()
		want := history[len(history)-1]
		for i, ch := range prompt {
			if got := nextLeader(t, ch, what); got != want {
				t.Fatalf("observer %d: after %s Observe yielded %+v; want %+v (changes so far %+v)", i, what, got, want, history)
			}
		}
	}
	see("the start (a lock never acquired)")
	nextLeader(t, slow, "the start")
	var last *election.Term
	for i, e := range cands {
		last = campaign(t, e, fmt.Sprintf("candidate %d", i))
		history = append(history, election.Leader{Name: name, Owner: fmt.Sprintf("candidate-%d", i), Epoch: last.Epoch()})
		see(fmt.Sprintf("candidate %d's election", i))
		if i < len(cands)-1 {
			resign(t, last, fmt.Sprintf("candidate %d", i))
			history = append(history, election.Leader{Name: name})
			see(fmt.Sprintf("candidate %d's Resign", i))
		}
	}
	wantLeader(t, l, cands[len(cands)-1], last, fmt.Sprintf("candidate-%d", len(cands)-1))

	// The slow observer: a subsequence of the history, ending on the latest.
	close(gate)
	pos := 0 // history index of what it yielded last
	for pos != len(history)-1 {
		got := nextLeader(t, slow, "the latest leader (the observer fell behind)")
		at := -1
		for j := pos + 1; j < len(history); j++ {
			if history[j] == got {
				at = j
				break
			}
		}
		if at < 0 {
			t.Fatalf("observer that fell behind yielded %+v after %+v; want only later changes of %+v", got, history[pos], history)
		}
		pos = at
	}
}

// electionResignHandoff checks that Resign hands leadership to a waiting
// candidate at once, not after the TTL, and ends the old term.
func (s *lockerSuite) electionResignHandoff(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	a, b := newElection(t, l, name, "candidate-a"), newElection(t, l, name, "candidate-b")
	termA := campaign(t, a, "a")
	ch := goCampaign(t, testContext(t), b)
	s.stillWaiting(t, ch, "b while a leads")
	resign(t, termA, "a")
	termB := elected(t, ch, "b after a resigned")
	if termB.Epoch() <= termA.Epoch() {
		t.Fatalf("b's epoch %d; want above a's %d", termB.Epoch(), termA.Epoch())
	}
	select {
	case <-termA.Done():
	default:
		t.Fatal("a's term Done still open after Resign")
	}
	wantErrIs(t, "a's term Err() after Resign", termA.Err(), fence.ErrReleased)
	wantErrIs(t, "a's second Resign", termA.Resign(testContext(t)), fence.ErrNotHeld)
	if err := termB.Err(); err != nil {
		t.Fatalf("b's term Err() = %v after a's second Resign; want nil (a must not end b's term)", err)
	}
	wantLeader(t, l, b, termB, "candidate-b")
}

// electionCancelledCampaign checks that a campaign cancelled while waiting
// returns promptly and leaves nothing behind: after the leader resigns another
// waiting candidate is elected at once, the lock shows only that leader, and
// once it resigns the election is free.
func (s *lockerSuite) electionCancelledCampaign(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	a, b, c := newElection(t, l, name, "candidate-a"), newElection(t, l, name, "candidate-b"), newElection(t, l, name, "candidate-c")
	termA := campaign(t, a, "a")
	bctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	chB := goCampaign(t, bctx, b)
	s.stillWaiting(t, chB, "b while a leads")
	cancelled := time.Now()
	cancel()
	select {
	case r := <-chB:
		if r.err == nil {
			t.Fatalf("cancelled campaign elected b in epoch %d while a leads", r.term.Epoch())
		}
		if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, fence.ErrNotAcquired) {
			t.Fatalf("cancelled Campaign = %v; want an error matching context.Canceled and ErrNotAcquired", r.err)
		}
	case <-time.After(promptly):
		t.Fatalf("cancelled Campaign still waiting %v later", time.Since(cancelled).Round(time.Millisecond))
	}

	chC := goCampaign(t, testContext(t), c)
	s.stillWaiting(t, chC, "c while a leads")
	resign(t, termA, "a")
	termC := elected(t, chC, "c after a resigned (b's cancelled campaign must not stand in its way)")
	if in, ok := l.(fence.Inspector); ok {
		info, err := in.Inspect(testContext(t), name)
		if err != nil || !info.Held || info.Token != termC.Epoch() || info.Owner != "candidate-c" {
			t.Fatalf("Inspect while c leads = %+v, %v; want held by candidate-c in epoch %d and nothing of b", info, err, termC.Epoch())
		}
	}
	resign(t, termC, "c")
	// Nothing of b's campaign is left to take the lock now: give a leftover
	// waiter the time a waiter takes to be woken, then the lock must be free.
	time.Sleep(s.cfg.shortTTL)
	lease, err := fence.TryAcquire(testContext(t), l, name, longTTL)
	if err != nil {
		t.Fatalf("TryAcquire after the last leader resigned = %v; want the lock free (a cancelled campaign left a grant behind?)", err)
	}
	releaseAtCleanup(t, lease)
}
