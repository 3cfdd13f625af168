package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
)

func newAcquireCmd() *cobra.Command {
	var ttl, wait time.Duration
	var owner string
	var flags *clientFlags
	var kind *kindFlags
	cmd := &cobra.Command{
		Use:   "acquire NAME [--ttl 30s] [--wait DURATION] [--owner S] [-n N | --shared]",
		Short: "Acquire a lock on the server and print the lease (name, token, lease, ttl)",
		Long: `acquire takes the lock NAME on the fence server ($FENCE_SERVER) and prints the lease:
its name, fencing token, lease id and TTL (-o json: {"name","token","lease","ttl_ms"}).
The lease is not renewed: renew it with 'fence renew' before the TTL runs out, and
release it with 'fence release'. To run a command under a lock, use 'fence lock'.

By default it tries once. With --wait it waits up to that long for a held lock (a
long poll, woken by the release). --owner names the holder for 'fence status'
(none by default).

-n N takes one of N permits of the semaphore NAME and prints its slot too
(-o json: "slot"); --shared takes a shared lease (see 'fence lock --help'). They
cannot be combined.

Exit status: 0 with the lease printed; 75 when the lock stayed held; 130 or 143 when
SIGINT or SIGTERM ended the wait; 1 for other errors (an unreachable server); 2 for
usage errors.`,
		Args: exactArgs("a lock NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkLockAndTTL(name, ttl); err != nil {
				return err
			}
			if wait < 0 {
				return usagef("--wait %v: must not be negative", wait)
			}
			opts, err := kind.options()
			if err != nil {
				return err
			}
			lease, w, err := acquireForCommand(cmd, flags, name, ttl, wait, owner, true, opts...)
			if err != nil {
				return err
			}
			defer w.stop()
			return printLease(cmd.OutOrStdout(), kind.shown(lease))
		},
	}
	flags = addClientFlags(cmd)
	kind = addKindFlags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "lease TTL")
	cmd.Flags().DurationVar(&wait, "wait", 0, "how long to wait for a held lock (default 0: try once)")
	cmd.Flags().StringVar(&owner, "owner", "", "who holds the lease, shown by 'fence status' (at most 256 bytes of printable UTF-8)")
	return cmd
}

// checkOwner returns a usage error if --owner is not an owner the server takes.
func checkOwner(owner string) error { return invalidUsage("--owner", fence.ValidateOwner(owner)) }

// acquireLease acquires name, waiting up to wait (fence.WaitForever: until ctx is
// done). It tries once first, so that a server that cannot be reached is reported
// at once: a waiting client retries an unavailable server (to ride out a restart),
// which would hide a wrong address behind a silent wait. A server that answers
// 503 (a cluster electing its leader) is there, so the wait goes on through it.
// Both calls carry one request id: a grant whose answer the first lost is the
// second's, never a second grant. While it waits, notice (if not nil) says who
// holds name.
func acquireLease(ctx context.Context, c *fencehttp.Client, name string, ttl, wait time.Duration, notice *waitNotice, opts ...fence.AcquireOption) (*fence.Lease, error) {
	start := time.Now()
	opts = withOneRequestID(opts)
	lease, err := c.Acquire(ctx, name, ttl, append(opts, fence.WithWait(0))...)
	held := errors.Is(err, fence.ErrNotAcquired) && !errors.Is(err, fence.ErrUnavailable)
	if err == nil || wait == 0 || ctx.Err() != nil || !held && !answeredUnavailable(err) {
		return lease, err
	}
	if wait != fence.WaitForever {
		if wait -= time.Since(start); wait <= 0 {
			return nil, err
		}
	}
	defer notice.start(ctx)()
	return c.Acquire(ctx, name, ttl, append(opts, fence.WithWait(wait))...)
}

// withOneRequestID returns opts with a request id (fence.WithRequestID) for
// every call of one acquire: the caller's, or a new random one.
func withOneRequestID(opts []fence.AcquireOption) []fence.AcquireOption {
	if driver.ApplyOptions(opts...).RequestID != "" {
		return opts
	}
	return append(opts, fence.WithRequestID(driver.NewLeaseID()))
}

