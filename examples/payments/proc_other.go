//go:build unix && !linux

package main

import "syscall"

// childProcAttr returns nil: only Linux has a parent-death signal.
func childProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped returns at once: outside Linux the program does not wait for the
// SIGSTOP to take effect, so the stop may land a moment after the provider's
// answer is sent, and the in-flight line may escape the race.
func waitStopped(pid int) error { return nil }
