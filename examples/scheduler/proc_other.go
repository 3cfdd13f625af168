//go:build unix && !linux

package main

import "syscall"

// childProcAttr returns nil: only Linux has a parent-death signal.
func childProcAttr() *syscall.SysProcAttr { return nil }
