package fencehttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Parked waits: a waiting acquire (the long poll) or a blocking query that must
// wait leaves net/http, which keeps a goroutine per connection whose stack the
// handler chain has grown, a background read goroutine, and a 4 KiB reader and
// writer. The connection is taken over (Hijack) and the wait runs in one
// goroutine started afresh (its stack is what the wait needs), the client's going
// away is noticed without a goroutine where the system allows it (peer_linux.go),
// and the answer is written by hand. The connection then goes back to the
// http.Server for the client's next request (keep-alive), through the listener
// that Serve wraps, or is closed if the client asked for that or the server is
// shutting down. Waits take this road only on connections Serve accepts, over
// plain HTTP/1.1, for a request without a body or whose body the handler read
// to its end (bodyDone): what follows a request on the connection is read as
// the client's next request, so an unread body must never be left there. Any
// other wait stays in net/http.

// parking is the Server's state of parked waits.
type parking struct {
	mu        sync.Mutex
	listeners map[*http.Server]*parkListener // the listeners Serve wraps, by server
	queues    map[string]*acquireQueue       // waiting acquires, by lock name
	watches   map[string]*sharedWatch        // blocking queries' watches, by lock name
	n         atomic.Int64                   // waits out of net/http now
}

// Listener returns ln wrapped for hs to serve s.Handler() on it
// (hs.Serve(s.Listener(hs, ln))), so that the waits of s leave net/http while
// they wait: a parked waiting acquire or blocking query over plain HTTP/1.1 then
// costs the server one goroutine and the connection, not net/http's two
// goroutines and buffers. Its answer is the same, and the connection goes back
// to hs through the listener for the client's next request (unless the client
// asked for Connection: close); as for a new connection, that request must then
// come within hs.IdleTimeout (else hs.ReadTimeout), as on any kept-alive
// connection, and its headers within hs.ReadHeaderTimeout of its first byte.
// Waits on connections hs accepts elsewhere, over TLS or HTTP/2 stay in
// net/http. Shut down with hs.Shutdown and then s.Shutdown, which waits for the
// waits that left (hs.Shutdown does not know them).
func (s *Server) Listener(hs *http.Server, ln net.Listener) net.Listener {
	pl := &parkListener{Listener: ln, hs: hs, back: make(chan net.Conn), done: make(chan struct{}), accepted: make(chan accepted)}
	pl.forget = func() {
		s.parked.mu.Lock()
		if s.parked.listeners[hs] == pl {
			delete(s.parked.listeners, hs)
		}
		s.parked.mu.Unlock()
	}
	s.parked.mu.Lock()
	if s.parked.listeners == nil {
		s.parked.listeners = make(map[*http.Server]*parkListener)
	}
	s.parked.listeners[hs] = pl
	s.parked.mu.Unlock()
	go pl.acceptLoop()
	return pl
}

// Serve is hs.Serve(s.Listener(hs, ln)): it serves hs on ln with the waits of s
// leaving net/http (see Listener), and returns hs.Serve's error.
func (s *Server) Serve(hs *http.Server, ln net.Listener) error {
	return hs.Serve(s.Listener(hs, ln))
}

// Shutdown drains s (see Drain) and waits until every wait that left net/http
// (see Serve) has answered, or ctx ends; it returns ctx.Err() then, else nil.
// Call it with or after http.Server.Shutdown, before closing the store.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.parked.n.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// listener returns the listener through which r's connection can go back to its
// http.Server, or nil if r's wait must stay in net/http.
func (s *Server) listenerOf(r *http.Request) *parkListener {
	if r.TLS != nil || r.ProtoMajor != 1 || r.ProtoMinor < 1 || (r.Method != http.MethodGet && r.Method != http.MethodPost) {
		return nil
	}
	hs, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if hs == nil {
		return nil
	}
	s.parked.mu.Lock()
	defer s.parked.mu.Unlock()
	return s.parked.listeners[hs]
}

