// Package demo plays the race that fencing tokens exist for, end to end, with real
// goroutines, the real clock and the embedded durable store:
//
//	worker A acquires (token 1) and pauses past its TTL;
//	worker B acquires (token 2) and writes;
//	worker A wakes, still believing it holds the lock, and writes.
//
// With fencing off the resource takes every write: A's stale write silently
// overwrites B's. With fencing on the resource is the store's fenced KV, which
// rejects A's write with the stale-token error naming token 2.
package demo

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
)

// Options tune a demo run. The zero value is usable.
type Options struct {
	// TTL is the lease TTL; A pauses for about twice as long. Default 300ms.
	TTL time.Duration
	// Dir is where each run's store file goes; required.
	Dir string
}

// Event is one line of a run's timeline.
type Event struct {
	AtMS   int64       `json:"at_ms"` // milliseconds since the run started
	Worker string      `json:"worker"`
	What   string      `json:"what"`
	Token  fence.Token `json:"token,omitempty"`
	Error  string      `json:"error,omitempty"`
}

// Run is the outcome of one mode.
type Run struct {
	Fencing bool    `json:"fencing"`
	Events  []Event `json:"events"`
	// Final is the resource's value after both writes.
	Final string `json:"final"`
	// Corrupted reports that A's stale write replaced B's (expected with fencing off).
	Corrupted bool `json:"corrupted"`
	// Rejected reports that A's stale write was refused with the stale-token error
	// naming B's token (expected with fencing on).
	Rejected bool `json:"rejected"`
}

// Report holds both runs.
type Report struct {
	Off Run `json:"fencing_off"`
	On  Run `json:"fencing_on"`
}

// OK reports whether both outcomes were observed as expected: corruption with
// fencing off, the stale write rejected with fencing on.
func (r Report) OK() bool {
	return r.Off.Corrupted && !r.Off.Rejected && r.On.Rejected && !r.On.Corrupted
}

// Play runs the race twice, fencing off then on, each on a fresh store under
// opts.Dir, and returns both timelines. It returns an error only if the demo could
// not be played (store, lock or write failures other than the expected rejection).
func Play(ctx context.Context, opts Options) (Report, error) {
	if opts.TTL == 0 {
		opts.TTL = 300 * time.Millisecond
	}
	if opts.Dir == "" {
		return Report{}, errors.New("demo: no directory for the store")
	}
	off, err := play(ctx, opts, false)
	if err != nil {
		return Report{}, err
	}
	on, err := play(ctx, opts, true)
	if err != nil {
		return Report{}, err
	}
	return Report{Off: off, On: on}, nil
}

// timeline records events with times relative to the run's start.
type timeline struct {
	mu     sync.Mutex
	start  time.Time
	events []Event
}

func (t *timeline) add(worker, what string, tok fence.Token, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := Event{AtMS: time.Since(t.start).Milliseconds(), Worker: worker, What: what, Token: tok}
	if err != nil {
		e.Error = err.Error()
	}
	t.events = append(t.events, e)
}

// resource is what the workers write: the store's fenced KV, or with fencing off a
// plain register that takes every write, as a table without a fence column does.
type resource struct {
	fencing bool
	kv      fence.KV
	mu      sync.Mutex
	plain   string
}

func (r *resource) write(ctx context.Context, key, value string, f fence.Fence) error {
	if r.fencing {
		return r.kv.Put(ctx, key, []byte(value), f)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plain = value
	return nil
}

func (r *resource) read(ctx context.Context, key string) (string, error) {
	if r.fencing {
		it, err := r.kv.Get(ctx, key)
		if err != nil {
			return "", err
		}
		return string(it.Value), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plain, nil
}

func play(ctx context.Context, opts Options, fencing bool) (Run, error) {
	mode := "off"
	if fencing {
		mode = "on"
	}
	store, err := bolt.Open(filepath.Join(opts.Dir, "demo-fencing-"+mode+".db"), nil)
	if err != nil {
		return Run{}, fmt.Errorf("demo: open store: %w", err)
	}
	defer store.Close()

	const lock, key = "ledger-lock", "ledger"
	res := &resource{fencing: fencing, kv: store}
	tl := &timeline{start: time.Now()}
	run := Run{Fencing: fencing}

	leaseA, err := store.Acquire(ctx, lock, opts.TTL)
	if err != nil {
		return run, fmt.Errorf("demo: A acquire: %w", err)
	}
	tl.add("A", fmt.Sprintf("acquires %q (ttl %v)", lock, opts.TTL), leaseA.Token(), nil)
	tl.add("A", fmt.Sprintf("pauses for %v (a GC pause, a VM stall)", 2*opts.TTL), 0, nil)

	bWrote := make(chan struct{})
	var bErr error
	var bToken fence.Token
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // B waits for the lock, gets it when A's lease expires, writes.
		defer wg.Done()
		defer close(bWrote)
		tl.add("B", fmt.Sprintf("waits for %q", lock), 0, nil)
		leaseB, err := store.Acquire(ctx, lock, 10*opts.TTL, fence.WithWait(20*opts.TTL))
		if err != nil {
			bErr = fmt.Errorf("demo: B acquire: %w", err)
			return
		}
		bToken = leaseB.Token()
		tl.add("B", fmt.Sprintf("acquires %q after A's lease expired", lock), bToken, nil)
		if err := res.write(ctx, key, "written by B", leaseB.Fence()); err != nil {
			bErr = fmt.Errorf("demo: B write: %w", err)
			return
		}
		tl.add("B", `writes "written by B"`, bToken, nil)
		if err := leaseB.Release(ctx); err != nil {
			bErr = fmt.Errorf("demo: B release: %w", err)
		}
	}()
	var aErr error
	go func() { // A's lease expires while it is paused; Done says so, but A is asleep.
		defer wg.Done()
		select {
		case <-leaseA.Done():
			tl.add("A", "lease Done closed: expired (A is paused and cannot notice)", leaseA.Token(), nil)
		case <-time.After(20 * opts.TTL):
			aErr = errors.New("demo: A's lease did not expire")
		}
	}()

	// A's pause: past its TTL, and until B has written, so the race is the seed's
	// timeline on any machine however loaded.
	time.Sleep(2 * opts.TTL)
	<-bWrote
	wg.Wait()
	if bErr != nil {
		return run, bErr
	}
	if aErr != nil {
		return run, aErr
	}
	tl.add("A", "wakes up, still believes it holds the lock", leaseA.Token(), nil)
	werr := res.write(ctx, key, "written by A", leaseA.Fence())
	var stale *fence.StaleTokenError
	switch {
	case werr == nil:
		tl.add("A", `writes "written by A": ACCEPTED (nothing checked the token)`, leaseA.Token(), nil)
	case errors.As(werr, &stale):
		tl.add("A", `writes "written by A": REJECTED`, leaseA.Token(), werr)
		run.Rejected = stale.Highest == bToken && stale.Token == leaseA.Token()
	default:
		return run, fmt.Errorf("demo: A write: %w", werr)
	}
	final, err := res.read(ctx, key)
	if err != nil {
		return run, fmt.Errorf("demo: read back: %w", err)
	}
	run.Final = final
	run.Corrupted = final == "written by A"
	if run.Corrupted {
		tl.add("-", fmt.Sprintf("resource holds %q: B's write is lost", final), 0, nil)
	} else {
		tl.add("-", fmt.Sprintf("resource holds %q: nothing lost", final), 0, nil)
	}
	run.Events = tl.events
	return run, nil
}