// answeredUnavailable reports whether err is a fence server's own answer 503
// "unavailable": the server was reached, and cannot grant for now (a cluster
// electing its leader, a node cut off from the majority, a server draining).
// A waiting acquire rides it out; an answer that is not fence's (a proxy's
// 503) is reported at once, as an unreachable server is.
func answeredUnavailable(err error) bool {
	var se *fencehttp.ServerError
	return errors.As(err, &se) && se.Code == "unavailable"
}

// acquireForCommand is the acquire of `fence acquire` and `fence lock`: it checks
// --owner and acquires name for it under the signals of a new waitSignals, which
// the caller stops once done with the lease (so that no signal finds the default
// action, death with the lock held, between the wait and the release). Unless
// quiet, a wait is told on stderr when it is a terminal (see waitNotice).
func acquireForCommand(cmd *cobra.Command, flags *clientFlags, name string, ttl, wait time.Duration, owner string, quiet bool, opts ...fence.AcquireOption) (*fence.Lease, *waitSignals, error) {
	if err := checkOwner(owner); err != nil {
		return nil, nil, err
	}
	c, err := flags.client()
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, fence.WithOwner(owner))
	w := watchSignals(cmd.Context())
	lease, err := acquireWatched(w, fmt.Sprintf("lock %q", name), "waiting for it", wait, func(ctx context.Context) (*fence.Lease, error) {
		return acquireLease(ctx, c, name, ttl, wait, newWaitNotice(quiet, c, name, owner), opts...)
	})
	if err != nil {
		w.stop()
		return nil, nil, err
	}
	return lease, w, nil
}

// acquireWatched runs acquire (which waits up to wait) under w's signals, with
// the commands' errors about subject (`lock "job1"`), which is doing something
// while it waits ("waiting for it"): a signal that ended the wait is the error
// (interrupted), and a lease granted meanwhile is released; an acquire error is
// notAcquired's.
func acquireWatched(w *waitSignals, subject, doing string, wait time.Duration, acquire func(context.Context) (*fence.Lease, error)) (*fence.Lease, error) {
	lease, err := acquire(w.ctx)
	if sig := w.end(); sig != 0 {
		if lease != nil {
			_ = releaseLease(lease)
		}
		return nil, interrupted(subject, doing, sig)
	}
	if err != nil {
		return nil, notAcquired(subject, wait, err)
	}
	return lease, nil
}

// notAcquired turns an acquire error into the exit status: 75 when the lock stayed
// held, 1 otherwise. The message says each fact once: the lock (subject, `lock
// "job1"`), that it is held, for how long still, and the wait that ran out.
func notAcquired(subject string, wait time.Duration, err error) error {
	if !errors.Is(err, fence.ErrNotAcquired) || errors.Is(err, fence.ErrUnavailable) {
		return err
	}
	msg := subject + " is held"
	var held *fence.HeldError
	switch {
	case errors.As(err, &held) && held.Limit > 1:
		msg = fmt.Sprintf("all %d permits of %s are held", held.Limit, subject)
		if held.ExpiresIn > 0 {
			msg += fmt.Sprintf(" (the first expires in %v)", roundDuration(held.ExpiresIn))
		}
	case held != nil && held.ExpiresIn > 0:
		msg += fmt.Sprintf(" (expires in %v)", roundDuration(held.ExpiresIn))
	}
	if wait > 0 && wait != fence.WaitForever {
		msg += fmt.Sprintf("; not acquired within --wait %v", wait)
	}
	return &exitCodeError{code: exitNotAcquired, err: errors.New(msg)}
}

// interrupted is the error of a wait that a signal ended: 128+N, like a shell's
// status for a job killed by signal N (130 for SIGINT, 143 for SIGTERM). The
// message is `SUBJECT: interrupted (SIGINT) while DOING`.
func interrupted(subject, doing string, sig syscall.Signal) error {
	return &exitCodeError{code: 128 + int(sig), err: fmt.Errorf("%s: interrupted (%v) while %s", subject, unix.SignalName(sig), doing)}
}

// roundDuration rounds d for a message: to 100ms above a second, else to 1ms.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// releaseLease releases l, bounded in time; a lease that is gone already is fine.
func releaseLease(l *fence.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.Release(ctx)
	if errors.Is(err, fence.ErrNotHeld) {
		return nil // gone already: nothing to free
	}
	return err
}

