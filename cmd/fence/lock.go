package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
)

func init() { addCommand(newLockCmd()) }

func newLockCmd() *cobra.Command {
	var ttl, wait, grace time.Duration
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "lock NAME [--ttl 30s] [--wait DURATION] [--grace 10s] -- CMD [ARGS...]",
		Short: "Run a command holding a lock, renewing it while the command runs",
		Long: `lock acquires NAME on the fence server ($FENCE_SERVER), runs CMD with the lease in its
environment, renews the lease at a third of --ttl while CMD runs, and releases it
when CMD exits. CMD gets:

  FENCE_LOCK    the lock name
  FENCE_TOKEN   the fencing token: send it with every write to the protected resource
  FENCE_LEASE   the lease id
  FENCE_SERVER  the server URL

so that 'fence kv put KEY VALUE' inside CMD is fenced without flags.

If the lease is lost while CMD runs (renewals failed until it expired, or the server
said it is gone), CMD's process group gets SIGTERM, then SIGKILL after --grace.
SIGINT, SIGTERM and SIGHUP sent to 'fence lock' are passed on to CMD's process group.
CMD runs in a process group of its own, so it cannot read from the terminal.

Exit status: CMD's status (128+N if it was killed by signal N); 75 if the lock was
not acquired within --wait; 76 if the lease was lost while CMD ran (whatever CMD's
status); 127 if CMD could not be started; 130 if interrupted while waiting for the
lock; 1 for other errors, 2 for usage errors.
With -o json a summary {"name","token","exit_code","lease_lost"} goes to stderr.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != -1 && dash != 1 {
				return usagef("usage: fence lock NAME [flags] -- CMD [ARGS...]")
			}
			name, argv := args[0], args[1:]
			if err := checkName("lock name", name); err != nil {
				return err
			}
			if err := checkTTL(ttl); err != nil {
				return err
			}
			if wait < 0 || grace < 0 {
				return usagef("--wait and --grace must not be negative")
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			lease, err := c.Acquire(ctx, name, ttl, fence.WithWait(wait), fence.WithAutoRenew())
			if err != nil {
				err = notAcquired(ctx, name, wait, err)
				stop()
				return err
			}
			stop()
			r := &lockRun{name: name, lease: lease, grace: grace, env: []string{envServer + "=" + flags.serverURL()}}
			if flags.caCert != "" {
				r.env = append(r.env, envCACert+"="+flags.caCert)
			}
			code, err := r.run(argv)
			if output == "json" {
				_ = printJSON(os.Stderr, map[string]any{"name": name, "token": lease.Token(), "exit_code": code, "lease_lost": r.lost})
			}
			if code == exitOK && err == nil {
				return nil
			}
			return &exitCodeError{code: code, err: err}
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "lease TTL; the lease is renewed at a third of it")
	cmd.Flags().DurationVar(&wait, "wait", 0, "how long to wait for a held lock (0: try once)")
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM on lease loss, how long before SIGKILL")
	return cmd
}

// lockRun runs one child under a held lease.
type lockRun struct {
	name  string
	lease *fence.Lease
	grace time.Duration
	env   []string // FENCE_SERVER and what else the child needs to reach the server
	lost  bool
}

// run starts argv, supervises it and releases the lease. It returns the exit status
// and, when it should be printed, an error.
func (r *lockRun) run(argv []string) (int, error) {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(os.Environ(),
		envLock+"="+r.name,
		envToken+"="+r.lease.Token().String(),
		envLease+"="+r.lease.ID(),
	)
	child.Env = append(child.Env, r.env...)
	// A group of its own, so that a lost lease stops the whole job (a shell and its
	// children), and terminal signals reach it once, through us.
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	if err := child.Start(); err != nil {
		r.release()
		return 127, fmt.Errorf("lock %q: starting %s: %w", r.name, argv[0], err)
	}
	pgid := child.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	var killTimer <-chan time.Time
	leaseDone := r.lease.Done()
	var waitErr error
loop:
	for {
		select {
		case waitErr = <-exited:
			break loop
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-leaseDone:
			leaseDone = nil
			r.lost = true
			fmt.Fprintf(os.Stderr, "fence: lock %q: lease lost (%v); sending SIGTERM to %s, SIGKILL in %v\n", r.name, r.lease.Err(), argv[0], r.grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			killTimer = time.After(r.grace)
		case <-killTimer:
			killTimer = nil
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	// The job may have left children in its group; the lock is about to go.
	if r.lost {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	// A lease that ended before we saw the exit was lost while the command ran.
	select {
	case <-r.lease.Done():
		r.lost = true
	default:
	}
	code := exitStatus(child.ProcessState)
	if code == exitError && waitErr != nil && child.ProcessState == nil {
		fmt.Fprintf(os.Stderr, "fence: lock %q: waiting for %s: %v\n", r.name, argv[0], waitErr)
	}
	if r.lost {
		return exitLeaseLost, fmt.Errorf("lock %q: lease lost while %s ran (%v); it exited with status %d", r.name, argv[0], r.lease.Err(), code)
	}
	if err := r.release(); err != nil {
		fmt.Fprintf(os.Stderr, "fence: lock %q: release: %v (the lock frees itself when its TTL runs out)\n", r.name, err)
	}
	return code, nil
}

func (r *lockRun) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.lease.Release(ctx)
	if errors.Is(err, fence.ErrNotHeld) {
		return nil // gone already: nothing to free
	}
	return err
}

// exitStatus is the shell's view of a finished child: its exit code, or 128+N when
// signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return exitError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	return exitError
}
