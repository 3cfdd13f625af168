package fencehttp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// directTransport is the Client's default http.RoundTripper: HTTP/1.1 over
// keep-alive connections to an http:// server, each request written and its
// answer read on the calling goroutine. net/http's Transport runs two goroutines
// per connection and hands every request and answer between them and the caller:
// at the rate of lock pairs those handoffs (and their allocations) cost as much as
// the request itself. Anything else (https, a proxy from the environment) goes to
// the standard Transport, fallback, as before.
//
// The Client's own requests take the lean path (send, transport_lean.go), which
// writes them and reads the answers it expects itself; RoundTrip's requests, and
// answers the lean path does not read, are written and parsed by net/http
// (Request.Write, ReadResponse). An idle connection is checked before it is
// reused (idleAlive): one the server has closed (its idle timeout, a graceful
// shutdown) is dropped, never written to, so a POST is never sent on a
// connection already closed.
type directTransport struct {
	fallback *http.Transport
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle  int

	mu     sync.Mutex
	idle   map[string][]*directConn // by host:port
	closed bool                     // by CloseIdleConnections: nothing to keep idle until the next use
}

// directConn is one keep-alive connection.
type directConn struct {
	c     net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	alive func() bool // idleAlive of c (newIdleCheck)
	kill  func()      // ends the read or write in progress on c: a deadline in the past
	// wbuf is the lean path's request buffer (transport_lean.go), kept with its
	// connection so that requests after the first allocate none.
	wbuf []byte
}

func newDirectTransport(fallback *http.Transport, dial func(ctx context.Context, network, addr string) (net.Conn, error), maxIdle int) *directTransport {
	return &directTransport{fallback: fallback, dial: dial, maxIdle: maxIdle, idle: make(map[string][]*directConn)}
}

