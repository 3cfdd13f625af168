// Command fence-bench measures fence and the locks users pick instead (bsm/redislock,
// redsync, etcd's concurrency.Mutex), side by side in one run:
//
//	go run ./cmd/fence-bench [-o json] [--clients 16] [--duration 1s] [--rounds 5] [--rows fence-redis,redislock,...] [--fence PATH]
//
// It is a command of its own, apart from the fence binary, so that the product links
// no other lock library and none of the benchmark's load machinery (as etcd's
// tools/benchmark stands apart from the etcd server). It holds wiring only; the
// measurements live in internal/bench.
//
// Exit statuses: 0 a table was printed, 1 a run failed, 2 a usage error, 128+N a
// signal N stopped the run (no table). Errors are one line on stderr,
// "fence-bench: MESSAGE".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/bench"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const help = `usage: go run ./cmd/fence-bench [-o json] [--clients 16] [--duration 1s] [--rounds 5] [--rows fence-redis,redislock,...] [--fence PATH]

fence-bench starts its own throwaway servers (a redis-server on a free port of
127.0.0.1, a single-member embedded etcd, fence serve's HTTP handler in this
process over an embedded bolt store, and a bolt store in process) and measures,
for fence and its peers in one run:

  pair      the median latency of an uncontended acquire+release on one client
  handoff   the median time from the holder's release call until a waiter, already
            waiting on a client of its own, holds the lock
  pairs/s   acquire+release pairs per second of --clients clients, each on a name
            of its own, all at once

