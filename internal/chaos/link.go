package chaos

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// linkProxy is a TCP proxy between the workers and `fence serve` that injects link
// faults: latency on every chunk forwarded, resets of every open connection, and
// cuts (a black hole: bytes and new connections are swallowed, so requests time out,
// until the cut heals and the swallowed connections are reset). It stands in for
// toxiproxy, which is not available to this build.
type linkProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	delay     time.Duration
	blackhole bool
	closed    bool
}

// startLinkProxy listens on a free port of host (an IPv4 address of this machine) and
// forwards to target.
func startLinkProxy(host, target string) (*linkProxy, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("chaos: link proxy: %w", err)
	}
	p := &linkProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers c so that a reset closes it; it reports false once closed.
func (p *linkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *linkProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *linkProxy) state() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay, p.blackhole
}

func (p *linkProxy) handle(down net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, time.Second)
	if err != nil { // server down (kill nemesis): the client sees a closed connection
		p.untrack(down)
		return
	}
	if !p.track(up) {
		p.untrack(down, up)
		return
	}
	var once sync.Once
	done := func() { once.Do(func() { p.untrack(down, up) }) }
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.pipe(up, down); done() }()
	p.pipe(down, up)
	done()
}

// pipe copies src to dst, delaying each chunk by the current latency and dropping
// chunks while the link is cut.
func (p *linkProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			delay, cut := p.state()
			if delay > 0 {
				time.Sleep(delay)
			}
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// retarget sends new connections to target and resets the open ones (a failover
// behind a stable address).
func (p *linkProxy) retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.reset()
}

// setLatency delays every forwarded chunk by d (0: none).
func (p *linkProxy) setLatency(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// setCut starts (true) or heals (false) a cut. Healing resets the connections the
// cut swallowed, so clients reconnect.
func (p *linkProxy) setCut(cut bool) {
	p.mu.Lock()
	p.blackhole = cut
	p.mu.Unlock()
	if !cut {
		p.reset()
	}
}

// reset aborts every open connection with a TCP RST.
func (p *linkProxy) reset() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

// close stops the proxy and waits for its goroutines.
func (p *linkProxy) close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.reset()
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("chaos: link proxy: %w", err)
	}
	return nil
}
