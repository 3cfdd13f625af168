package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/election"
	"github.com/fencelock/fence/fencehttp"
)

// electUse is the synopsis of `fence elect`, also shown by its usage errors.
const electUse = "elect NAME [--ttl 30s] [--owner S] [--rejoin] -- CMD [ARGS...]"

func newElectCmd() *cobra.Command {
	var ttl, grace time.Duration
	var owner string
	var rejoin, quiet bool
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   electUse,
		Short: "Run a command only while leader of an election, fenced by the term's epoch",
		Long: `elect campaigns in the election NAME on the fence server ($FENCE_SERVER): it waits
until it leads (it holds the election's lock, NAME), then runs CMD while it leads,
renewing the term at a third of --ttl. A leader that stops renewing (a crash, a
partition, a pause) is succeeded by the next candidate once --ttl has run out.
CMD gets the environment of 'fence lock':

  FENCE_LOCK    the election's name
  FENCE_TOKEN   the term's epoch, a fencing token: send it with every write the
                leader makes, so that a guard refuses a deposed leader's writes
                once a newer leader has written
  FENCE_LEASE   the term's lease id
  FENCE_SERVER  the server URL

so that 'fence kv put KEY VALUE' inside CMD is fenced without flags.

When CMD exits while elect leads, elect resigns (the next candidate leads at once,
without waiting out the TTL) and exits with CMD's status. If the term is lost
(renewals failed until it expired, or the server said it is gone: revoked, or
taken over after a pause), CMD's process group gets SIGTERM, then SIGKILL after
--grace, and elect exits 76; with --rejoin it campaigns again once CMD has exited,
and runs CMD again when it leads again, with the new term's epoch. Losing the lead
is judged by elect's own clock and is advisory (a leader can be paused past its
term): only the epoch checked at the resource makes a deposed leader harmless.

The term names its leader for 'fence leader' and 'fence status': --owner, by
default "HOST:PID COMMAND" as for 'fence lock'; --owner "" names none.

A server that cannot be reached when elect starts is an error at once (exit 1), not
a silent wait; once campaigning, a server that restarts is retried. While another
candidate leads, elect says so on stderr when stderr is a terminal, once, and again
when the leader changes ("waiting for NAME: held by OWNER, expires in 3s");
--quiet silences it. --ttl is at least 100ms, as for 'fence lock'.

SIGINT, SIGTERM and SIGHUP end a campaign (no CMD is run); while elect leads they
are passed on to CMD's process group, and elect resigns once CMD has exited. With
--rejoin, a signal passed on while a lost term's CMD is stopping ends elect (76)
instead of a new campaign. CMD runs in a process group of its own, so it cannot
read from the terminal. elect prints nothing on stdout; CMD's output is CMD's.

Exit status: CMD's status (128+N if signal N killed it) when it exited while elect
led; 76 if the term was lost while CMD ran (without --rejoin, whatever CMD's
status); 127 if CMD could not be started; 128+N if signal N ended a campaign (130
for SIGINT, 143 for SIGTERM, 129 for SIGHUP); 1 for other errors (an unreachable
server), 2 for usage errors. With -o json a summary {"name","epoch","terms",
"exit_code","term_lost"} goes to stderr: the last term's epoch, how many terms
elect led, and whether the last one was lost.`,
		Args: nameThenCommand("election", true),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			if err := checkName("election name", name); err != nil {
				return err
			}
			if err := checkTTL(ttl); err != nil {
				return err
			}
			if err := checkRenewedTTL(ttl); err != nil {
				return err
			}
			flags.renewTTL = ttl
			if grace < 0 {
				return usagef("--grace %v: must not be negative", grace)
			}
			if !cmd.Flags().Changed("owner") {
				owner = defaultOwner(argv)
			}
			if err := checkOwner(owner); err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			e, err := election.New(c, name, election.WithTTL(ttl), election.WithOwner(owner))
			if err != nil {
				return err
			}
			er := &electRun{e: e, c: c, grace: grace, env: flags.childEnv(), rejoin: rejoin, notice: newWaitNotice(quiet, c, name, owner)}
			err = er.run(cmd.Context(), argv)
			if output == "json" && len(er.epochs) > 0 {
				_ = printJSON(os.Stderr, map[string]any{"name": name, "epoch": er.epochs[len(er.epochs)-1],
					"terms": len(er.epochs), "exit_code": exitCodeOf(err), "term_lost": er.lost})
			}
			return err
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", election.DefaultTTL, fmt.Sprintf("term TTL, at least %v: how long a leader that stops renewing keeps the others waiting; renewed at a third of it", minRenewedTTL))
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM on the loss of the term, how long before SIGKILL")
	cmd.Flags().StringVar(&owner, "owner", "", `who leads, shown by 'fence leader' (default "HOST:PID COMMAND")`)
	cmd.Flags().BoolVar(&rejoin, "rejoin", false, "after losing a term, campaign again and run CMD again when leading (default: exit 76)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not say on stderr who leads while campaigning (said only when stderr is a terminal)")
	return cmd
}

