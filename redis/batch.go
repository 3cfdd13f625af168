package redis

import (
	"context"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// maxFlights bounds how many calls or pipelines a batcher has in flight at once.
// One batches most (in BenchmarkAcquireReleaseParallel, 16 clients: 1.38-1.43x
// redislock's pairs/s against 1.22-1.27x with two), but a flight that hangs (a
// connection lost without a reset, until the client's ReadTimeout) would then
// hold up every call; with two, the calls queued meanwhile go out on the other.
const maxFlights = 2

// batcher sends the scripts of concurrent calls together, in one pipeline (group
// commit): a call that finds fewer than maxFlights pipelines in flight goes out at
// once, on its own, as if unbatched; the others queue, and the flight that
// finishes first sends them all in one pipeline. Under load each write and read of
// the client and of the server (their system calls are most of the CPU time of a
// pair) then carries many calls instead of one.
// Each call keeps its own reply, error and context: a call whose ctx ends returns
// ctx.Err() (the script may still run, as when a reply is lost; a call whose ctx
// ended before its pipeline was sent is left out of it).
//
// A Cluster client is not batched (c is nil: each call runs on its own): its
// pipeline waits for every node it touches, so one failing node would hold up
// the calls to the others.
type batcher struct {
	c       Client // nil: no batching
	mu      sync.Mutex
	queue   []*batchCall
	flights int
}

// batchCall is one queued script run.
type batchCall struct {
	ctx    context.Context
	script *goredis.Script
	keys   []string
	args   []any
	res    any
	err    error
	done   chan struct{}
}

// run runs script on keys and args, with the calls of other goroutines, and
// returns its reply or error, as script.Run does; or ctx.Err() if ctx ends first.
func (b *batcher) run(ctx context.Context, client Client, script *goredis.Script, keys []string, args []any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if b.c == nil {
		return script.Run(ctx, client, keys, args...).Result()
	}
	b.mu.Lock()
	if b.flights < maxFlights {
		// A flight is free, so nothing queues (calls queue only while every
		// flight is taken): go out at once, as if unbatched, on this goroutine
		// and without a call record (at idle nearly every call takes this path).
		b.flights++
		b.mu.Unlock()
		res, err := script.Run(ctx, b.c, keys, args...).Result()
		b.land()
		return res, err
	}
	call := &batchCall{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	b.queue = append(b.queue, call)
	b.mu.Unlock()
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// land ends a caller's flight once its call has its result; if calls queued
// meanwhile, the flight goes on: a new goroutine (the caller returns) sends them,
// and what queues after, until the queue is empty.
func (b *batcher) land() {
	if next := b.next(); next != nil {
		go func() {
			for batch := next; batch != nil; batch = b.next() {
				b.send(batch)
			}
		}()
	}
}

// next takes the queued calls, or ends the flight if there are none.
func (b *batcher) next() []*batchCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := b.queue
	b.queue = nil
	if next == nil {
		b.flights--
	}
	return next
}

// send runs the calls of batch in one pipeline, then those the server had no
// script cache for (NOSCRIPT: after a restart or a failover) with their source.
func (b *batcher) send(batch []*batchCall) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err // its caller returned already
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	batch = live
	if len(batch) == 1 {
		// Alone, a queued call runs as if unbatched, under its own ctx.
		c := batch[0]
		c.res, c.err = c.script.Run(c.ctx, b.c, c.keys, c.args...).Result()
		close(c.done)
		return
	}
	// The pipeline outlives any one call's ctx: a call whose ctx ends stops
	// waiting; the client's timeouts bound the pipeline.
	ctx := context.WithoutCancel(batch[0].ctx)
	cmds := make([]*goredis.Cmd, len(batch))
	p := b.c.Pipeline()
	for i, c := range batch {
		cmds[i] = c.script.EvalSha(ctx, p, c.keys, c.args...)
	}
	_, _ = p.Exec(ctx) // errors are read per command below
	var retry []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			retry = append(retry, i)
		}
	}
	if retry != nil {
		p = b.c.Pipeline()
		for _, i := range retry {
			c := batch[i]
			cmds[i] = c.script.Eval(ctx, p, c.keys, c.args...)
		}
		_, _ = p.Exec(ctx)
	}
	for i, c := range batch {
		c.res, c.err = cmds[i].Result()
		close(c.done)
	}
}