// waitSignals watches SIGINT, SIGTERM and SIGHUP while a command waits: the first
// one cancels ctx, and end reports which it was.
type waitSignals struct {
	ctx    context.Context
	cancel context.CancelFunc
	sigs   chan os.Signal
	done   chan struct{}
	got    os.Signal
}

func watchSignals(parent context.Context) *waitSignals {
	w := &waitSignals{sigs: make(chan os.Signal, 4), done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(parent)
	signal.Notify(w.sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		defer close(w.done)
		select {
		case s := <-w.sigs:
			w.got = s
			w.cancel()
		case <-w.ctx.Done():
		}
	}()
	return w
}

// end stops watching (signals keep being caught, and queue on w.sigs for the
// caller) and returns the signal that ended the wait, or nil.
func (w *waitSignals) end() syscall.Signal {
	w.cancel()
	<-w.done
	if s, ok := w.got.(syscall.Signal); ok {
		return s
	}
	return 0
}

// stop restores the default handling of the signals.
func (w *waitSignals) stop() {
	w.end()
	signal.Stop(w.sigs)
}

// leaseFlag returns --lease, or $FENCE_LEASE (set by `fence lock` for its child).
func leaseFlag(lease string) (string, error) {
	if lease == "" {
		lease = os.Getenv(envLease)
	}
	if lease == "" {
		return "", usagef("--lease is required (or $%s)", envLease)
	}
	if err := invalidUsage("--lease", fence.ValidateLeaseID(lease)); err != nil {
		return "", err
	}
	return lease, nil
}

func newRenewCmd() *cobra.Command {
	var ttl time.Duration
	var lease string
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "renew NAME --lease ID [--ttl 30s]",
		Short: "Extend a lease to --ttl from now",
		Long: `renew extends the lease ID on lock NAME to --ttl from now. It fails (exit 1) if the
lease expired, was released, or is not the current one: the lock is then no longer
yours, and writes under its token may be refused by a guard.`,
		Args: exactArgs("a lock NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkLockAndTTL(name, ttl); err != nil {
				return err
			}
			id, err := leaseFlag(lease)
			if err != nil {
				return err
			}
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error { return c.Renew(ctx, name, id, ttl) }); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), fencehttp.Renewed{Name: name, TTLms: ttl.Milliseconds()})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "renewed %s for %v\n", name, ttl)
			return err
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "new TTL, from now")
	cmd.Flags().StringVar(&lease, "lease", "", "lease id (default $"+envLease+")")
	return cmd
}

func newReleaseCmd() *cobra.Command {
	var lease string
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "release NAME --lease ID",
		Short: "Release a lease and wake the waiters",
		Long: `release ends the lease ID on lock NAME. It fails (exit 1) if that lease is no longer
held; it never releases somebody else's lease, so retrying is safe.`,
		Args: exactArgs("a lock NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("lock name", name); err != nil {
				return err
			}
			id, err := leaseFlag(lease)
			if err != nil {
				return err
			}
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error { return c.Release(ctx, name, id) }); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), fencehttp.Released{Name: name, Released: true})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "released %s\n", name)
			return err
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().StringVar(&lease, "lease", "", "lease id (default $"+envLease+")")
	return cmd
}

func newRevokeCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "End the current lease on a lock now, whoever holds it (an operator's force-release)",
		Long: `revoke ends the current lease on lock NAME now, whoever holds it, and wakes the
waiters. It needs no lease id: it is for an operator freeing a lock whose holder is
stuck. The holder learns it at its next renewal, which fails ('fence lock' then
sends its command SIGTERM and exits 76).

Revoke is safe only where the protected resource is fenced: the next grant's token
is higher, so once the next holder writes or fences, every guard refuses the
revoked holder's writes. Until then a paused revoked holder can still write with
its token.

With auth on, revoke needs a token with the admin right (see fence serve --help on
scoped tokens).

Exit status: 0 when revoked; 1 when no lease holds NAME (it is free, or its lease
expired), when the server's store cannot revoke, and for other errors (an
unreachable server); 2 for usage errors.`,
		Args: exactArgs("a lock NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("lock name", name); err != nil {
				return err
			}
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error { return c.Revoke(ctx, name) }); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), fencehttp.Revoked{Name: name, Revoked: true})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", name)
			return err
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}

