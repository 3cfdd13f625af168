//go:build unix

// Command payments replays the seed's incident, a nightly payout reconciliation that
// paid a batch twice, with real processes, a real PostgreSQL ledger and a real HTTP
// payment provider, and shows which protection stops the duplicates.
//
//	go run ./examples/payments --postgres 'postgres://user@127.0.0.1:5432/payments'
//	go run ./examples/payments --postgres "$DSN" --protect every --batch 20 --instances 3
//
// For each protection mode it runs the job as --instances child processes (the
// program re-executes itself). Instance 1 takes the batch's lock and starts paying;
// while its charge of line --pause-line is in flight at the provider, the program
// stops it with SIGSTOP. The lock's TTL runs out, instance 2 takes the lock and pays
// the batch, the others find nothing left, and only then is instance 1 resumed with
// SIGCONT: its pause is longer than the TTL by construction, so the race happens on
// every run. It prints one row per mode: charges at the provider, duplicates, ledger
// rows, and the writes the guard refused.
//
// The program needs a PostgreSQL database (--postgres or $PAYMENTS_POSTGRES); it
// creates its tables there and never starts a server. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	if os.Getenv(envInstance) != "" {
		os.Exit(runInstanceFromEnv())
	}
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain parses args, runs the modes and prints the table. It returns the exit
// code: 0 on success, 2 for bad usage, 1 for a failed run.
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := config{}
	var protect string
	fs.IntVar(&cfg.Instances, "instances", 2, "reconciliation instances (processes), at least 2")
	fs.IntVar(&cfg.Batch, "batch", 20, "payout lines in the batch")
	fs.StringVar(&protect, "protect", "all,none", "comma-separated protection modes to run: all, none, fencing, idempotency, unique, or every (all five)")
	fs.StringVar(&cfg.DSN, "postgres", os.Getenv("PAYMENTS_POSTGRES"), "PostgreSQL URL of the ledger database (default $PAYMENTS_POSTGRES)")
	fs.IntVar(&cfg.PauseLine, "pause-line", 0, "line whose in-flight charge instance 1 is paused at (default: the middle of the batch)")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "lease TTL of the batch lock (the incident's was 30s)")
	fs.DurationVar(&cfg.Pause, "pause", 0, "shortest time instance 1 stays stopped, at least the TTL (default: the TTL); it is resumed only once the other instances finished")
	fs.BoolVar(&cfg.Verbose, "v", false, "show the instances' logs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "payments: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.Pause == 0 {
		cfg.Pause = cfg.TTL
	}
	if cfg.PauseLine == 0 {
		cfg.PauseLine = (cfg.Batch + 1) / 2
	}
	modes, err := parseModes(protect)
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return 2
	}
	if cfg.Verbose {
		cfg.Log = stderr
	}
	var results []result
	for _, m := range modes {
		r, err := run(cfg, m)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		results = append(results, r)
	}
	printTable(stdout, cfg, results)
	return 0
}

// protection says which of the three protections a run uses.
type protection struct {
	Name        string `json:"name"`
	Fencing     bool   `json:"fencing"`     // ledger writes under the postgres Guard
	Idempotency bool   `json:"idempotency"` // Idempotency-Key on provider calls
	Unique      bool   `json:"unique"`      // UNIQUE (batch_id, line) on payouts
}

// modeOrder is the order of "every".
var modeOrder = []string{"all", "none", "fencing", "idempotency", "unique"}

// parseMode returns the protection named s, or an error for an unknown name.
func parseMode(s string) (protection, error) {
	switch s {
	case "all":
		return protection{Name: s, Fencing: true, Idempotency: true, Unique: true}, nil
	case "none":
		return protection{Name: s}, nil
	case "fencing":
		return protection{Name: s, Fencing: true}, nil
	case "idempotency":
		return protection{Name: s, Idempotency: true}, nil
	case "unique":
		return protection{Name: s, Unique: true}, nil
	}
	return protection{}, fmt.Errorf("payments: unknown protection mode %q (want all, none, fencing, idempotency, unique or every)", s)
}

// parseModes parses the --protect list.
func parseModes(list string) ([]protection, error) {
	var out []protection
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "every" {
			for _, name := range modeOrder {
				p, _ := parseMode(name)
				out = append(out, p)
			}
			continue
		}
		p, err := parseMode(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// printTable writes one row per run.
func printTable(w io.Writer, cfg config, results []result) {
	fmt.Fprintf(w, "batch of %d payouts, %d instances, lock TTL %v; instance 1 paused (SIGSTOP) during its charge of line %d for at least %v and until the others finished\n\n",
		cfg.Batch, cfg.Instances, cfg.TTL, cfg.PauseLine, cfg.Pause)
	fmt.Fprintf(w, "%-12s %8s %11s %8s %12s %12s %12s\n", "protect", "charges", "duplicates", "unpaid", "ledger rows", "stale writes", "paused for")
	for _, r := range results {
		fmt.Fprintf(w, "%-12s %8d %11d %8d %12d %12d %12v\n", r.Mode, r.Charges, r.Duplicates, r.Unpaid, r.LedgerRows, r.Stale, r.Paused.Round(10*time.Millisecond))
	}
}
