package driver_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/inmem"
)

// The engine is tested with scripted tries: what a backend's TryFunc returns is
// the engine's whole input. Every backend's own tests run fencetest on top.

// nopLocker is the Locker leases renew and release through; these tests only make
// leases.
type nopLocker struct{ fence.Locker }

func (nopLocker) Renew(context.Context, string, string, time.Duration) error { return nil }
func (nopLocker) Release(context.Context, string, string) error              { return nil }

func engine() *driver.Engine { return &driver.Engine{Backend: "test", Locker: nopLocker{}} }

func TestEngine_Grant_LeaseFromTheTry(t *testing.T) {
	var id string
	before := time.Now()
	lease, err := engine().Acquire(context.Background(), "job", time.Minute, nil, func(_ context.Context, r *driver.Request) (driver.Result, error) {
		if r.Name != "job" || r.TTL != time.Minute || r.Try != 1 || r.Waiting {
			t.Errorf("request = %+v; want job, 1m, try 1, not waiting", *r)
		}
		id = r.ID
		return driver.Result{Token: 7}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if lease.Token() != 7 || lease.ID() != id || lease.Name() != "job" {
		t.Errorf("lease = %s id %q; want job#7 with the request's id %q", lease.Fence(), lease.ID(), id)
	}
	if err := fence.ValidateLeaseID(id); err != nil || len(id) != 32 {
		t.Errorf("request id %q: %v; want 32 hex digits", id, err)
	}
	if d := lease.Deadline(); d.Before(before.Add(time.Minute)) || d.After(time.Now().Add(time.Minute)) {
		t.Errorf("deadline %v; want a minute after the try started", d)
	}
}

func TestEngine_Grant_IDFromTheBackend(t *testing.T) {
	lease, err := engine().Acquire(context.Background(), "job", time.Minute, nil, func(_ context.Context, r *driver.Request) (driver.Result, error) {
		return driver.Result{Token: 1, ID: r.ID + "-0000000007"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if !strings.HasSuffix(lease.ID(), "-0000000007") {
		t.Errorf("lease id %q; want the id the try returned", lease.ID())
	}
}

func TestEngine_Grant_StartFromTheBackend(t *testing.T) {
	start := time.Now().Add(-10 * time.Second)
	lease, err := engine().Acquire(context.Background(), "job", time.Minute, nil, func(context.Context, *driver.Request) (driver.Result, error) {
		return driver.Result{Token: 1, Start: start}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if got, want := lease.Deadline(), start.Add(time.Minute); !got.Equal(want) {
		t.Errorf("deadline %v; want Start+TTL %v", got, want)
	}
}

func TestEngine_Held_WokenThenGranted(t *testing.T) {
	wake := make(chan struct{})
	var ids []string
	lease, err := engine().Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(time.Minute)},
		func(_ context.Context, r *driver.Request) (driver.Result, error) {
			ids = append(ids, r.ID)
			if !r.Waiting || r.WaitLeft <= 0 || r.WaitLeft > time.Minute {
				t.Errorf("try %d: waiting %v, wait left %v; want waiting with up to 1m left", r.Try, r.Waiting, r.WaitLeft)
			}
			if r.Try == 1 {
				time.AfterFunc(10*time.Millisecond, func() { close(wake) })
				return driver.Result{ExpiresIn: time.Hour, Wake: wake}, nil
			}
			return driver.Result{Token: 2}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("tries made with ids %q; want two tries, each with a fresh id", ids)
	}
}

func TestEngine_Again_TriesAtOnce(t *testing.T) {
	start := time.Now()
	lease, err := engine().Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(time.Minute)},
		func(_ context.Context, r *driver.Request) (driver.Result, error) {
			if r.Try == 1 {
				return driver.Result{ExpiresIn: time.Hour, Again: true}, nil
			}
			return driver.Result{Token: 1}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if d := time.Since(start); d > time.Second {
		t.Errorf("Again took %v; want the second try at once", d)
	}
}

func TestEngine_Poll_CapsTheSleep(t *testing.T) {
	e := engine()
	e.Poll = 10 * time.Millisecond
	lease, err := e.Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(time.Minute)},
		func(_ context.Context, r *driver.Request) (driver.Result, error) {
			if r.Try < 3 {
				return driver.Result{ExpiresIn: time.Hour, Retry: time.Hour}, nil
			}
			return driver.Result{Token: 1}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(context.Background())
}

func TestEngine_HeldOnce_OneLineNamingTheLockOnce(t *testing.T) {
	_, err := engine().Acquire(context.Background(), "job", time.Minute, nil, func(context.Context, *driver.Request) (driver.Result, error) {
		return driver.Result{ExpiresIn: 2500 * time.Millisecond}, nil
	})
	if want := `test: lock "job" not acquired: held, expires in 2.5s`; err == nil || err.Error() != want {
		t.Fatalf("err = %v; want %q", err, want)
	}
	var he *fence.HeldError
	if !errors.As(err, &he) || he.ExpiresIn != 2500*time.Millisecond || !errors.Is(err, fence.ErrNotAcquired) {
		t.Errorf("err = %v; want a *fence.HeldError with 2.5s left, matching ErrNotAcquired", err)
	}
}

func TestEngine_WaitOver_SaysHowLong(t *testing.T) {
	_, err := engine().Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(30 * time.Millisecond)},
		func(context.Context, *driver.Request) (driver.Result, error) {
			return driver.Result{}, nil // held, holder's time unknown
		})
	if want := `test: lock "job" not acquired after waiting 30ms: held`; err == nil || err.Error() != want {
		t.Fatalf("err = %v; want %q", err, want)
	}
}

func TestEngine_ContextEndsWait_MatchesBoth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := engine().Acquire(ctx, "job", time.Minute, []fence.AcquireOption{fence.WithWait(fence.WaitForever)},
		func(context.Context, *driver.Request) (driver.Result, error) {
			return driver.Result{ExpiresIn: time.Hour}, nil
		})
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want ErrNotAcquired and context.Canceled", err)
	}
	if !strings.HasPrefix(err.Error(), `test: lock "job" not acquired after waiting `) || !strings.HasSuffix(err.Error(), ": context canceled; held, expires in 1h0m0s") {
		t.Errorf("err = %q; want the wait, the cause and the holder, each once", err)
	}
}

func TestEngine_ContextEndsDuringTry_NotAcquired(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, err := engine().Acquire(ctx, "job", time.Minute, nil, func(context.Context, *driver.Request) (driver.Result, error) {
		cancel()
		return driver.Result{}, fence.ErrUnavailable
	})
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want ErrNotAcquired and context.Canceled", err)
	}
	// An error about the arguments or the counter stands even so.
	ctx, cancel = context.WithCancel(context.Background())
	_, err = engine().Acquire(ctx, "job", time.Minute, nil, func(context.Context, *driver.Request) (driver.Result, error) {
		cancel()
		return driver.Result{}, fence.ErrTokenExhausted
	})
	if want := `test: acquire "job": fence: token counter exhausted`; err == nil || err.Error() != want {
		t.Fatalf("err = %v; want %q", err, want)
	}
}

func TestEngine_Transient_RiddenOutWhileWaiting(t *testing.T) {
	lease, err := engine().Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(time.Minute)},
		func(_ context.Context, r *driver.Request) (driver.Result, error) {
			if r.Try < 3 {
				return driver.Result{}, driver.Transient(fence.ErrUnavailable)
			}
			return driver.Result{Token: 1}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(context.Background())

	// Without a wait, or when the wait ends, the error itself comes back.
	_, err = engine().Acquire(context.Background(), "job", time.Minute, nil, func(context.Context, *driver.Request) (driver.Result, error) {
		return driver.Result{}, driver.Transient(fence.ErrUnavailable)
	})
	if want := `test: acquire "job": fence: store unavailable`; err == nil || err.Error() != want || !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("err = %v; want %q", err, want)
	}
	_, err = engine().Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(120 * time.Millisecond)},
		func(context.Context, *driver.Request) (driver.Result, error) {
			return driver.Result{}, driver.Transient(fence.ErrUnavailable)
		})
	if want := `test: acquire "job": fence: store unavailable`; err == nil || err.Error() != want {
		t.Fatalf("err = %v; want %q", err, want)
	}
	if driver.Transient(nil) != nil {
		t.Error("Transient(nil) != nil")
	}
}

