//go:build linux

package main

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// cldStopped is siginfo's si_code for a child stopped by a signal (CLD_STOPPED in
// <signal.h>; x/sys/unix does not define it).
const cldStopped = 5

// childProcAttr makes an instance die with the coordinator (no orphaned, possibly
// stopped, instance is left behind if the coordinator is killed).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped blocks until the child pid has stopped (after a SIGSTOP), so that the
// pause is certain to begin before the coordinator lets anything else happen: a
// signal is delivered asynchronously, and without this the child could still read
// the provider's answer and act on it. It leaves the child's state waitable
// (WNOWAIT), so exec.Cmd.Wait still reaps it. It returns an error if the child
// exited instead.
func waitStopped(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("payments: wait for instance %d to stop: %w", pid, err)
		}
		if info.Code != cldStopped {
			return fmt.Errorf("payments: instance %d exited instead of stopping (code %d)", pid, info.Code)
		}
		return nil
	}
}
