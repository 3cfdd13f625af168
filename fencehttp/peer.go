package fencehttp

import (
	"errors"
	"os"
	"sync/atomic"
	"time"
)

// peerReader notices that the client of a parked connection went away by
// reading from the connection in a goroutine, as net/http's background read
// does: where the system offers nothing cheaper (see peer_linux.go).
type peerReader struct {
	stopping atomic.Bool
	gone     bool          // the read failed: the client went away
	done     chan struct{} // closed when the read ended
}

// read starts the reading goroutine of p. A byte the client sends (a pipelined
// request) ends the watch, as in net/http: the byte is kept to be replayed.
func (r *peerReader) read(p *parkedConn) {
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		var b [1]byte
		for {
			n, err := p.conn.Read(b[:])
			if n > 0 {
				p.pending = append(p.pending, b[0])
				return
			}
			if err != nil {
				if !(r.stopping.Load() && errors.Is(err, os.ErrDeadlineExceeded)) {
					r.gone = true
					p.cancel()
				}
				return
			}
		}
	}()
}

// stop ends the read and reports whether the client is still there.
func (r *peerReader) stop(p *parkedConn) bool {
	r.stopping.Store(true)
	_ = p.conn.SetReadDeadline(aLongTimeAgo)
	<-r.done
	_ = p.conn.SetReadDeadline(time.Time{})
	return !r.gone
}
