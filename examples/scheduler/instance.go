//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/election"
	"github.com/fencelock/fence/postgres"
)

// envInstance, when set, makes the program (or the test binary) run as one
// scheduler instance; its value is the instance's JSON config.
const envInstance = "SCHEDULER_INSTANCE_CONFIG"

// schema is the table the leader records its jobs in. Nothing in it stops a
// duplicate or an out-of-order epoch: the guard's fence row does.
const schema = `CREATE TABLE IF NOT EXISTS scheduler_jobs (
    run_id     text        NOT NULL,
    job        bigint      NOT NULL,
    instance   text        NOT NULL,
    epoch      bigint      NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
)`

// instanceConfig is one instance's settings.
type instanceConfig struct {
	Name  string        `json:"name"` // the candidate's owner, e.g. node-1
	DSN   string        `json:"dsn"`
	Run   string        `json:"run"` // the election and job list to use
	TTL   time.Duration `json:"ttl"`
	Every time.Duration `json:"every"` // one job per tick while leading
	// HoldAfter, if above 0, makes the instance stop before the write that
	// follows its HoldAfter-th, announce it ("holding") and wait for a line on
	// stdin: the point where the demo pauses the leader, between its decision
	// to write and the write. Zero for an instance run by hand.
	HoldAfter int `json:"hold_after,omitempty"`
}

// event is one line an instance writes on its stdout.
type event struct {
	Event    string      `json:"event"` // campaigning, leading, wrote, holding, refused, stopped, failed
	Instance string      `json:"instance"`
	Epoch    fence.Token `json:"epoch,omitempty"`
	Job      int64       `json:"job,omitempty"`
	Highest  fence.Token `json:"highest,omitempty"` // refused: the epoch the guard had seen
	Detail   string      `json:"detail,omitempty"`  // an error, or why a term ended
}

// electionName and resource name the run's election and the guard's fence row.
func electionName(run string) string { return "scheduler/" + run }
func resource(run string) string     { return "scheduler_jobs/" + run }

// createSchema creates the jobs table, the guard's fences table and the lock
// table if they do not exist.
func createSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("scheduler: create jobs table: %w", err)
	}
	if err := postgres.NewGuard(pool, nil).CreateSchema(ctx); err != nil {
		return fmt.Errorf("scheduler: create fences table: %w", err)
	}
	l := postgres.NewLocker(pool, nil)
	defer l.Close()
	if err := l.CreateSchema(ctx); err != nil {
		return fmt.Errorf("scheduler: create lock table: %w", err)
	}
	return nil
}

// runInstanceFromEnv runs the instance described by the environment until
// SIGTERM or SIGINT, and returns the exit code.
func runInstanceFromEnv() int {
	var cfg instanceConfig
	if err := json.Unmarshal([]byte(os.Getenv(envInstance)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler: instance: bad %s: %v\n", envInstance, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runInstance(ctx, cfg, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler: %s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

// runInstance campaigns in the run's election until ctx ends; while it leads it
// records a job every cfg.Every, each through the guard with its term's fence.
// It returns nil when ctx ends, or what stopped it otherwise.
func runInstance(ctx context.Context, cfg instanceConfig, hold io.Reader, events, logw io.Writer) error {
	in := &instance{cfg: cfg, logw: logw, events: json.NewEncoder(events), hold: bufio.NewReader(hold)}
	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := createSchema(ctx, pool); err != nil {
		return err
	}
	locker := postgres.NewLocker(pool, nil)
	defer locker.Close()
	in.pool, in.guard = pool, postgres.NewGuard(pool, nil)
	e, err := election.New(locker, electionName(cfg.Run), election.WithTTL(cfg.TTL), election.WithOwner(cfg.Name))
	if err != nil {
		return err
	}
	in.emit(event{Event: "campaigning"})
	err = e.Run(ctx, election.Callbacks{
		OnStartedLeading: in.lead,
		OnStoppedLeading: func() {
			in.emit(event{Event: "stopped", Epoch: in.epoch, Detail: in.ended})
		},
	})
	if ctx.Err() != nil {
		return nil // stopped by a signal: Run resigned the term, if any
	}
	in.emit(event{Event: "failed", Detail: err.Error()})
	return err
}

// instance is one running scheduler.
type instance struct {
	cfg    instanceConfig
	pool   *pgxpool.Pool
	guard  *postgres.Guard
	logw   io.Writer
	hold   *bufio.Reader
	held   bool        // the hold happened (it happens once)
	writes int         // jobs written, in every term
	epoch  fence.Token // the current or last term's
	ended  string      // why the last term ended

	mu     sync.Mutex // serialises events
	events *json.Encoder
}

func (in *instance) emit(ev event) {
	ev.Instance = in.cfg.Name
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.events.Encode(ev); err != nil {
		fmt.Fprintf(in.logw, "scheduler: %s: report: %v\n", in.cfg.Name, err)
	}
}

// lead is OnStartedLeading: a job every tick until the term ends or a write
// is refused.
func (in *instance) lead(ctx context.Context, term *election.Term) {
	in.epoch = term.Epoch()
	in.emit(event{Event: "leading", Epoch: term.Epoch()})
	defer func() { in.ended = fmt.Sprint(context.Cause(ctx)) }()
	// The writes do not use ctx: a write already under way when the leader is
	// paused cannot be recalled by a context, nor by a check before it. The
	// guard is what refuses it once a newer term has written.
	wctx := context.WithoutCancel(ctx)
	tick := time.NewTicker(in.cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if in.cfg.HoldAfter > 0 && in.writes == in.cfg.HoldAfter && !in.held {
			in.held = true
			in.emit(event{Event: "holding", Epoch: term.Epoch()})
			if _, err := in.hold.ReadString('\n'); err != nil {
				fmt.Fprintf(in.logw, "scheduler: %s: hold: %v\n", in.cfg.Name, err)
			}
		}
		job, err := in.record(wctx, term)
		var stale *fence.StaleTokenError
		switch {
		case errors.As(err, &stale):
			// A newer leader exists: step down at once rather than at the
			// deadline (Resign answers ErrNotHeld if the term is gone already).
			in.emit(event{Event: "refused", Epoch: term.Epoch(), Highest: stale.Highest, Detail: err.Error()})
			_ = term.Resign(wctx)
			<-ctx.Done()
			return
		case err != nil:
			fmt.Fprintf(in.logw, "scheduler: %s: record a job: %v\n", in.cfg.Name, err)
			continue // the next tick tries again
		}
		in.writes++
		in.emit(event{Event: "wrote", Epoch: term.Epoch(), Job: job})
	}
}

// record writes the run's next job as done by this leader, in one transaction
// fenced by the term's epoch, and returns its number. A stale epoch is refused
// by the transaction's first statement and nothing is written.
func (in *instance) record(ctx context.Context, term *election.Term) (int64, error) {
	var job int64
	err := in.guard.Do(ctx, resource(in.cfg.Run), term.Fence(), func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO scheduler_jobs (run_id, job, instance, epoch)
			SELECT $1, coalesce(max(job), 0) + 1, $2, $3 FROM scheduler_jobs WHERE run_id = $1
			RETURNING job`, in.cfg.Run, in.cfg.Name, int64(term.Epoch())).Scan(&job)
	})
	return job, err
}
