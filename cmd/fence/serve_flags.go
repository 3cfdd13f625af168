package main

import (
	"net"
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
