//go:build !unix

package fencehttp

import "net"

// canCheckIdle: without a way to peek at an idle connection, the Client keeps
// net/http's Transport, which reads every connection all the time.
const canCheckIdle = false

func idleAlive(net.Conn) bool { return false }

func newIdleCheck(net.Conn) func() bool { return func() bool { return false } }
