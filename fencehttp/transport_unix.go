//go:build unix

package fencehttp

import (
	"net"
	"syscall"
)

// canCheckIdle: idleAlive can tell a closed idle connection here, so the Client
// uses directTransport.
const canCheckIdle = true

// idleAlive reports whether the idle connection c is still open with nothing to
// read: a peek that does not wait finds no data (EAGAIN). A connection the server
// closed reads EOF (or an error), and one with bytes waiting holds something no
// request asked for (a 408 before a close): neither may carry a request.
func idleAlive(c net.Conn) bool { return newIdleCheck(c)() }

// newIdleCheck returns idleAlive of c as a function made once per connection:
// its raw connection and the callback of its peek are not made again for every
// request.
func newIdleCheck(c net.Conn) func() bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() bool { return false }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	var (
		alive bool
		buf   [1]byte
	)
	peek := func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for readability
	}
	// One request at a time uses a connection (get takes it from the pool), so
	// alive and buf are never shared.
	return func() bool {
		alive = false
		err := rc.Read(peek)
		return err == nil && alive
	}
}
