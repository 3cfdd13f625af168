//go:build unix

// Command scheduler is leader election with fenced epochs, end to end: two
// scheduler instances campaign for one election on PostgreSQL, the leader
// records a job every tick through postgres.Guard with its term's epoch, and a
// leader that was paused past its term is refused when it wakes and writes.
//
//	go run ./examples/scheduler --postgres 'postgres://user@127.0.0.1:5432/scheduler'
//	go run ./examples/scheduler instance --postgres "$DSN" --name node-1
//
// Without a subcommand it runs the demo: it starts two instances (re-executing
// itself), stops the leader with SIGSTOP just before one of its writes, lets the
// other take over once the term's TTL ran out, resumes the first with SIGCONT,
// and prints the timeline: who led in which epoch, every job written, and the
// old leader's write refused with fence.ErrStaleToken. `instance` runs one
// instance until interrupted, for running several by hand.
//
// It needs a PostgreSQL database (--postgres or $SCHEDULER_POSTGRES), where it
// creates its tables; it never starts a server. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if os.Getenv(envInstance) != "" {
		os.Exit(runInstanceFromEnv())
	}
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain runs the demo, or one instance with the subcommand "instance", and
// returns the exit code: 0 on success, 2 for bad usage, 1 for a failed run.
func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "instance" {
		return instanceCmd(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := config{}
	verbose := fs.Bool("v", false, "show the instances' logs")
	fs.StringVar(&cfg.DSN, "postgres", os.Getenv("SCHEDULER_POSTGRES"), "PostgreSQL URL of the database to keep the jobs in (default $SCHEDULER_POSTGRES)")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "the election's term TTL")
	fs.DurationVar(&cfg.Every, "every", 0, "a job per tick while leading (default: a tenth of the TTL)")
	fs.IntVar(&cfg.PauseAfter, "pause-after", 3, "jobs node-1 writes before it is paused")
	fs.DurationVar(&cfg.Pause, "pause", 0, "shortest pause of node-1, at least the TTL (default: the TTL); it is resumed only once node-2 has written")
	fs.IntVar(&cfg.After, "after", 2, "jobs node-2 writes after node-1's refused write before the demo stops")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "scheduler: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.Every == 0 {
		cfg.Every = cfg.TTL / 10
	}
	if cfg.Pause == 0 {
		cfg.Pause = cfg.TTL
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return 2
	}
	if *verbose {
		cfg.Log = stderr
	}
	res, err := run(cfg)
	printTimeline(stdout, cfg, res)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// instanceCmd runs one instance until SIGINT or SIGTERM, printing its events
// as JSON lines.
func instanceCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scheduler instance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := instanceConfig{}
	fs.StringVar(&cfg.DSN, "postgres", os.Getenv("SCHEDULER_POSTGRES"), "PostgreSQL URL of the database to keep the jobs in (default $SCHEDULER_POSTGRES)")
	host, _ := os.Hostname()
	fs.StringVar(&cfg.Name, "name", fmt.Sprintf("%s:%d", host, os.Getpid()), "this instance's name, shown as the leader's owner")
	fs.StringVar(&cfg.Run, "run", "default", "the election and job list to join")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "the election's term TTL")
	fs.DurationVar(&cfg.Every, "every", time.Second, "a job per tick while leading")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var bad error
	switch {
	case fs.NArg() > 0:
		bad = fmt.Errorf("scheduler instance: unexpected arguments %q", fs.Args())
	case cfg.DSN == "":
		bad = errors.New("scheduler instance: no database: pass --postgres DSN (or set SCHEDULER_POSTGRES)")
	case cfg.TTL < 500*time.Millisecond || cfg.TTL > 10*time.Minute:
		bad = fmt.Errorf("scheduler instance: --ttl %v: want 500ms to 10m", cfg.TTL)
	case cfg.Every < 10*time.Millisecond:
		bad = fmt.Errorf("scheduler instance: --every %v: want at least 10ms", cfg.Every)
	}
	if bad != nil {
		fmt.Fprintln(stderr, bad)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runInstance(ctx, cfg, strings.NewReader(""), stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "scheduler: %s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

// printTimeline writes the run's timeline and what the jobs table holds.
func printTimeline(w io.Writer, cfg config, res result) {
	fmt.Fprintf(w, "two schedulers campaign for one election on PostgreSQL (term TTL %v, a job every %v);\n", cfg.TTL, cfg.Every)
	fmt.Fprintf(w, "node-1 is paused (SIGSTOP) before its write after job %d, for at least %v and until node-2 has written\n\n", cfg.PauseAfter, cfg.Pause)
	for _, e := range res.Timeline {
		who := e.Instance
		if who == "" {
			who = "-"
		}
		fmt.Fprintf(w, "%+9.3fs  %-7s %s\n", e.At.Seconds(), who, e.What)
	}
	fmt.Fprintln(w)
	if len(res.Jobs) > 0 {
		fmt.Fprintf(w, "jobs recorded: %s\n", summarize(res.Jobs))
	}
	if res.Second != 0 {
		fmt.Fprintf(w, "node-2 took over %v after node-1 was paused (term TTL %v)\n", res.Takeover.Round(10*time.Millisecond), cfg.TTL)
	}
	if res.Refused != nil {
		fmt.Fprintf(w, "node-1 woke after %v and wrote with epoch %d: refused, the guard had seen epoch %d\n", res.Paused.Round(10*time.Millisecond), res.Refused.Epoch, res.Refused.Highest)
	}
}

// summarize describes the jobs as runs of one instance in one epoch, e.g.
// "1-3 by node-1 (epoch 1), 4-6 by node-2 (epoch 2)".
func summarize(jobs []jobRow) string {
	var parts []string
	for i := 0; i < len(jobs); {
		j := i
		for j+1 < len(jobs) && jobs[j+1].Instance == jobs[i].Instance && jobs[j+1].Epoch == jobs[i].Epoch {
			j++
		}
		span := fmt.Sprint(jobs[i].Job)
		if j > i {
			span = fmt.Sprintf("%d-%d", jobs[i].Job, jobs[j].Job)
		}
		parts = append(parts, fmt.Sprintf("%s by %s (epoch %d)", span, jobs[i].Instance, jobs[i].Epoch))
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
