package fencehttp

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit of the Client's lock operations over POST /v1/batch.
//
// A lock operation that does not wait (an acquire try, a renew, a release) that
// finds fewer than batchFlights requests of the Client's operations in the air goes
// out at once, alone, on its own route, as without batching: a lone call is as
// fast as ever. Calls that come while every flight is in the air queue; the
// flight that lands first sends them all in one POST /v1/batch (at most
// maxClientBatch), and keeps flying while calls queue. Under load one request,
// one write and one read on each side, then carry many calls instead of one,
// which is where the time of a lock pair goes (system calls, HTTP parsing).
//
// Each call keeps its own answer, error and context. A call whose context ends
// while queued or in the air returns at once; if the batch then brings it a
// grant, the lease is released (best effort), as the server releases a grant
// whose client went away. A server without /v1/batch (404 or 405: older than
// this client) gets single requests again, and the Client stops batching for
// batchRetryAfter before it tries again.

// batchFlights bounds the requests of batched operations in the air at once.
var batchFlights = 2

// maxClientBatch is the most calls one batch carries (the server takes
// MaxBatchOps), and maxClientBatchBytes the most bytes of operations: below the
// server's default body limit, so that a batch is not refused as too large (one
// refused anyway is sent again as single requests).
const (
	maxClientBatch      = 64
	maxClientBatchBytes = DefaultMaxBodyBytes / 2
	batchRetryAfter     = time.Minute
)

// batcher queues the Client's concurrent lock operations (see above).
type batcher struct {
	mu      sync.Mutex
	queue   []*batchCall
	flights int
	offAt   atomic.Int64 // unix nanoseconds of the last 404/405 to a batch; 0 if none
}

// batchCall is one queued operation.
type batchCall struct {
	ctx      context.Context
	op, name string
	path     string // its single route
	body     []byte // its single route's body
	line     []byte // its element of a batch: {"op":...,"name":...,...body}

	state    atomic.Int32 // callWaiting, then callDelivered or callAbandoned
	resp     *response
	err      error
	fallback bool // the batch was refused: send the call alone
	done     chan struct{}
}

const (
	callWaiting int32 = iota
	callDelivered
	callAbandoned
)

// off reports whether the server refused batches less than batchRetryAfter ago.
func (b *batcher) off() bool {
	t := b.offAt.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < batchRetryAfter
}

// lockOp sends the lock operation op on name, whose single route is path with
// JSON body, alone or in a batch (see above), and returns the answer: its status
// and body as the single route gives them. Errors are those of do. With
// queueOnly, a call that would go out alone is not sent: lockOp returns a nil
// answer and nil error, and the caller sends it as it likes (a waiting
// acquire's long poll).
func (c *Client) lockOp(ctx context.Context, op, name, path string, body []byte, queueOnly bool) (*response, error) {
	b := &c.batch
	if err := ctx.Err(); err != nil {
		return nil, c.transportError(ctx, op, name, err)
	}
	if b.off() {
		if queueOnly {
			return nil, nil
		}
		return c.do(ctx, op, name, http.MethodPost, path, jsonHeader(), body, 0)
	}
	var call *batchCall
	for {
		b.mu.Lock()
		if b.flights < batchFlights {
			if queueOnly {
				b.mu.Unlock()
				return nil, nil
			}
			b.flights++
			b.mu.Unlock()
			resp, err := c.do(ctx, op, name, http.MethodPost, path, jsonHeader(), body, 0)
			c.land()
			return resp, err
		}
		if call != nil {
			b.queue = append(b.queue, call)
			b.mu.Unlock()
			break
		}
		b.mu.Unlock()
		// Every flight is in the air: the call queues, its element of a batch
		// made outside the lock (a flight may land meanwhile: then it goes alone).
		call = &batchCall{ctx: ctx, op: op, name: name, path: path, body: body, done: make(chan struct{})}
		call.line = batchLine(op, name, body)
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		if call.state.CompareAndSwap(callWaiting, callAbandoned) {
			return nil, c.transportError(ctx, op, name, ctx.Err())
		}
		<-call.done // delivered as the context ended
	}
	if call.fallback {
		if queueOnly {
			return nil, nil
		}
		return c.do(ctx, op, name, http.MethodPost, path, jsonHeader(), body, 0)
	}
	return call.resp, call.err
}

// jsonHeader returns the header of a request with a JSON body. It is one map
// shared by every request: read it, never change it.
func jsonHeader() http.Header { return jsonHeaderShared }

var jsonHeaderShared = http.Header{"Content-Type": {"application/json"}}

// batchLine returns the element of a batch of the operation op on name with the
// single route's body (a JSON object).
func batchLine(op, name string, body []byte) []byte {
	line := make([]byte, 0, len(body)+len(name)+24)
	line = append(append(append(line, `{"op":"`...), op...), `","name":`...)
	if plainJSONString(name) {
		line = append(append(append(line, '"'), name...), '"')
	} else {
		q, _ := json.Marshal(name)
		line = append(line, q...)
	}
	if len(body) < 2 || body[0] != '{' {
		return append(line, '}')
	}
	if rest := body[1:]; len(rest) > 1 || rest[0] != '}' {
		line = append(line, ',')
		return append(line, rest...)
	}
	return append(line, '}')
}

