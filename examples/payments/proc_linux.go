//go:build linux

package main

import "syscall"

// childProcAttr makes an instance die with the coordinator (no orphaned, possibly
// stopped, instance is left behind if the coordinator is killed).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
