package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// echoScript returns its argument and counts its runs in KEYS[1].
var echoScript = goredis.NewScript(`redis.call('INCR', KEYS[1]) return ARGV[1]`)

// Concurrent calls, batched, each get their own reply, also after the server lost
// its script cache (NOSCRIPT, resent with the source).
func TestBatcher_ConcurrentCallsGetOwnReplies_AfterScriptFlushToo(t *testing.T) {
	c := newClient(t, server(t).Addr)
	b := &batcher{c: c}
	ctx := ctxT(t)
	counter := uniqueName(t)
	const goroutines, calls = 16, 50
	for round := range 2 {
		if round == 1 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range calls {
					want := fmt.Sprintf("%d-%d-%d", round, g, i)
					res, err := b.run(ctx, c, echoScript, []string{counter}, []any{want})
					if err != nil || res != want {
						errs <- fmt.Errorf("run(%s) = %v, %v", want, res, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	if n, err := c.Get(ctx, counter).Int(); err != nil || n != 2*goroutines*calls {
		t.Errorf("script runs = %d, %v; want %d (each call once)", n, err, 2*goroutines*calls)
	}
	waitIdle(t, b)
}

// waitIdle waits until b has no flight and no queued call.
func waitIdle(t *testing.T, b *batcher) {
	t.Helper()
	waitFor(t, 5*time.Second, time.Millisecond, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.flights != 0 || len(b.queue) != 0 {
			return fmt.Errorf("%d flights, %d queued; want none", b.flights, len(b.queue))
		}
		return nil
	})
}

// A call whose ctx ends while it waits for a pipeline returns ctx.Err() at once,
// and is left out of the pipeline sent after.
func TestBatcher_CallWhoseCtxEndedWhileQueued_ReturnsAndIsNotSent(t *testing.T) {
	c := newClient(t, server(t).Addr)
	b := &batcher{c: c}
	ctx := ctxT(t)
	counter := uniqueName(t)
	// Slow scripts hold every flight: the server spins 300ms for each.
	slow := goredis.NewScript(`local t = redis.call('TIME') local until_ = t[1] * 1e6 + t[2] + 300000
		repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= until_ return 1`)
	var wg sync.WaitGroup
	for range maxFlights {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.run(ctx, c, slow, []string{counter + "-slow"}, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, 5*time.Second, time.Millisecond, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.flights < maxFlights {
			return fmt.Errorf("%d flights; want %d", b.flights, maxFlights)
		}
		return nil
	})
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.run(short, c, echoScript, []string{counter}, []any{"x"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 250*time.Millisecond {
		t.Errorf("queued call with a 20ms ctx = %v after %v; want context.DeadlineExceeded before the flights end", err, time.Since(start))
	}
	wg.Wait()
	waitIdle(t, b)
	if n, err := c.Exists(ctx, counter).Result(); err != nil || n != 0 {
		t.Errorf("counter exists = %d, %v; want 0: the call whose ctx ended was sent", n, err)
	}
}

// A Locker on a Cluster client does not batch (see batcher).
func TestNewLocker_ClusterClientNotBatched(t *testing.T) {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	l, err := NewLocker(cc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.batch.c != nil {
		t.Error("a Locker on a Cluster client batches")
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if l, _ := NewLocker(c, nil); l.batch.c == nil {
		t.Error("a Locker on a plain client does not batch")
	}
}
