package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// lockUse is the synopsis of `fence lock`, also shown by its usage errors.
const lockUse = "lock NAME [--ttl 30s] [--wait DURATION] [--owner S] [-n N | --shared] [-- CMD [ARGS...]]"

func newLockCmd() *cobra.Command {
	var ttl, wait, grace time.Duration
	var owner string
	var quiet bool
	var flags *clientFlags
	var kind *kindFlags
	cmd := &cobra.Command{
		Use:   lockUse,
		Short: "Run a command holding a lock (or hold it until interrupted), renewing it",
		Long: `lock acquires NAME on the fence server ($FENCE_SERVER), waiting for as long as it
is held (as flock, consul lock and etcdctl lock do), runs CMD with the lease in its
environment, renews the lease at a third of --ttl while CMD runs, and releases it
when CMD exits. --wait D gives up after D (exit 75); --wait 0 tries once. CMD gets:

  FENCE_LOCK    the lock name
  FENCE_TOKEN   the fencing token: send it with every write to the protected resource
  FENCE_LEASE   the lease id
  FENCE_SERVER  the server URL (or the list of them)

so that 'fence kv put KEY VALUE' inside CMD is fenced without flags (and
FENCE_CA_CERT and FENCE_AUTH_TOKEN when --ca-cert or --auth-token-file gave them).

-n N makes NAME a counting semaphore of N permits (as consul lock -n): up to N
commands hold it at once, and lock waits while N do. Each permit has a slot in
[0, N), no two live permits the same, which CMD gets as FENCE_SLOT: fence a
resource per slot (partition $FENCE_SLOT) with the token, and a paused holder of
slot 3 is refused once the next holder of slot 3 writes. Every holder of NAME must
use the same N: another N while permits are live is an error (exit 1).

--shared takes a shared lease (as flock -s): any number of 'fence lock --shared'
hold NAME at once, and a 'fence lock' without it waits until they have all
released it; while it waits, new shared ones wait too, so readers cannot starve
a writer. -n and --shared cannot be combined (exit 2).

The lease names its holder for 'fence status': --owner, by default "HOST:PID
COMMAND" (this host, the pid of 'fence lock', and CMD as given, cut to 256 bytes;
without CMD, "HOST:PID"); --owner "" names none.

A server that cannot be reached when lock starts is an error at once (exit 1), not
a silent wait; once waiting, a server that restarts is retried until the wait ends.
While it waits for a held lock, lock says so on stderr when stderr is a terminal,
once, and again when another holder has it ("waiting for NAME: held by OWNER,
expires in 3s"); --quiet silences it.

--ttl is at least 100ms: the lease is renewed at a third of it, and a shorter one
would run out before a renewal could reach the server.

--server (or FENCE_SERVER) may list the servers of a cluster, comma-separated:
the acquire, every renewal and the release go to the server that last answered,
and move on to the next when one cannot be reached, does not answer within a
third of --ttl (at most 5s), or answers 503 (a node cut off from the majority).
CMD keeps running while any of them answers; the acquire carries a request id,
so a retry on another node gets the same lease, never a second one.

Without CMD, lock prints the lease (as 'fence acquire' does) and holds it, renewing
it, until SIGINT, SIGTERM or SIGHUP; then it releases it and exits 0.

If the lease is lost while CMD runs (renewals failed until it expired, or the server
said it is gone), CMD's process group gets SIGTERM, then SIGKILL after --grace.
SIGINT, SIGTERM and SIGHUP sent to 'fence lock' are passed on to CMD's process group.
CMD runs in a process group of its own, so it cannot read from the terminal.

Exit status: CMD's status (128+N if it was killed by signal N); 75 if the lock was
not acquired within --wait; 76 if the lease was lost while CMD ran (whatever CMD's
status) or while held without CMD; 127 if CMD could not be started; 128+N if
signal N ended the wait for the lock (130 for SIGINT, 143 for SIGTERM, 129 for
SIGHUP); without CMD, 0 after the release on a signal; 1 for other errors (an
unreachable server), 2 for usage errors.
With -o json a summary {"name","token","exit_code","lease_lost"} goes to stderr.`,
		Args: nameThenCommand("lock", false),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			if err := checkLockAndTTL(name, ttl); err != nil {
				return err
			}
			if err := checkRenewedTTL(ttl); err != nil {
				return err
			}
			flags.renewTTL = ttl
			if wait < 0 || grace < 0 {
				return usagef("--wait and --grace must not be negative")
			}
			if !cmd.Flags().Changed("wait") {
				wait = fence.WaitForever
			}
			if !cmd.Flags().Changed("owner") {
				owner = defaultOwner(argv)
			}
			opts, err := kind.options()
			if err != nil {
				return err
			}
			lease, w, err := acquireForCommand(cmd, flags, name, ttl, wait, owner, quiet, append(opts, fence.WithAutoRenew())...)
			if err != nil {
				return err
			}
			defer w.stop()
			r := &lockRun{name: name, kind: "lock", held: "lease", lease: lease, shown: kind.shown(lease), grace: grace,
				env: append(flags.childEnv(), kind.childEnv(lease)...), sigs: w.sigs}
			var code int
			if len(argv) == 0 {
				code, err = r.hold(cmd.OutOrStdout())
			} else {
				code, err = r.run(argv)
			}
			if output == "json" {
				summary := map[string]any{"name": name, "token": lease.Token(), "exit_code": code, "lease_lost": r.lost}
				if kind.permit() {
					summary["slot"] = lease.Slot()
				}
				_ = printJSON(os.Stderr, summary)
			}
			return statusError(code, err)
		},
	}
	flags = addClientFlags(cmd)
	kind = addKindFlags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, fmt.Sprintf("lease TTL, at least %v; the lease is renewed at a third of it", minRenewedTTL))
	cmd.Flags().DurationVar(&wait, "wait", 0, "give up when the lock is still held after this long (default: wait until acquired; 0: try once)")
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM on lease loss, how long before SIGKILL")
	cmd.Flags().StringVar(&owner, "owner", "", `who holds the lease, shown by 'fence status' (default "HOST:PID COMMAND")`)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not say on stderr who holds the lock while waiting for it (said only when stderr is a terminal)")
	return cmd
}