// land ends a flight that has landed: while calls are queued, it sends them on
// another goroutine (the caller of the flight has its answer), which keeps
// flying until the queue is empty.
func (c *Client) land() {
	if next := c.batch.next(); next != nil {
		go func() {
			for batch := next; batch != nil; batch = c.batch.next() {
				c.sendBatch(batch)
			}
		}()
	}
}

// next takes the queued calls (at most maxClientBatch, and maxClientBatchBytes of
// them), or ends the flight if there are none.
func (b *batcher) next() []*batchCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.flights--
		return nil
	}
	n, size := 0, 0
	for n < len(b.queue) && n < maxClientBatch {
		size += len(b.queue[n].line) + 1
		if n > 0 && size > maxClientBatchBytes {
			break
		}
		n++
	}
	batch := b.queue[:n:n]
	if n == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = append([]*batchCall(nil), b.queue[n:]...)
	}
	return batch
}

// sendBatch sends the calls of batch (those whose callers still wait) in one
// POST /v1/batch, or alone if one is left, and hands each its answer.
func (c *Client) sendBatch(batch []*batchCall) {
	live := batch[:0:0]
	for _, call := range batch {
		if call.state.Load() == callWaiting {
			live = append(live, call)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		call := live[0]
		resp, err := c.do(call.ctx, call.op, call.name, http.MethodPost, call.path, jsonHeader(), call.body, 0)
		c.deliver(call, resp, err)
		return
	}
	if c.batch.off() {
		// Refused by the server since these calls queued.
		for _, call := range live {
			c.deliverFallback(call)
		}
		return
	}
	size := 2
	for _, call := range live {
		size += len(call.line) + 1
	}
	body := make([]byte, 0, size)
	body = append(body, '[')
	for i, call := range live {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, call.line...)
	}
	body = append(body, ']')
	// The batch outlives any one call's context: a call whose context ends stops
	// waiting; RequestTimeout bounds the batch.
	resp, err := c.do(context.Background(), "batch", "", http.MethodPost, "/v1/batch", jsonHeader(), body, 0)
	if err != nil {
		for _, call := range live {
			c.deliver(call, nil, err)
		}
		return
	}
	switch resp.status {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		// An older server (no /v1/batch), or a batch this server refuses whole:
		// each call goes alone, as without batching.
		if resp.status == http.StatusNotFound || resp.status == http.StatusMethodNotAllowed {
			c.batch.offAt.Store(time.Now().UnixNano())
		}
		for _, call := range live {
			c.deliverFallback(call)
		}
		return
	default:
		err := c.answerError(resp)
		for _, call := range live {
			c.deliver(call, nil, err)
		}
		return
	}
	results, ok := parseBatchResults(resp.body, len(live))
	for i, call := range live {
		if !ok {
			c.deliver(call, nil, c.malformed(call.op, call.name))
			continue
		}
		c.deliver(call, &results[i], nil)
	}
}

// deliver hands call its answer, or, if its caller is gone, releases the lease of
// a grant nobody will learn of (best effort, as the server does for a client that
// went away; otherwise it expires after its TTL).
func (c *Client) deliver(call *batchCall, resp *response, err error) {
	call.resp, call.err = resp, err
	if call.state.CompareAndSwap(callWaiting, callDelivered) {
		close(call.done)
		return
	}
	if call.op != batchAcquire || resp == nil || resp.status != http.StatusOK {
		return
	}
	var l leaseResponse
	if !l.decodeFast(resp.body) && json.Unmarshal(resp.body, &l) != nil || l.ID == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Release(ctx, call.name, l.ID)
	}()
}

// deliverFallback tells call's caller to send it alone.
func (c *Client) deliverFallback(call *batchCall) {
	call.fallback = true
	if call.state.CompareAndSwap(callWaiting, callDelivered) {
		close(call.done)
	}
}

// parseBatchResults reads the answer to a batch of n operations, [{"status":S,
// "body":B},...], into their answers; false if it is not that.
func parseBatchResults(data []byte, n int) ([]response, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	i := skipSpace(data, 0)
	if data[i] != '[' {
		return nil, false
	}
	out := make([]response, 0, n)
	i = skipSpace(data, i+1)
	for data[i] != ']' {
		end := skipJSON(data, i)
		elem := data[i:end]
		if elem[0] != '{' {
			return nil, false
		}
		var r response
		for j := skipSpace(elem, 1); elem[j] != '}'; {
			kend := skipJSON(elem, j)
			key := jsonString(elem[j:kend])
			j = skipSpace(elem, skipSpace(elem, kend)+1)
			vend := skipJSON(elem, j)
			val := elem[j:vend]
			switch key {
			case "status":
				st, err := strconv.Atoi(string(val))
				if err != nil {
					return nil, false
				}
				r.status = st
			case "body":
				r.body = val
			}
			j = skipSpace(elem, vend)
			if elem[j] == ',' {
				j = skipSpace(elem, j+1)
			}
		}
		if r.status == 0 || r.body == nil {
			return nil, false
		}
		out = append(out, r)
		i = skipSpace(data, end)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return out, len(out) == n
}
