package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/chaos"
)

func newChaosCmd() *cobra.Command {
	var (
		cfg     chaos.Config
		nemeses string
		fencing string
		mx      matrixFlags
	)
	cmd := &cobra.Command{
		Use:   "chaos [--duration 30s] [--workers 4] [--nemesis pause,kill] [--fencing on|off] [--results DIR] | chaos --matrix [--stores bolt,redis,...] [--duration PER-CELL]",
		Short: "Run workers against a real fence serve under faults and check the history",
		Long: `chaos starts a fence serve process on a fresh data directory and --workers worker
processes (this binary) that loop: acquire a lock, fence a key, read it, write it +1,
release. Nemeses inject faults while they run: pause (SIGSTOP the lock holder past its
TTL, then SIGCONT), kill (kill -9 fence serve, restart it on the same data), link
(latency, resets and cuts on a TCP proxy between the workers and the server),
failover (locks from a Redis primary that fails over to a lagging replica),
member (fence serve on a 3-member etcd cluster whose leader is killed with -9 and
restarted on its data), crash (kill -9 of the database under --store postgres, or of
the ZooKeeper leader under --store zookeeper, restarted on its data after about 2
TTLs), disk (fence serve's data directory filled), partition (every process in a
network namespace of its own, needs root; fence serve cut off from the workers or the
holder from fence serve, the etcd leader cut off from the other members, the Redis
primary from its replica and the workers; healed after 3 TTLs) and clock (the clock
of fence serve on the bolt store, also across a kill and restart, or of the lock
holder, stepped forward and backward by seconds; it needs a binary built with -tags
faultclock). --store cluster runs three fence serve --node processes as one cluster
instead of a single fence serve: kill then takes down the leader or any node,
partition cuts the leader or a follower off from the other nodes, pause also stops a
node, link slows or cuts one node's proxy. With --resource postgres --postgres DSN the counter is a row of a
PostgreSQL table written through postgres.Guard instead of fence serve's KV;
--store postgres does that on its own database by default. Then every recorded
operation is checked: linearizability of the fenced key (porcupine),
no stale write accepted, no acknowledged write lost.

While the workers run it prints a progress line on stdout about once a second (one
line rewritten in place on a terminal, a line each time otherwise), then a table of
what the checker found and a legend of its columns. "overlaps" counts the times two
workers believed they held the lock at once, each by its own clock: expected under
pauses, and harmless with fencing on, because the resource rejected the stale
holder's writes.

Exit status 0 when fencing on shows no violation, or when fencing off (the control
run) shows violations; 1 otherwise; 130 or 143 when SIGINT or SIGTERM ended it (the
processes it started are stopped first). The run's folder (logs, and failing
histories as JSON lines and porcupine's HTML visualisation) is made under --results,
by default a new temporary directory; its path is printed.

With --matrix it runs every store (--stores, default all: ` + strings.Join(chaos.Stores, ", ") + `)
against every nemesis that applies to it (--nemesis, if given, picks among them), one
cell after another, each cell a fenced run of --duration with that one nemesis; and
per store one control cell (fencing off, pauses, a hold of at least 100ms) that must
find violations. A progress line marks each cell's start and end, then one table has
a row per cell: ops, acquisitions, faults injected, stale rejected, stale accepted,
lost, linearizable, verdict, and the cell's seed (--store S --nemesis N --seed X runs
that cell alone). A fenced cell passes with no violation and at least one fault of
its nemesis injected; --control-duration gives the controls more time to pause.
Exit status 0 when every fenced cell passed and every control found violations; 1
otherwise, or when a cell could not run (a server binary missing: the error names
what to install); 2 for a bad command line.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("fencing", fencing, "on", "off"); err != nil {
				return err
			}
			if err := checkChaosFlags(cfg); err != nil {
				return err
			}
			if mx.on {
				return runMatrix(cmd, cfg, mx, nemeses)
			}
			if cmd.Flags().Changed("stores") {
				return usagef("--stores goes with --matrix; one run takes --store")
			}
			cfg.Fencing = fencing == "on"
			cfg.Nemeses = splitList(nemeses)
			for _, n := range cfg.Nemeses {
				known := false
				for _, k := range chaos.Nemeses {
					known = known || k == n
				}
				if !known {
					return usagef("--nemesis %q: want a comma-separated list of %s", n, strings.Join(chaos.Nemeses, ","))
				}
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("chaos: find own binary: %w", err)
			}
			cfg.Binary = bin
			if output == "text" {
				// Progress goes with the table it leads to, on stdout: a line each
				// time for a log or a pipe, one line rewritten in place for a terminal.
				cfg.Progress = cmd.OutOrStdout()
				cfg.ProgressInPlace = isTerminal(cfg.Progress)
			}
			if cfg.Results == "" {
				if cfg.Results, err = os.MkdirTemp("", "fence-chaos-"); err != nil {
					return fmt.Errorf("chaos: results: %w", err)
				}
				// Gone again if the run made nothing in it (a bad setting).
				defer os.Remove(cfg.Results)
			}
			w := watchSignals(cmd.Context())
			defer w.stop()
			sum, err := chaos.Run(w.ctx, cfg)
			if sig := w.end(); sig != 0 {
				return interrupted("chaos", "running; results in "+cfg.Results, sig)
			}
			if errors.Is(err, fence.ErrInvalid) {
				return usageError{err} // the config came from the flags
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				if err := printJSON(out, summaryJSON(sum)); err != nil {
					return err
				}
			} else {
				chaos.FormatTable(out, []*chaos.Summary{sum})
				fmt.Fprintf(out, "run folder: %s\n", sum.Dir)
				if len(sum.Saved) > 0 {
					fmt.Fprintf(out, "history saved: %s\n", strings.Join(sum.Saved, ", "))
				}
				for i, v := range sum.Report.Violations {
					if i == 5 {
						fmt.Fprintf(out, "  ... %d more\n", len(sum.Report.Violations)-5)
						break
					}
					fmt.Fprintf(out, "  violation: %s\n", v)
				}
			}
			if !sum.Passed() {
				if !sum.Fencing {
					return &exitCodeError{exitError, fmt.Errorf("chaos: the control run (fencing off) found no violation: the checker proved nothing")}
				}
				return &exitCodeError{exitError, fmt.Errorf("chaos: %d violation(s) with fencing on", len(sum.Report.Violations))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long the workers run (e.g. 10m for a soak)")
	f.IntVar(&cfg.Workers, "workers", 4, fmt.Sprintf("worker processes, %d to %d", chaos.MinWorkers, chaos.MaxWorkers))
	f.StringVar(&nemeses, "nemesis", "pause,kill", "faults to inject, comma-separated: "+strings.Join(chaos.Nemeses, ", ")+" (or none)")
	f.StringVar(&fencing, "fencing", "on", "on, or off for the control run that must find violations")
	f.StringVar(&cfg.Results, "results", "", "directory for run folders and failing histories (default: a new temporary directory)")
	f.DurationVar(&cfg.TTL, "ttl", 400*time.Millisecond, "lease TTL of the workers")
	f.DurationVar(&cfg.Hold, "hold", 20*time.Millisecond, "time a worker holds between its read and its write")
	f.DurationVar(&cfg.Interval, "interval", 3*time.Second, "mean time between two faults of one nemesis")
	f.IntVar(&cfg.MaxFaults, "max-faults", 0, "most faults per nemesis (0: bounded by --duration only)")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the nemeses' choices (0: from the clock)")
	f.StringVar(&cfg.Store, "store", "", "what grants the locks: "+strings.Join(chaos.Stores, ", ")+" (default: what the nemeses need, else bolt)")
	f.StringVar(&cfg.Resource, "resource", "", "where the counter lives: serve (fence serve's KV) or postgres (a table written through postgres.Guard; needs --postgres, but for --store postgres); default postgres for --store postgres, else serve")
	f.StringVar(&cfg.Postgres, "postgres", "", "PostgreSQL DSN of --resource postgres (postgres://user@host:port/db); default with --store postgres: the store's database")
	f.BoolVar(&mx.on, "matrix", false, "run every store against every nemesis that applies to it, and a control per store; one table")
	f.StringVar(&mx.stores, "stores", "", "with --matrix: the stores, comma-separated (default all: "+strings.Join(chaos.Stores, ",")+")")
	f.DurationVar(&mx.control, "control-duration", 0, "with --matrix: how long each control cell runs (default --duration)")
	cmd.AddCommand(newChaosWorkerCmd(), newChaosEtcdMemberCmd())
	return cmd
}

// checkChaosFlags returns a usage error naming the first flag of cfg (one run's,
// or a matrix cell's) that no run can take.
func checkChaosFlags(cfg chaos.Config) error {
	if cfg.Duration <= 0 {
		return usagef("--duration %v: want a positive duration such as 30s", cfg.Duration)
	}
	if cfg.Workers < chaos.MinWorkers || cfg.Workers > chaos.MaxWorkers {
		return usagef("--workers %d: want %d to %d worker processes", cfg.Workers, chaos.MinWorkers, chaos.MaxWorkers)
	}
	return nil
}

// summaryJSON is the JSON object of one run's summary.
func summaryJSON(sum *chaos.Summary) map[string]any {
	r := sum.Report
	return map[string]any{
		"backend": sum.Backend, "faults": sum.Nemeses, "fencing": sum.Fencing, "injected": sum.Faults,
		"operations": r.Operations, "acquisitions": r.Acquisitions, "writes": r.Writes,
		"stale_rejected": r.StaleRejected, "stale_accepted": r.StaleAccepted, "lost": r.Lost,
		"rejected_seen": r.RejectedSeen, "overlaps": r.Overlaps, "unknown": r.Unknown,
		"linearizable": string(r.Linearizable), "violations": r.Violations,
		"passed": sum.Passed(), "dir": sum.Dir, "saved": sum.Saved,
	}
}

// oneOf returns nil if the string flag --name has one of the values options, and
// otherwise a usage error listing them: "--fencing must be on or off, got "x"".
func oneOf(name, value string, options ...string) error {
	if slices.Contains(options, value) {
		return nil
	}
	return usagef("--%s must be %s, got %q", name, strings.Join(options, " or "), value)
}

// isTerminal reports whether w is a character device, as a terminal is (so is
// /dev/null, where rewriting a line in place does no harm).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// newChaosWorkerCmd is the hidden worker mode the harness starts.
func newChaosWorkerCmd() *cobra.Command {
	var (
		wc      chaos.WorkerConfig
		fencing string
		logPath string
	)
	cmd := &cobra.Command{
		Use:    "worker --server URL --log FILE ...",
		Short:  "One chaos worker (started by fence chaos)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("fencing", fencing, "on", "off"); err != nil {
				return err
			}
			wc.Fencing = fencing == "on"
			if logPath == "" {
				return usagef("--log is required")
			}
			if err := wc.Validate(); err != nil {
				return usageError{err}
			}
			clock, err := processClock()
			if err != nil {
				return fmt.Errorf("chaos worker: %w", err)
			}
			wc.Clock = clock
			f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return fmt.Errorf("chaos worker: %w", err)
			}
			defer f.Close()
			ctx, stop := signalContext(cmd)
			defer stop()
			return chaos.RunWorker(ctx, wc, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&wc.ID, "id", 0, "worker number")
	fl.StringVar(&wc.Server, "server", "", "base URL of fence serve, or a comma-separated list of a cluster's nodes")
	fl.StringVar(&wc.Postgres, "postgres", "", "PostgreSQL DSN of the counter's table (default: the server's KV)")
	fl.StringVar(&wc.Redis, "redis", "", "host:port of the Redis granting the locks (default: the server)")
	fl.StringVar(&wc.Lock, "lock", "chaos", "lock name")
	fl.StringVar(&wc.Key, "key", "chaos/counter", "KV key of the counter")
	fl.DurationVar(&wc.TTL, "ttl", 400*time.Millisecond, "lease TTL")
	fl.DurationVar(&wc.Hold, "hold", 20*time.Millisecond, "time between read and write")
	fl.DurationVar(&wc.Wait, "wait", 2*time.Second, "how long one acquire waits")
	fl.StringVar(&fencing, "fencing", "on", "on or off")
	fl.Int64Var(&wc.Start, "start", 0, "CLOCK_MONOTONIC nanoseconds of the run's start")
	fl.StringVar(&logPath, "log", "", "file the operations are appended to, one JSON line each")
	return cmd
}

// newChaosEtcdMemberCmd is the hidden etcd member mode the harness starts for the
// member nemesis: one embedded etcd member until SIGTERM (or SIGKILL).
func newChaosEtcdMemberCmd() *cobra.Command {
	var (
		m     chaos.EtcdMemberConfig
		state string
	)
	cmd := &cobra.Command{
		Use:    "etcd-member --name m0 --dir DIR --client-url URL --peer-url URL --initial-cluster m0=URL,...",
		Short:  "One etcd member (started by fence chaos --nemesis member)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("state", state, "new", "existing"); err != nil {
				return err
			}
			m.Existing = state == "existing"
			ctx, stop := signalContext(cmd)
			defer stop()
			err := chaos.RunEtcdMember(ctx, m)
			if errors.Is(err, fence.ErrInvalid) {
				return usageError{err}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&m.Name, "name", "", "member name")
	fl.StringVar(&m.Dir, "dir", "", "data directory (kept across restarts)")
	fl.StringVar(&m.ClientURL, "client-url", "", "client URL, http://127.0.0.1:PORT")
	fl.StringVar(&m.PeerURL, "peer-url", "", "peer URL, http://127.0.0.1:PORT")
	fl.StringVar(&m.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member")
	fl.StringVar(&m.ClusterToken, "cluster-token", "fence-chaos", "initial cluster token")
	fl.StringVar(&state, "state", "new", "initial cluster state: new or existing")
	return cmd
}
