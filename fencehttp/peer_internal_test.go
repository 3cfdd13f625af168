package fencehttp

import (
	"context"
	"net"
	"testing"
	"time"
)

// The goroutine reader of a parked connection (what watches the client where
// epoll does not): a client that closes ends the wait; one that sends a byte
// (a pipelined request) is still there and its byte is kept; stop interrupts it.
func TestPeerReader_GoneSendsOrStopped(t *testing.T) {
	park := func() (*parkedConn, net.Conn) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		p := &parkedConn{conn: server}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		p.peer.reader.read(p)
		return p, client
	}

	p, client := park()
	client.Close()
	select {
	case <-p.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("client closed: want the wait's context ended")
	}
	if p.peer.reader.stop(p) {
		t.Fatal("client closed: stop says it is still there")
	}

	p, client = park()
	go func() { _, _ = client.Write([]byte("GET")) }()
	<-p.peer.reader.done
	if !p.peer.reader.stop(p) || p.ctx.Err() != nil || string(p.pending) != "G" {
		t.Fatalf("client sent a request: want it there, its first byte kept and the wait going on, got pending %q, ctx %v", p.pending, p.ctx.Err())
	}

	p, _ = park()
	if !p.peer.reader.stop(p) || p.ctx.Err() != nil {
		t.Fatalf("stopped: want the client there and the wait going on, got ctx %v", p.ctx.Err())
	}
}