func TestEngine_Closed_EndsWaitAndRefusesNew(t *testing.T) {
	closed := make(chan struct{})
	e := engine()
	e.Closed = closed
	time.AfterFunc(20*time.Millisecond, func() { close(closed) })
	_, err := e.Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(fence.WaitForever)},
		func(context.Context, *driver.Request) (driver.Result, error) {
			return driver.Result{ExpiresIn: time.Hour}, nil
		})
	if want := `test: acquire "job": fence: closed`; err == nil || err.Error() != want || !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("err = %v; want %q", err, want)
	}
	var tries atomic.Int32
	_, err = e.Acquire(context.Background(), "job", time.Minute, nil,
		func(context.Context, *driver.Request) (driver.Result, error) {
			tries.Add(1)
			return driver.Result{Token: 1}, nil
		})
	if !errors.Is(err, fence.ErrClosed) || tries.Load() != 0 {
		t.Fatalf("after Close: err = %v after %d tries; want ErrClosed without a try", err, tries.Load())
	}
}

func TestEngine_BadArguments_NoTry(t *testing.T) {
	try := func(context.Context, *driver.Request) (driver.Result, error) {
		t.Fatal("tried with bad arguments")
		return driver.Result{}, nil
	}
	if _, err := engine().Acquire(context.Background(), "", time.Minute, nil, try); err == nil || err.Error() != `test: acquire: fence: invalid name "": is empty` {
		t.Errorf("empty name: %v", err)
	}
	if _, err := engine().Acquire(context.Background(), "job", time.Microsecond, nil, try); !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), `test: acquire "job": fence: invalid ttl "1µs"`) {
		t.Errorf("1µs TTL: %v", err)
	}
}