// leave takes r's connection from net/http for a wait and returns it parked, or
// nil if the wait must stay in net/http (w and r are then untouched). The caller
// must run the wait in a new goroutine and return from the handler at once.
// bodyRead says the caller read r's body to its end; a request with a body not
// read is never taken over (see bodyDone).
func (s *Server) leave(w http.ResponseWriter, r *http.Request, bodyRead bool) *parkedConn {
	if !bodyDone(r, bodyRead) {
		return nil
	}
	pl := s.listenerOf(r)
	if pl == nil {
		return nil
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return nil
	}
	conn = unwrapConn(conn)
	// The request is not kept: its body, header and context hold on to net/http's
	// buffers. The answer needs only its method and URL.
	p := &parkedConn{conn: conn, l: pl, close: r.Close, head: r.Method == http.MethodHead, method: r.Method, url: r.URL}
	// What the client sent after the request (pipelined requests) is replayed to
	// the http.Server when the connection goes back.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		p.pending = slices.Clone(b)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	s.parked.n.Add(1)
	watchPeer(p)
	return p
}

// bodyDone reports whether the connection holds nothing more of r's body: r has
// none (no Content-Length above 0, no Transfer-Encoding), or read says the
// handler read it and a read of it ends at once (net/http's reader of a body
// read to its end answers io.EOF without reading the connection). Whatever the
// connection holds after r is replayed as the client's next request when a
// parked connection goes back to the http.Server, so a body left there would be
// read as a request of its own: a request whose body is not read stays in
// net/http, which reads the body past the handler's answer (or closes the
// connection) before it reads the next request. read must be false unless the
// handler read the body to its end: a read of a body not read waits for the
// client.
func bodyDone(r *http.Request, read bool) bool {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return true
	}
	if !read || r.Body == nil {
		return false
	}
	var b [1]byte
	n, err := r.Body.Read(b[:])
	return n == 0 && err == io.EOF
}

// parkedConn is a connection taken from net/http for a wait.
type parkedConn struct {
	conn    net.Conn
	method  string   // of the request
	url     *url.URL // of the request
	l       *parkListener
	close   bool   // the client asked for Connection: close
	head    bool   // a HEAD request: no body in the answer
	pending []byte // bytes read beyond the request, to replay
	// finished says the wait is answered (see done): by its goroutine only.
	finished bool

	// ctx is the wait's context: ended when the client goes away.
	ctx    context.Context
	cancel context.CancelFunc
	peer   peerWatch
}

// request is what the answer of p's wait needs of its request.
func (p *parkedConn) request() *http.Request {
	return &http.Request{Method: p.method, URL: p.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
}

// done ends a parked wait: it answers rw on the connection (unless the client
// went away) and hands the connection back to the http.Server, or closes it if
// the client asked for that, the server drains or the answer failed. It reports
// whether the answer was written.
func (s *Server) done(p *parkedConn, rw *rawResponse) bool {
	p.finished = true
	defer s.parked.n.Add(-1)
	alive := p.peer.stop(p)
	p.cancel()
	if !alive {
		_ = p.conn.Close()
		return false
	}
	closing := p.close || s.drainCtx.Err() != nil
	buf := getBuffer()
	defer putBuffer(buf)
	*buf = rw.appendTo((*buf)[:0], closing, !p.head)
	_ = p.conn.SetWriteDeadline(time.Now().Add(answerTimeout))
	_, err := p.conn.Write(*buf)
	if err != nil || closing {
		_ = p.conn.Close()
		return err == nil
	}
	_ = p.conn.SetWriteDeadline(time.Time{})
	var c net.Conn = p.conn
	if len(p.pending) > 0 {
		c = &replayConn{Conn: p.conn, pending: p.pending}
	} else if idle := p.l.idleTimeout(); idle > 0 {
		c = &idleConn{Conn: p.conn, idle: idle}
	}
	p.l.handBack(c)
	return true
}

// answerTimeout bounds the write of a parked wait's answer: a client that does
// not read it is cut off.
const answerTimeout = 10 * time.Second

// rawResponse is an http.ResponseWriter that keeps the answer, for a parked wait
// to write it by hand.
type rawResponse struct {
	h      http.Header
	status int
	body   []byte
}

func (w *rawResponse) Header() http.Header {
	if w.h == nil {
		w.h = make(http.Header, 4)
	}
	return w.h
}

func (w *rawResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *rawResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, b...)
	return len(b), nil
}

