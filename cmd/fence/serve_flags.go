package main

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// listenAddr checks --listen and returns the address to listen on. HOST:PORT is
// taken as given (":PORT" listens on every interface, as net.Listen does); a bare
// PORT means 127.0.0.1:PORT, loopback only like the default, so that a short flag
// never opens the server to the network by surprise. A port is a number from 0
// (any free port) to 65535.
func listenAddr(listen string) (string, error) {
	addr := listen
	if addr != "" && strings.Trim(addr, "0123456789") == "" {
		addr = net.JoinHostPort("127.0.0.1", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || strings.ContainsAny(host, " \t/") {
		return "", usagef("--listen %q: want HOST:PORT, :PORT (every interface) or PORT (127.0.0.1:PORT)", listen)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 || strings.Trim(port, "0123456789") != "" {
		return "", usagef("--listen %q: port %q: want a number from 0 to 65535", listen, port)
	}
	return addr, nil
}

// offLoopback reports whether a listener on addr (HOST:PORT, as listenAddr
// returns it) may be reached from beyond this machine, which then needs
// --auth-token-file or --allow-no-auth (P12). It is decided from the text
// alone, without DNS and before anything is opened: every interface (":PORT",
// 0.0.0.0, ::), any host name but localhost, and any address outside
// 127.0.0.0/8 and ::1 (a zone or an IPv4-mapped form judged as its address)
// count as off loopback. An addr it cannot read counts as off loopback too.
// Every listener of fence serve's API (--listen, and any later one such as
// --resp) is judged by it.
func offLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return true // a host name: whatever it resolves to, now or later
	}
	return !ip.Unmap().IsLoopback()
}

// refuseOpenListener returns the usage error of a listener flag (say
// "--listen") whose address addr is off loopback (offLoopback) while the server
// has no auth tokens and no --allow-no-auth, else nil. The error names both
// ways out.
func refuseOpenListener(flag, addr string, tokens, allowNoAuth bool) error {
	if tokens || allowNoAuth || !offLoopback(addr) {
		return nil
	}
	return usagef("%s %s is reachable beyond loopback, and without auth tokens anyone who connects could take and revoke locks and read every value: give --auth-token-file FILE, or --allow-no-auth if the network is private", flag, addr)
}
