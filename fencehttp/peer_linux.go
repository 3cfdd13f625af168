package fencehttp

import (
	"sync"
	"syscall"
)

// On Linux one goroutine of the process notices, for every parked connection,
// the client's going away: the connections are registered in an epoll instance
// of their own for EPOLLRDHUP (the client closed, or half-closed, its end) and
// the errors and hang-ups epoll always reports. A parked wait then costs no
// goroutine beyond its own. Data the client sends meanwhile (a pipelined
// request) is not watched for: it stays in the socket for the http.Server to
// read once the connection goes back.
var peers struct {
	once sync.Once
	fd   int   // the epoll instance
	err  error // why there is none: connections are read by a goroutine each
	mu   sync.Mutex
	m    map[int32]*parkedConn // by the id in their epoll event
	next int32
}

// peerWatch notices that the client of a parked connection went away.
type peerWatch struct {
	id     int32 // its key in peers.m; 0 if read by a goroutine
	rc     syscallConn
	reader peerReader
}

type syscallConn interface {
	Control(f func(fd uintptr)) error
}

// watchPeer starts watching p's client: cancels p.ctx if it goes away.
func watchPeer(p *parkedConn) {
	if !epollWatch(p) {
		p.peer.reader.read(p)
	}
}

func epollWatch(p *parkedConn) bool {
	peers.once.Do(startPeerPoller)
	if peers.err != nil {
		return false
	}
	sc, ok := p.conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	peers.mu.Lock()
	for {
		peers.next++
		if peers.next <= 0 {
			peers.next = 1
		}
		if peers.m[peers.next] == nil {
			break
		}
	}
	id := peers.next
	peers.m[id] = p
	peers.mu.Unlock()
	var cerr error
	err = rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: id}
		cerr = syscall.EpollCtl(peers.fd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || cerr != nil {
		peers.mu.Lock()
		delete(peers.m, id)
		peers.mu.Unlock()
		return false
	}
	p.peer.id, p.peer.rc = id, rc
	return true
}

func startPeerPoller() {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		peers.err = err
		return
	}
	peers.fd, peers.m = fd, make(map[int32]*parkedConn)
	go pollPeers(fd)
}

// pollPeers cancels the wait of each parked connection whose client went away.
func pollPeers(epfd int) {
	var evs [64]syscall.EpollEvent
	var gone []*parkedConn
	for {
		n, err := syscall.EpollWait(epfd, evs[:], -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return // cannot happen on a valid instance; waits still end at their end
		}
		peers.mu.Lock()
		for _, ev := range evs[:n] {
			if p := peers.m[ev.Fd]; p != nil {
				delete(peers.m, ev.Fd)
				gone = append(gone, p)
			}
		}
		peers.mu.Unlock()
		for i, p := range gone {
			p.cancel()
			gone[i] = nil
		}
		gone = gone[:0]
	}
}

// stop ends the watch and reports whether the client is still there.
func (w *peerWatch) stop(p *parkedConn) bool {
	if w.id == 0 {
		return w.reader.stop(p)
	}
	peers.mu.Lock()
	_, alive := peers.m[w.id]
	delete(peers.m, w.id)
	peers.mu.Unlock()
	_ = w.rc.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(peers.fd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
	return alive
}