// electRun is one `fence elect`: a campaign and the term it wins, then, with
// --rejoin, the next ones.
type electRun struct {
	e      *election.Election
	c      *fencehttp.Client
	grace  time.Duration
	env    []string // FENCE_SERVER and what else the child needs to reach the server
	rejoin bool
	notice *waitNotice   // says who leads while campaigning; nil: nothing
	epochs []fence.Token // of the terms led, in order
	lost   bool          // the last term was lost
}

// run campaigns and runs argv in each term, as lockRun runs it under a lease; it
// returns what RunE returns (statusError's).
func (er *electRun) run(ctx context.Context, argv []string) error {
	subject := fmt.Sprintf("election %q", er.e.Name())
	w := watchSignals(ctx)
	defer func() { w.stop() }()
	for {
		lease, err := acquireWatched(w, subject, "campaigning", fence.WaitForever, er.campaign)
		if err != nil {
			return err
		}
		er.epochs = append(er.epochs, lease.Token())
		r := &lockRun{name: er.e.Name(), kind: "election", held: "term", lease: lease, shown: fencehttp.LeaseOf(lease), grace: er.grace, env: er.env, sigs: w.sigs}
		code, err := r.run(argv)
		er.lost = r.lost
		if !r.lost || !er.rejoin {
			return statusError(code, err)
		}
		// The next campaign's signals are watched before the last term's stop
		// watching, so that none falls between them; one that came meanwhile, or
		// was passed on to the stopping CMD, ends elect.
		next := watchSignals(ctx)
		stop := r.signalled || len(w.sigs) > 0
		w.stop()
		w = next
		if stop {
			return statusError(code, err)
		}
		fmt.Fprintf(os.Stderr, "fence: %s; campaigning again\n", oneLine(err))
	}
}

// campaign waits until this candidate leads and returns its term's lease. Before
// the first campaign it reads the election's state once, so that a server that
// cannot be reached is reported at once, as by `fence lock`: a campaign rides out
// an unavailable server, which would hide a wrong address behind a silent wait.
func (er *electRun) campaign(ctx context.Context) (*fence.Lease, error) {
	if len(er.epochs) == 0 {
		if _, err := er.c.Inspect(ctx, er.e.Name()); err != nil {
			return nil, err
		}
	}
	defer er.notice.start(ctx)()
	term, err := er.e.Campaign(ctx)
	if err != nil {
		return nil, err
	}
	return term.Lease(), nil
}

// exitCodeOf is the exit status that a RunE error err gives (see run in main.go),
// for the commands' JSON summaries.
func exitCodeOf(err error) int {
	var ec *exitCodeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec):
		return ec.code
	}
	return exitError
}