Each round measures every row, the rows in a fresh shuffled order for each
measurement, each measurement taking --duration; the table shows the medians over
--rounds rounds (-o json adds each round's figure). Rows: redislock (bsm/redislock,
waiting with LinearBackoff 10 ms), redislock-aof (the same on a second
redis-server with appendonly yes and appendfsync always, which like fence serve's
embedded store has every write on disk before it answers: the peer of the
durable rows), redsync (v4 defaults), etcd-mutex (etcd's concurrency.Mutex),
fence-redis, fence-etcd, fence-serve (over HTTP with the Go client fencehttp),
fence-bolt.

Cluster mode and its peers are measured only when named (--rows cluster-rows, or
some of them), each server a process of its own: etcd3-mutex (etcd's
concurrency.Mutex on a three-member etcd on 127.0.0.1, its members this program
re-executed), fence-serve-etcd3 (a fence serve --store etcd:// process on that
etcd, over HTTP), cluster (three fence serve --node processes, each client given
all three, a follower first and the leader last, so its writes are forwarded to
the leader), cluster-leader (the same nodes, each client's list starting at the
leader). They run the fence binary (--fence, or built with go build) and add a
fourth figure, the handoff after an expiry: a holder with a 1s TTL stops without
releasing, and the time from its acquire call until a waiter already waiting holds
the lock is measured (one sample, over a second, per round).

A progress line goes to stderr, rewritten in place on a terminal.
SIGINT or SIGTERM stops the run (exit 128+N, no table) and its servers.

Only the servers of the chosen rows are started; the Redis rows need redis-server
installed (apt-get install redis-server).

Flags:
`

// usageError marks an error in the command line itself (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// signalError is a run that a signal stopped: exit 128+N.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string {
	return fmt.Sprintf("interrupted (%s) while measuring (no table)", unix.SignalName(e.sig))
}

func main() {
	bench.MemberMain() // an etcd member of the cluster rows: serves until killed, never returns
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit status, printing an error as
// one line on stderr: "fence-bench: MESSAGE".
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := runBench(ctx, args, stdout, stderr)
	var ue usageError
	var se signalError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &se):
		fmt.Fprintln(stderr, "fence-bench:", oneLine(err))
		return 128 + int(se.sig)
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "fence-bench:", oneLine(err))
		return exitUsage
	}
	fmt.Fprintln(stderr, "fence-bench:", oneLine(err))
	return exitError
}

// runBench parses args, runs the benchmark and writes its table (or JSON report) to
// stdout.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg    bench.Config
		rows   string
		output string
	)
	fs := flag.NewFlagSet("fence-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, by run
	fs.StringVar(&output, "o", "text", "output format: text or json")
	fs.StringVar(&output, "output", "text", "output format: text or json")
	fs.IntVar(&cfg.Clients, "clients", 16, "clients of the pairs/s measurement, each on a lock name of its own")
	fs.BoolVar(&cfg.Shared, "shared-client", false, "the pairs/s clients share one client (connection pool, Locker), as goroutines of one process do; default one each, as processes")
	fs.DurationVar(&cfg.Duration, "duration", time.Second, "time of each measurement of each row in each round")
	fs.IntVar(&cfg.Rounds, "rounds", 5, "rounds; the table shows the medians over them")
	fs.StringVar(&rows, "rows", "all", "rows to measure, comma-separated: "+strings.Join(append(slices.Clone(bench.Rows), bench.ClusterRows...), ", ")+" (or all: the first "+strconv.Itoa(len(bench.Rows))+"; cluster-rows: the last "+strconv.Itoa(len(bench.ClusterRows))+")")
	fs.StringVar(&cfg.Fence, "fence", "", "the fence binary, for the rows that run fence serve processes ("+bench.RowFenceServeEtcd3+", "+bench.RowCluster+", "+bench.RowClusterLeader+"); default: built with go build from the module in the current directory")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return err
		}
		return usageError{err}
	}
	switch {
	case fs.NArg() > 0:
		return usagef("unexpected argument %q", fs.Arg(0))
	case output != "text" && output != "json":
		return usagef("-o must be text or json, got %q", output)
	case cfg.Clients < 1:
		return usagef("--clients must be at least 1, got %d", cfg.Clients)
	case cfg.Duration <= 0:
		return usagef("--duration must be positive, got %v", cfg.Duration)
	case cfg.Rounds < 1:
		return usagef("--rounds must be at least 1, got %d", cfg.Rounds)
	}
	var err error
	if cfg.Rows, err = bench.ParseRows(rows); err != nil {
		return usageError{err}
	}
	if cfg.Fence == "" && bench.NeedsFence(cfg.Rows) {
		dir, err := os.MkdirTemp("", "fence-bench-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if cfg.Fence, err = buildFence(ctx, dir); err != nil {
			return err
		}
	}
	progress := newProgressLine(stderr, isTerminal(stderr))
	cfg.Progress = func(p bench.Progress) {
		progress.show(fmt.Sprintf("bench: round %d/%d, %s of %s (%d/%d)",
			p.Round, p.Rounds, p.Measure, bench.Label(p.Row), p.Step, p.Steps))
	}
	setup := bench.Setup{Clients: cfg.Clients, Shared: cfg.Shared, Duration: cfg.Duration, Rounds: cfg.Rounds,
		CPUs: runtime.NumCPU(), LoadFrom: bench.LoadAverage()}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var got syscall.Signal
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			got, _ = s.(syscall.Signal)
			cancel()
		case <-ctx.Done():
		}
	}()
	results, err := bench.Run(ctx, cfg)
	progress.end()
	cancel()
	<-watched
	if got != 0 {
		return signalError{got}
	}
	if errors.Is(err, fence.ErrInvalid) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	setup.LoadTo = bench.LoadAverage()
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(bench.NewReport(results, setup))
	}
	return bench.FormatTable(stdout, results, setup)
}

// buildFence builds the fence binary of the module in the current directory into
// dir with the go command and returns its path, or an error naming --fence.
func buildFence(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "fence")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/fencelock/fence/cmd/fence").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the fence binary for the fence serve rows: %v: %s (run in the fence module, or pass --fence PATH)",
			err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// oneLine returns err's message on one line (drivers put newlines and tabs in
// theirs), without the root package's "fence: " prefix said again.
func oneLine(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	for strings.HasPrefix(msg, "fence: ") {
		msg = strings.TrimPrefix(msg, "fence: ")
	}
	return strings.ReplaceAll(msg, ": fence: ", ": ")
}

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressLine writes progress to w: one line rewritten in place on a terminal, a
// line each time otherwise.
type progressLine struct {
	w       io.Writer
	inPlace bool
	width   int // of the last line shown in place
}

func newProgressLine(w io.Writer, inPlace bool) *progressLine {
	return &progressLine{w: w, inPlace: inPlace}
}

// show writes s as the progress line.
func (p *progressLine) show(s string) {
	if !p.inPlace {
		fmt.Fprintln(p.w, s)
		return
	}
	pad := max(p.width-len(s), 0)
	fmt.Fprintf(p.w, "\r%s%*s", s, pad, "")
	p.width = len(s)
}

// end clears the line shown in place, if any.
func (p *progressLine) end() {
	if p.inPlace && p.width > 0 {
		fmt.Fprintf(p.w, "\r%*s\r", p.width, "")
		p.width = 0
	}
}
