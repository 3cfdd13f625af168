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

// A call whose ctx ends while it waits for a pipeline returns ctx.Err() then,
// while every flight is still taken, and is left out of the pipeline sent after.
func TestBatcher_CallWhoseCtxEndedWhileQueued_ReturnsAndIsNotSent(t *testing.T) {
	c := newClient(t, server(t).Addr)
	b := &batcher{c: c}
	ctx := ctxT(t)
	counter := uniqueName(t)
	// Calls on the key slow are held in the client until unblocked.
	slow := counter + "-slow"
	unblock := make(chan struct{})
	c.AddHook(&holdHook{key: slow, until: unblock})
	var wg sync.WaitGroup
	for range maxFlights {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.run(ctx, c, echoScript, []string{slow}, []any{"slow"}); err != nil {
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
	if _, err := b.run(short, c, echoScript, []string{counter}, []any{"x"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued call with a 20ms ctx = %v; want context.DeadlineExceeded", err)
	}
	close(unblock) // the flights end; the one that ends first takes the queue
	wg.Wait()
	waitIdle(t, b)
	if n, err := c.Exists(ctx, counter).Result(); err != nil || n != 0 {
		t.Errorf("counter exists = %d, %v; want 0: the call whose ctx ended was sent", n, err)
	}
	if n, err := c.Get(ctx, slow).Int(); err != nil || n != maxFlights {
		t.Errorf("slow calls ran %d times, %v; want %d", n, err, maxFlights)
	}
}

// holdHook holds every command whose first key is key until until closes.
type holdHook struct {
	key   string
	until chan struct{}
}

func (h *holdHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *holdHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		// EVALSHA sha numkeys key ...
		if args := cmd.Args(); len(args) > 3 && args[3] == h.key {
			<-h.until
		}
		return next(ctx, cmd)
	}
}
func (h *holdHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
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
