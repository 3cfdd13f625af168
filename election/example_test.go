package election_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/election"
	"github.com/fencelock/fence/inmem"
)

// Two schedulers campaign for one election. The leader sends its term's fence
// with each write; once it has resigned and the next leader has written, a late
// write of the old leader is refused: a newer epoch exists.
func Example_campaign() {
	ctx := context.Background()
	locker := inmem.NewLocker(inmem.Options{}) // any fence.Locker
	store := inmem.NewGuard()                  // any fence.Guard

	a, _ := election.New(locker, "scheduler", election.WithTTL(10*time.Second), election.WithOwner("node-a"))
	b, _ := election.New(locker, "scheduler", election.WithTTL(10*time.Second), election.WithOwner("node-b"))

	termA, _ := a.Campaign(ctx)
	fmt.Println(termA.Owner(), "leads in epoch", termA.Epoch())
	_ = store.Put(ctx, "schedule", []byte("by node-a"), termA.Fence())

	elected := make(chan *election.Term)
	go func() {
		termB, _ := b.Campaign(ctx) // waits while node-a leads
		elected <- termB
	}()
	_ = termA.Resign(ctx) // hands over at once
	termB := <-elected
	fmt.Println(termB.Owner(), "leads in epoch", termB.Epoch())
	_ = store.Put(ctx, "schedule", []byte("by node-b"), termB.Fence())

	err := store.Put(ctx, "schedule", []byte("late write by node-a"), termA.Fence())
	fmt.Println("node-a's late write refused:", errors.Is(err, fence.ErrStaleToken))
	_ = termB.Resign(ctx)
	// Output:
	// node-a leads in epoch 1
	// node-b leads in epoch 2
	// node-a's late write refused: true
}

// Run leads through OnStartedLeading, campaigns again if the term is lost, and
// resigns when the work is done or its context ends.
func ExampleElection_Run() {
	locker := inmem.NewLocker(inmem.Options{})
	e, _ := election.New(locker, "reports", election.WithOwner("worker-1"))
	err := e.Run(context.Background(), election.Callbacks{
		OnStartedLeading: func(ctx context.Context, term *election.Term) {
			// Work as leader under ctx, which ends with the term; fence every
			// write with term.Fence(). Returning while leading means done.
			fmt.Println("leading in epoch", term.Epoch())
		},
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
	})
	fmt.Println("run:", err)
	// Output:
	// leading in epoch 1
	// stopped leading
	// run: <nil>
}

// Observe yields the leader now, then every change: terms, and vacancies with
// epoch 0.
func ExampleElection_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locker := inmem.NewLocker(inmem.Options{})
	e, _ := election.New(locker, "reports", election.WithOwner("worker-1"))

	next, stop := iter.Pull2(e.Observe(ctx))
	defer stop()
	show := func() {
		ld, err, ok := next()
		switch {
		case !ok:
			fmt.Println("observe ended")
		case err != nil:
			fmt.Println("error:", err)
		case ld.Leading():
			fmt.Printf("%s leads in epoch %d\n", ld.Owner, ld.Epoch)
		default:
			fmt.Println("nobody leads")
		}
	}
	show()
	term, _ := e.Campaign(ctx)
	show()
	_ = term.Resign(ctx)
	show()
	// Output:
	// nobody leads
	// worker-1 leads in epoch 1
	// nobody leads
}