// minRenewedTTL is the shortest --ttl of `fence lock` and `fence elect`, which
// renew their lease at a third of it: a renewal is a round trip to the server
// (and through it to its store), which a shorter TTL would not leave time for,
// so the lease would be lost at once.
const minRenewedTTL = 100 * time.Millisecond

// checkRenewedTTL returns a usage error if --ttl is below minRenewedTTL.
func checkRenewedTTL(ttl time.Duration) error {
	if ttl < minRenewedTTL {
		return usagef("--ttl %v: too short to renew the lease in time; want at least %v", ttl, minRenewedTTL)
	}
	return nil
}

// nameThenCommand checks the arguments of `fence lock` and `fence elect`: a NAME
// (of what: "lock", "election"), then CMD [ARGS...] after --, which only
// `fence elect` requires.
func nameThenCommand(what string, needCmd bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		dash := cmd.ArgsLenAtDash()
		article := "a"
		if strings.ContainsRune("aeiou", rune(what[0])) {
			article = "an"
		}
		switch {
		case len(args) == 0:
			return argsError(cmd, "missing %s %s NAME", article, what)
		case dash == 0:
			return argsError(cmd, "missing the %s NAME before --", what)
		case dash == -1 && len(args) > 1:
			return argsError(cmd, "unexpected argument %q: put the command after --", args[1])
		case dash > 1:
			return argsError(cmd, "unexpected argument %q before --", args[1])
		case len(args) == 1 && (dash == 1 || needCmd):
			return argsError(cmd, "missing the command after --")
		}
		return nil
	}
}

// defaultOwner is the owner of a `fence lock` without --owner: "HOST:PID COMMAND",
// this host, this process's pid and argv joined by spaces (just "HOST:PID"
// without a command), made a valid owner: characters an owner cannot hold
// (newlines, tabs, invalid UTF-8) become spaces, and a longer one is cut at a
// character boundary to end in "..." within fence.MaxOwnerLen bytes.
func defaultOwner(argv []string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	owner := fmt.Sprintf("%s:%d", host, os.Getpid())
	if len(argv) > 0 {
		owner += " " + strings.Join(argv, " ")
	}
	owner = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(owner, " "))
	if len(owner) <= fence.MaxOwnerLen {
		return owner
	}
	const more = "..."
	cut := fence.MaxOwnerLen - len(more)
	for cut > 0 && !utf8.RuneStart(owner[cut]) {
		cut--
	}
	return owner[:cut] + more
}