// appendTo appends the HTTP/1.1 answer to dst as net/http would write it: the
// status line, the headers (sorted), Connection: close if closing, Date and
// Content-Length, and the body if withBody.
func (w *rawResponse) appendTo(dst []byte, closing, withBody bool) []byte {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	dst = append(dst, http.StatusText(status)...)
	dst = append(dst, "\r\n"...)
	keys := make([]string, 0, len(w.h))
	for k := range w.h {
		if k != "Content-Length" && k != "Connection" && k != "Date" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range w.h[k] {
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	if closing {
		dst = append(dst, "Connection: close\r\n"...)
	}
	dst = append(dst, "Date: "...)
	dst = time.Now().UTC().AppendFormat(dst, http.TimeFormat)
	dst = append(dst, "\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(w.body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	if withBody {
		dst = append(dst, w.body...)
	}
	return dst
}

// parkListener is the listener Serve gives the http.Server: the connections ln
// accepts, and the parked ones that go back.
type parkListener struct {
	net.Listener
	hs       *http.Server
	back     chan net.Conn
	accepted chan accepted
	done     chan struct{}
	once     sync.Once
	forget   func() // unregisters it from its Server
}

type accepted struct {
	c   net.Conn
	err error
}

// acceptLoop accepts on the wrapped listener until it fails for good.
func (l *parkListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) && !isTemporary(err) {
			return
		}
	}
}

// isTemporary reports the accept errors that http.Server rides out.
func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// Accept returns the next accepted or handed-back connection.
func (l *parkListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.back:
		return c, nil
	case a := <-l.accepted:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the wrapped listener; connections handed back later are closed.
func (l *parkListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.forget()
	})
	return l.Listener.Close()
}

// handBack gives c to the http.Server for its next request, or closes it if the
// listener is closed.
func (l *parkListener) handBack(c net.Conn) {
	select {
	case l.back <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// replayConn is a connection whose first bytes were read already.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// CloseWrite half-closes the connection, as net/http does before closing it.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// idleTimeout is how long hs keeps an idle connection open, as net/http
// reckons it: IdleTimeout, else ReadTimeout; 0 for no limit.
func (l *parkListener) idleTimeout() time.Duration {
	if l.hs.IdleTimeout != 0 {
		return l.hs.IdleTimeout
	}
	return l.hs.ReadTimeout
}

// idleConn is a connection going back to the http.Server after a parked wait,
// idle until the client's next request. The server takes it for a new
// connection, whose first read deadline is its ReadHeaderTimeout from now: that
// would close a kept-alive connection idle for longer (10s by default in fence
// serve, against its 2 minutes of IdleTimeout). So until the first byte comes
// the first deadline is the idle timeout instead, and the header deadline then
// runs from that byte, as net/http does between the requests of a connection.
type idleConn struct {
	net.Conn
	idle time.Duration

	mu      sync.Mutex
	started bool          // the server set its first read deadline
	waiting bool          // no byte yet: the idle deadline stands in for it
	header  time.Duration // the deadline the server asked, from when it asked
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started = true
		if !t.IsZero() {
			c.waiting, c.header = true, time.Until(t)
			return c.Conn.SetReadDeadline(time.Now().Add(c.idle))
		}
	}
	c.waiting = false
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if c.waiting {
			c.waiting = false
			_ = c.Conn.SetReadDeadline(time.Now().Add(c.header))
		}
		c.mu.Unlock()
	}
	return n, err
}

// CloseWrite half-closes the connection, as net/http does before closing it.
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// unwrapConn returns the connection under the wrappers a parked wait hands
// back, once they no longer change anything (an idleConn whose request came,
// a replayConn with nothing left to replay), so that a connection parked again
// is the network's own (peer_linux.go watches its file descriptor).
func unwrapConn(c net.Conn) net.Conn {
	for {
		switch w := c.(type) {
		case *idleConn:
			w.mu.Lock()
			waiting := w.waiting
			w.mu.Unlock()
			if waiting {
				return c
			}
			c = w.Conn
		case *replayConn:
			if len(w.pending) > 0 {
				return c
			}
			c = w.Conn
		default:
			return c
		}
	}
}
