package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/bench"
)

func newBenchCmd() *cobra.Command {
	var (
		cfg  bench.Config
		rows string
	)
	cmd := &cobra.Command{
		Use:   "bench [--clients 16] [--duration 1s] [--rounds 5] [--rows fence-redis,redislock,...]",
		Short: "Measure fence and the locks users pick instead, side by side in one run",
		Long: `bench starts its own throwaway servers (a redis-server on a free port of 127.0.0.1,
a single-member embedded etcd, fence serve's HTTP handler in this process over an
embedded bolt store, and a bolt store in process) and measures, for fence and its
peers in one run:

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
fence-bolt. A progress line goes to stderr, rewritten in place
on a terminal. SIGINT or SIGTERM stops the run (exit 128+N, no table) and its
servers.

Only the servers of the chosen rows are started; the Redis rows need redis-server
installed (apt-get install redis-server).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.Clients < 1 {
				return usagef("--clients must be at least 1, got %d", cfg.Clients)
			}
			if cfg.Duration <= 0 {
				return usagef("--duration must be positive, got %v", cfg.Duration)
			}
			if cfg.Rounds < 1 {
				return usagef("--rounds must be at least 1, got %d", cfg.Rounds)
			}
			var err error
			if cfg.Rows, err = bench.ParseRows(rows); err != nil {
				return usageError{err}
			}
			stderr := cmd.ErrOrStderr()
			progress := newProgressLine(stderr, isTerminal(stderr))
			cfg.Progress = func(p bench.Progress) {
				progress.show(fmt.Sprintf("bench: round %d/%d, %s of %s (%d/%d)",
					p.Round, p.Rounds, p.Measure, bench.Label(p.Row), p.Step, p.Steps))
			}
			setup := bench.Setup{Clients: cfg.Clients, Shared: cfg.Shared, Duration: cfg.Duration, Rounds: cfg.Rounds,
				CPUs: runtime.NumCPU(), LoadFrom: bench.LoadAverage()}
			w := watchSignals(cmd.Context())
			defer w.stop()
			results, err := bench.Run(w.ctx, cfg)
			progress.end()
			if sig := w.end(); sig != 0 {
				return interrupted("bench", "measuring (no table)", sig)
			}
			if errors.Is(err, fence.ErrInvalid) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			setup.LoadTo = bench.LoadAverage()
			out := cmd.OutOrStdout()
			if output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(bench.NewReport(results, setup))
			}
			return bench.FormatTable(out, results, setup)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Clients, "clients", 16, "clients of the pairs/s measurement, each on a lock name of its own")
	f.BoolVar(&cfg.Shared, "shared-client", false, "the pairs/s clients share one client (connection pool, Locker), as goroutines of one process do; default one each, as processes")
	f.DurationVar(&cfg.Duration, "duration", time.Second, "time of each measurement of each row in each round")
	f.IntVar(&cfg.Rounds, "rounds", 5, "rounds; the table shows the medians over them")
	f.StringVar(&rows, "rows", "all", "rows to measure, comma-separated: redislock, redislock-aof, redsync, etcd-mutex, fence-redis, fence-etcd, fence-serve, fence-bolt (or all)")
	return cmd
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
