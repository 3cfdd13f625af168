package chaos

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line through c and returns the answer (or the error).
func roundTrip(c net.Conn, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestLinkProxy_ForwardsThenResetsThenCutsThenHeals(t *testing.T) {
	px, err := startLinkProxy("127.0.0.1", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer px.close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", px.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dial()
	if got, err := roundTrip(c, 2*time.Second); got != "ping\n" || err != nil {
		t.Fatalf("through the proxy: got %q, %v; want \"ping\\n\"", got, err)
	}

	px.setLatency(100 * time.Millisecond)
	began := time.Now()
	if got, err := roundTrip(c, 2*time.Second); got != "ping\n" || err != nil {
		t.Fatalf("with latency: got %q, %v", got, err)
	}
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Errorf("round trip with 100ms latency each way took %v, want >= 200ms", d)
	}
	px.setLatency(0)

	px.reset()
	if got, err := roundTrip(c, 2*time.Second); err == nil {
		t.Errorf("after reset: got %q, want an error", got)
	}

	px.setCut(true)
	c2 := dial()
	if got, err := roundTrip(c2, 300*time.Millisecond); err == nil {
		t.Errorf("during a cut: got %q, want a timeout", got)
	}
	px.setCut(false)
	c3 := dial()
	if got, err := roundTrip(c3, 2*time.Second); got != "ping\n" || err != nil {
		t.Errorf("after the cut healed: got %q, %v; want \"ping\\n\"", got, err)
	}
}