func newLeaderCmd() *cobra.Command {
	var watch bool
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "leader NAME [--watch]",
		Short: "Show who leads an election (owner, epoch, time left); --watch: a line per change",
		Long: `leader shows who leads the election NAME (the one whose 'fence elect NAME' holds
the election's lock): LEADER true or false, the term's EPOCH (its fencing token),
the time left on its lease (EXPIRES IN) and its OWNER ('fence elect' names
"HOST:PID COMMAND"; "-" if it named none). With -o json it prints
{"name","leader","owner","epoch","expires_in_ms"}, every field always there: with
no leader, "leader" is false, "owner" is "" and "epoch" and "expires_in_ms" are 0.

--watch prints the leader, then a line per change of leader (a new term, or the
end of one with no successor yet) until SIGINT or SIGTERM: rows under one header,
or with -o json one JSON object a line. A renewal is not a change. A watcher that
falls behind skips terms but never shows an older leader after a newer one. While
the server cannot be reached, --watch says so once on stderr and keeps trying.

Exit status: 0 whether anybody leads or not (read LEADER, as 'fence status' is read
for a free lock: no leader is an answer, not a failure), and 0 when SIGINT or
SIGTERM ends --watch; 1 for errors (an unreachable server; with --watch, one that
cannot be reached at the start); 2 for usage errors.`,
		Args: exactArgs("an election NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("election name", name); err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			e, err := election.New(c, name)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			p := &leaderPrinter{w: cmd.OutOrStdout(), lines: watch}
			if watch {
				return watchLeader(ctx, e, p)
			}
			ld, err := e.Leader(ctx)
			if err != nil && !errors.Is(err, fence.ErrNotHeld) {
				return electionCause(err)
			}
			return p.print(ld)
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().BoolVar(&watch, "watch", false, "print the leader, then a line per change, until interrupted")
	return cmd
}

// watchLeader prints e's leader, then each change of leader, until ctx ends
// (nil: a signal ended the watch). It returns an error if the first state cannot
// be read, or if observing cannot go on (not a server that can be watched); while
// the server cannot be reached later, it says so once on stderr and goes on.
func watchLeader(ctx context.Context, e *election.Election, p *leaderPrinter) error {
	seen, told := false, false
	for ld, err := range e.Observe(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !seen || !errors.Is(err, fence.ErrUnavailable) {
				return electionCause(err)
			}
			if !told {
				fmt.Fprintf(os.Stderr, "fence: %s; still trying\n", oneLine(electionCause(err)))
				told = true
			}
			continue
		}
		seen, told = true, false
		if err := p.print(ld); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("election %q: the watch ended", e.Name())
}

// electionCause is the client's error inside err, an error of package election
// that wraps it (`election "x": leader: CAUSE`): the client's errors name the lock
// or the server already, and the CLI prints them as every other command does. An
// error of the election's own (nothing wrapped but a sentinel, as for a locker
// that cannot be watched) is returned whole, as it says what failed.
func electionCause(err error) error {
	cause := errors.Unwrap(err)
	if cause == nil || errors.Unwrap(cause) == nil && errors.Is(cause, fence.ErrNotImplemented) {
		return err
	}
	return cause
}

// leaderJSON is what `fence leader -o json` prints, every field always there.
type leaderJSON struct {
	Name        string      `json:"name"`
	Leader      bool        `json:"leader"`
	Owner       string      `json:"owner"`
	Epoch       fence.Token `json:"epoch"`
	ExpiresInMs int64       `json:"expires_in_ms"`
}

// leaderPrinter prints leaders: as text rows under one header, or as JSON (one
// indented document, or with lines one compact object a line, for --watch).
type leaderPrinter struct {
	w      io.Writer
	lines  bool
	header bool // printed already
}

// Widths of the text columns, so that the rows of --watch line up with the
// header printed once; a longer value widens its row only. OWNER is last: it may
// hold spaces.
const (
	leaderEpochWidth   = 8
	leaderExpiresWidth = 10
)

func (p *leaderPrinter) print(ld election.Leader) error {
	if output == "json" {
		v := leaderJSON{Name: ld.Name, Leader: ld.Leading(), Owner: ld.Owner, Epoch: ld.Epoch, ExpiresInMs: ld.ExpiresIn.Milliseconds()}
		if p.lines {
			return json.NewEncoder(p.w).Encode(v)
		}
		return printJSON(p.w, v)
	}
	nameWidth := max(len("NAME"), len(ld.Name))
	if !p.header {
		p.header = true
		if _, err := fmt.Fprintf(p.w, "%-*s  %-6s  %-*s  %-*s  %s\n", nameWidth, "NAME", "LEADER",
			leaderEpochWidth, "EPOCH", leaderExpiresWidth, "EXPIRES IN", "OWNER"); err != nil {
			return err
		}
	}
	epoch, exp, owner := "-", "-", "-"
	if ld.Leading() {
		epoch, exp = ld.Epoch.String(), roundLeft(ld.ExpiresIn)
		if ld.Owner != "" {
			owner = ld.Owner
		}
	}
	_, err := fmt.Fprintf(p.w, "%-*s  %-6v  %-*s  %-*s  %s\n", nameWidth, ld.Name, ld.Leading(),
		leaderEpochWidth, epoch, leaderExpiresWidth, exp, owner)
	return err
}
