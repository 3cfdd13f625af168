package main

import (
	"strings"
	"testing"

	"github.com/fencelock/fence/fencehttp"
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

// The line `fence cluster add` prints starts the new node as the others run:
// with the peer TLS flags, or with --allow-plain-peers when plain peers are off
// loopback (the node refuses to start otherwise), or with neither on loopback.
func TestJoinCommand_CarriesWhatThePeersNeed(t *testing.T) {
	for _, tc := range []struct {
		peers     []string
		want, not string
	}{
		{[]string{"http://127.0.0.1:7431", "http://127.0.0.1:7432"}, "--join", "--allow-plain-peers"},
		{[]string{"http://10.0.0.1:7431", "http://10.0.0.2:7431"}, "--join --allow-plain-peers", "--peer-cert"},
		{[]string{"http://127.0.0.1:7431", "http://node-b:7431"}, "--join --allow-plain-peers", "--peer-cert"},
		{[]string{"https://10.0.0.1:7431", "https://10.0.0.2:7431"}, "--peer-cert CERT --peer-key KEY --peer-ca CA", "--allow-plain-peers"},
	} {
		ms := []fencehttp.ClusterMember{{Name: "a", Peer: tc.peers[0]}, {Name: "d", Peer: tc.peers[1]}}
		line, _ := joinCommand("d", ms)
		if !strings.Contains(line, tc.want) || strings.Contains(line, tc.not) {
			t.Errorf("joinCommand with peers %v = %q; want it to contain %q and not %q", tc.peers, line, tc.want, tc.not)
		}
	}
}
