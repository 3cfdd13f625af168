//go:build linux

package main

import "syscall"

// childProcAttr makes an instance die with the coordinator, so that no
// instance, stopped or running, outlives a killed demo.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