func newStatusCmd() *cobra.Command {
	var prefix string
	var limit int
	var all bool
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "status [NAME | --prefix P] [--all]",
		Short: "Show one lock, or list the held locks (--all: every name the store knows)",
		Long: `status shows whether lock NAME is held, its current token, the last token issued
for it, the time left on the lease and its holder's owner ("-" if it named none;
'fence lock' names "HOST:PID COMMAND"). Without NAME it lists the held locks (those
with a lease unexpired by the store's clock) whose names start with --prefix (every
name without it), at most --limit of them; --all lists the free names the store
knows too. Lease ids are never shown.

A semaphore ('fence lock -n N') shows HELD as K/N, K of its N permits held, and a
shared lock ('fence lock --shared') as "K shared"; a row per holder follows, with
its slot (or "shared"), token, time left and owner. -o json has them as "limit",
"shared" and "holders" [{"slot","token","owner","expires_in_ms"}].`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && prefix != "" {
				return usagef("give NAME or --prefix, not both")
			}
			if len(args) == 1 && all {
				return usagef("give NAME or --all, not both (status NAME shows the lock held or not)")
			}
			if limit < 0 {
				return usagef("--limit %d: must not be negative", limit)
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				if err := checkName("lock name", args[0]); err != nil {
					return err
				}
				info, err := c.Inspect(ctx, args[0])
				if err != nil {
					return err
				}
				if output == "json" {
					return printJSON(out, fencehttp.LockInfoOf(info))
				}
				return printInfos(out, []fence.LockInfo{info})
			}
			infos, err := c.List(ctx, fence.ListOptions{Prefix: prefix, Limit: limit, All: all})
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(out, fencehttp.LockListOf(infos))
			}
			if len(infos) == 0 && !all {
				what := "no lock is held"
				if prefix != "" {
					what = fmt.Sprintf("no lock whose name starts with %q is held", prefix)
				}
				fmt.Fprintln(cmd.ErrOrStderr(), what+"; --all lists the free names too")
			}
			return printInfos(out, infos)
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().StringVar(&prefix, "prefix", "", "list the locks whose names start with this")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many locks (0: the server's default)")
	cmd.Flags().BoolVar(&all, "all", false, "list every name the store knows, free ones too, not only the held locks")
	return cmd
}

// printInfos prints the locks as a table. A semaphore or shared lock with live
// leases has HELD "K/N" (K of N permits) or "K shared", then a row per holder:
// its slot ("slot 2") or "shared", token, time left and owner.
func printInfos(w interface{ Write([]byte) (int, error) }, infos []fence.LockInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// OWNER is last: it may hold spaces.
	fmt.Fprintln(tw, "NAME\tHELD\tTOKEN\tLAST TOKEN\tEXPIRES IN\tOWNER")
	for _, i := range infos {
		held, tok, exp, owner := fmt.Sprint(i.Held), "-", "-", "-"
		switch {
		case len(i.Holders) > 0 && i.Shared:
			held = fmt.Sprintf("%d shared", len(i.Holders))
		case len(i.Holders) > 0:
			held = fmt.Sprintf("%d/%d", len(i.Holders), i.Limit)
		case i.Held:
			tok, exp, owner = i.Token.String(), roundLeft(i.ExpiresIn), ownerText(i.Owner)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", i.Name, held, tok, i.LastToken, exp, owner)
		for _, h := range i.Holders {
			what := fmt.Sprintf("  slot %d", h.Slot)
			if i.Shared {
				what = "  shared"
			}
			fmt.Fprintf(tw, "%s\t\t%s\t\t%s\t%s\n", what, h.Token, roundLeft(h.ExpiresIn), ownerText(h.Owner))
		}
	}
	return tw.Flush()
}

// roundLeft is a lease's time left as status shows it, to what a person reads:
// whole seconds from a minute on (1m59s), tenths under a minute (3.2s),
// milliseconds under a second (40ms). It truncates, so it never shows more time
// than is left.
func roundLeft(d time.Duration) string {
	switch {
	case d >= time.Minute:
		d = d.Truncate(time.Second)
	case d >= time.Second:
		d = d.Truncate(100 * time.Millisecond)
	default:
		d = d.Truncate(time.Millisecond)
	}
	return d.String()
}

// ownerText is an owner as status shows it: "-" for none.
func ownerText(owner string) string {
	if owner == "" {
		return "-"
	}
	return owner
}