// lockRun runs one child, or holds the lock without one, under a held lease: for
// `fence lock`, and for `fence elect` one term's lease.
type lockRun struct {
	name      string
	kind      string // what the messages call name: "lock" or "election"
	held      string // ... and the lease: "lease" or "term"
	lease     *fence.Lease
	shown     fencehttp.Lease // the lease as hold prints it
	grace     time.Duration
	env       []string       // FENCE_SERVER and what else the child needs to reach the server
	sigs      chan os.Signal // SIGINT, SIGTERM and SIGHUP sent to us
	lost      bool
	signalled bool // a signal was passed on to the child
}

// subject is how messages name the lock: `lock "job1"`, `election "leader"`.
func (r *lockRun) subject() string { return fmt.Sprintf("%s %q", r.kind, r.name) }

// releaseFailed is the error of a release that did not get through.
func (r *lockRun) releaseFailed(err error) error {
	return fmt.Errorf("%s (the lock frees itself when its TTL runs out)", about(r.subject(), r.name, err))
}

// hold prints the lease and holds it until a signal (then releases it: exit 0) or
// until it is lost (exit 76).
func (r *lockRun) hold(out io.Writer) (int, error) {
	if err := printLease(out, r.shown); err != nil {
		_ = r.release()
		return exitError, err
	}
	select {
	case <-r.sigs:
		if err := r.release(); err != nil {
			return exitError, r.releaseFailed(err)
		}
		return exitOK, nil
	case <-r.lease.Done():
		r.lost = true
		return exitLeaseLost, fmt.Errorf("%s: %s lost (%s)", r.subject(), r.held, lossReason(r.lease.Err()))
	}
}

// about is err's message, after subject (`lock "job1"`) unless it names name
// already (the server's answers name it; a transport failure names the server
// instead).
func about(subject, name string, err error) string {
	msg := oneLine(err)
	if strings.Contains(msg, fmt.Sprintf("%q", name)) {
		return msg
	}
	return subject + ": " + msg
}

// lossReason says why a lease ended without naming the lock, which the caller's
// message names already.
func lossReason(err error) string {
	switch {
	case errors.Is(err, fence.ErrExpired):
		return "it expired before a renewal got through"
	case errors.Is(err, fence.ErrNotHeld):
		return "the server refused to renew it: not held any more"
	case err == nil:
		return "unknown cause"
	}
	return oneLine(err)
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

	if err := child.Start(); err != nil {
		_ = r.release()
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err // without the name, which our message gives
		}
		return 127, fmt.Errorf("%s: cannot start %s: %w", r.subject(), argv[0], err)
	}
	pgid := child.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	var killTimer <-chan time.Time
	leaseDone := r.lease.Done()
	var waitErr error
	told := false // the loss was reported when it happened
loop:
	for {
		select {
		case waitErr = <-exited:
			break loop
		case s := <-r.sigs:
			r.signalled = true
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-leaseDone:
			leaseDone = nil
			r.lost, told = true, true
			fmt.Fprintf(os.Stderr, "fence: %s: %s lost (%s); sending SIGTERM to %s, SIGKILL in %v\n", r.subject(), r.held, lossReason(r.lease.Err()), argv[0], r.grace)
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
		fmt.Fprintf(os.Stderr, "fence: %s: waiting for %s: %v\n", r.subject(), argv[0], waitErr)
	}
	if r.lost {
		if told {
			return exitLeaseLost, fmt.Errorf("%s: %s exited with status %d after the %s was lost", r.subject(), argv[0], code, r.held)
		}
		return exitLeaseLost, fmt.Errorf("%s: %s lost while %s ran (%s); it exited with status %d", r.subject(), r.held, argv[0], lossReason(r.lease.Err()), code)
	}
	if err := r.release(); err != nil {
		fmt.Fprintf(os.Stderr, "fence: %s\n", r.releaseFailed(err))
	}
	return code, nil
}

func (r *lockRun) release() error { return releaseLease(r.lease) }

// statusError is what a command's RunE returns to exit with code, printing err
// (if not nil) as the one error line: nil for a silent success.
func statusError(code int, err error) error {
	if code == exitOK && err == nil {
		return nil
	}
	return &exitCodeError{code: code, err: err}
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