// direct reports whether req is one for the direct path: plain http, no proxy.
func (t *directTransport) direct(req *http.Request) bool {
	if req.URL.Scheme != "http" || !canCheckIdle {
		return false
	}
	if t.fallback.Proxy != nil {
		if u, err := t.fallback.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// RoundTrip sends req and returns its answer, whose Body must be read to EOF and
// closed for the connection to be kept. Errors are net/http's: *net.OpError,
// io.EOF, io.ErrUnexpectedEOF, a timeout at the context's deadline, and the
// context's error once it is done.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, time.Time{})
}

// roundTrip is RoundTrip with a deadline of its own (zero: none) besides the
// context's: reached first, the request fails with a timeout (os.ErrDeadlineExceeded),
// the context still alive.
func (t *directTransport) roundTrip(req *http.Request, deadline time.Time) (*http.Response, error) {
	if !t.direct(req) {
		if !deadline.IsZero() {
			ctx, cancel := context.WithDeadline(req.Context(), deadline)
			resp, err := t.fallback.RoundTrip(req.WithContext(ctx))
			if err != nil {
				cancel()
				return nil, err
			}
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil { // as net/http: an ended context sends nothing
		return nil, err
	}
	addr := canonicalAddr(req)
	dc, err := t.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	stop := dc.arm(ctx, deadline)
	if err := req.Write(dc.bw); err != nil {
		return nil, dc.abort(ctx, stop, err)
	}
	if err := dc.bw.Flush(); err != nil {
		return nil, dc.abort(ctx, stop, err)
	}
	resp, err := dc.readFinal(req)
	if err != nil {
		return nil, dc.abort(ctx, stop, err)
	}
	resp.Body = &directBody{rc: resp.Body, t: t, dc: dc, addr: addr, stop: stop, keep: !resp.Close, ctx: ctx}
	return resp, nil
}

// arm sets dc's deadline for a request: the request's own (zero: none), unless
// the context's comes first. The context ends the request by a deadline in the
// past on the connection, which fails the read or write in progress at once
// (and, as the context is done by then, the request fails with its error). The
// function it returns stops that, as context.AfterFunc's: false if the
// context's end has come first, when the connection's deadline is no longer
// the request's to clear.
func (dc *directConn) arm(ctx context.Context, deadline time.Time) func() bool {
	stop := neverStop
	if ctx.Done() != nil { // a context that never ends (Background) has nothing to arm
		stop = context.AfterFunc(ctx, dc.kill)
	}
	if dl, ok := ctx.Deadline(); !deadline.IsZero() && (!ok || deadline.Before(dl)) {
		_ = dc.c.SetDeadline(deadline)
	}
	return stop
}

func neverStop() bool { return true }

// abort ends a request on dc that failed with err: the context's hook
// stopped, the connection closed. It returns the context's error if it has
// ended (the cause of err, then), or else err.
func (dc *directConn) abort(ctx context.Context, stop func() bool, err error) error {
	stop()
	dc.c.Close()
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// readFinal reads the answer to req (nil: not a HEAD) on dc with net/http's
// ReadResponse. An informational answer (a proxy's 103 Early Hints) comes
// before the answer: skipped, as net/http's Transport skips it.
func (dc *directConn) readFinal(req *http.Request) (*http.Response, error) {
	resp, err := http.ReadResponse(dc.br, req)
	for i := 0; err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols; i++ {
		if i == 5 {
			return nil, errors.New("fencehttp: too many informational answers")
		}
		resp, err = http.ReadResponse(dc.br, req)
	}
	return resp, err
}

// directBody is the body of an answer on a directConn: read to EOF and closed,
// it puts the connection back in the pool.
type directBody struct {
	rc   io.ReadCloser
	t    *directTransport
	dc   *directConn
	addr string
	stop func() bool
	keep bool // the answer allows keep-alive
	ctx  context.Context
	eof  bool
	done bool
}

func (b *directBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, errors.New("fencehttp: read on a closed body")
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.keep = false
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
	}
	return n, err
}

func (b *directBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// stop reports false if the context's deadline-setting has run (or is
	// running): the connection's deadline is then not ours to clear.
	if !b.stop() || !b.eof || !b.keep {
		b.dc.c.Close()
		return nil
	}
	if err := b.dc.c.SetDeadline(time.Time{}); err != nil {
		b.dc.c.Close()
		return nil
	}
	b.t.put(b.addr, b.dc)
	return nil
}

// cancelBody cancels the context of its request when closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// get returns an idle connection to addr that the server has not closed, or a new one.
func (t *directTransport) get(ctx context.Context, addr string) (*directConn, error) {
	for {
		t.mu.Lock()
		t.closed = false
		list := t.idle[addr]
		var dc *directConn
		if n := len(list); n > 0 {
			dc = list[n-1]
			list[n-1] = nil
			t.idle[addr] = list[:n-1]
		}
		t.mu.Unlock()
		if dc == nil {
			break
		}
		if dc.br.Buffered() == 0 && dc.alive() {
			return dc, nil
		}
		dc.c.Close() // closed by the server, or it sent what nobody asked for
	}
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newDirectConn(c), nil
}

func newDirectConn(c net.Conn) *directConn {
	return &directConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096),
		alive: newIdleCheck(c), kill: func() { _ = c.SetDeadline(aLongTimeAgo) }}
}

// put keeps dc idle for the next request to addr, or closes it beyond maxIdle.
func (t *directTransport) put(addr string, dc *directConn) {
	t.mu.Lock()
	if !t.closed && len(t.idle[addr]) < t.maxIdle {
		t.idle[addr] = append(t.idle[addr], dc)
		dc = nil
	}
	t.mu.Unlock()
	if dc != nil {
		dc.c.Close()
	}
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = make(map[string][]*directConn)
	t.closed = true
	t.mu.Unlock()
	for _, list := range idle {
		for _, dc := range list {
			dc.c.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// aLongTimeAgo is a deadline that has passed: set on a connection, it fails the
// read or write in progress.
var aLongTimeAgo = time.Unix(1, 0)

// canonicalAddr is req's host:port, with port 80 if the URL has none.
func canonicalAddr(req *http.Request) string {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(host, port)
}
