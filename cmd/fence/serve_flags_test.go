package main

import (
	"testing"

	"github.com/fencelock/fence/internal/cluster"
)

// Which listen and peer addresses count as off loopback, from the text alone
// (DESIGN section 6): every interface, any host name (for the API, but
// localhost), any address outside 127.0.0.0/8 and ::1.
func TestOffLoopback_Table(t *testing.T) {
	for _, c := range []struct {
		addr      string
		api, peer bool // off loopback for --listen, for --peers
	}{
		{":7420", true, true},
		{"0.0.0.0:1", true, true},
		{"[::]:1", true, true},
		{"127.0.0.1:1", false, false},
		{"127.0.0.2:1", false, false},
		{"127.255.255.254:1", false, false},
		{"[::1]:1", false, false},
		{"[::ffff:127.0.0.1]:1", false, false},
		{"[::ffff:10.0.0.1]:1", true, true},
		{"localhost:1", false, true}, // a peer name makes the node listen on every interface
		{"LocalHost:1", false, true},
		{"localhost.:1", true, true},
		{"example:1", true, true},
		{"node-a.internal:1", true, true},
		{"10.0.0.1:1", true, true},
		{"192.168.1.1:1", true, true},
		{"128.0.0.1:1", true, true},
		{"[fe80::1%eth0]:1", true, true},
		{"[::2]:1", true, true},
		{"[2001:db8::1]:1", true, true},
		{"garbage", true, true},
	} {
		if got := offLoopback(c.addr); got != c.api {
			t.Errorf("offLoopback(%q) = %v; want %v", c.addr, got, c.api)
		}
		if got := cluster.PeerOffLoopback(c.addr); got != c.peer {
			t.Errorf("cluster.PeerOffLoopback(%q) = %v; want %v", c.addr, got, c.peer)
		}
	}
}