// The wait is measured by the Engine's clock: a virtual clock ends it.
func TestEngine_VirtualClock_BoundsTheWait(t *testing.T) {
	clock := inmem.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := engine()
	e.Clock = clock
	done := make(chan error, 1)
	var tried atomic.Int32
	go func() {
		_, err := e.Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithWait(5 * time.Second)},
			func(context.Context, *driver.Request) (driver.Result, error) {
				tried.Add(1)
				return driver.Result{ExpiresIn: time.Hour, Wake: make(chan struct{})}, nil
			})
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); tried.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no try within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("returned %v before the virtual clock moved", err)
	case <-time.After(20 * time.Millisecond):
	}
	clock.Advance(5 * time.Second)
	select {
	case err := <-done:
		if want := `test: lock "job" not acquired after waiting 5s: held, expires in 1h0m0s`; err == nil || err.Error() != want {
			t.Fatalf("err = %v; want %q", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5s after the virtual clock passed the wait")
	}
}

// When the context ends while tries fail, the error keeps the last try's failure:
// "not acquired" alone would hide that the store could not be reached.
func TestEngine_ContextEndsWhileTriesFail_KeepsTheLastFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	_, err := engine().Acquire(ctx, "job", time.Minute, []fence.AcquireOption{fence.WithWait(fence.WaitForever)},
		func(context.Context, *driver.Request) (driver.Result, error) {
			return driver.Result{}, driver.Transient(fence.ErrUnavailable)
		})
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("err = %v; want ErrNotAcquired, DeadlineExceeded and ErrUnavailable", err)
	}
	if !strings.HasSuffix(err.Error(), ": context deadline exceeded; last try: fence: store unavailable") {
		t.Errorf("err = %q; want the cause and then the last try's failure", err)
	}
}

func TestEngine_BadOwner_NoTry(t *testing.T) {
	try := func(context.Context, *driver.Request) (driver.Result, error) {
		t.Fatal("tried with a bad owner")
		return driver.Result{}, nil
	}
	_, err := engine().Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithOwner("a\nb")}, try)
	if !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), `test: acquire "job": fence: invalid owner "a\nb": contains the unprintable character U+000A`) {
		t.Errorf("owner with a newline: %v", err)
	}
	var owner string
	lease, err := engine().Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithOwner("host:42 job")},
		func(_ context.Context, r *driver.Request) (driver.Result, error) {
			owner = r.Options.Owner
			return driver.Result{Token: 1}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if owner != "host:42 job" || lease.Owner() != "host:42 job" {
		t.Errorf("the try saw owner %q and the lease says %q; want the option's in both", owner, lease.Owner())
	}
}
