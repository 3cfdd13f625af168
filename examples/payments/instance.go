//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
)

// envInstance, when set in the environment, makes the program (or the test binary)
// run as one reconciliation instance; its value is the instance's JSON config.
const envInstance = "PAYMENTS_INSTANCE_CONFIG"

// instanceConfig is what the coordinator tells an instance it re-executes.
type instanceConfig struct {
	Number   int           `json:"number"` // 1-based
	DSN      string        `json:"dsn"`
	Provider string        `json:"provider"` // base URL
	Batch    string        `json:"batch"`
	Size     int           `json:"size"`
	TTL      time.Duration `json:"ttl"`
	Protect  protection    `json:"protect"`
}

// event is one line an instance writes on its stdout for the coordinator.
type event struct {
	Event    string      `json:"event"` // "acquired" or "done"
	Instance int         `json:"instance"`
	Token    fence.Token `json:"token,omitempty"`
	Stats    *instStats  `json:"stats,omitempty"`
	Error    string      `json:"error,omitempty"`
}

// instStats counts what one instance did.
type instStats struct {
	Paid      int `json:"paid"`       // charges recorded as paid by this instance
	Replayed  int `json:"replayed"`   // of those, answered by a replay at the provider
	Skipped   int `json:"skipped"`    // lines found already paid when claiming
	Stale     int `json:"stale"`      // writes the guard refused (then the instance stops)
	TakenOver int `json:"taken_over"` // charges made whose claim another instance took over
}

// runInstanceFromEnv runs the instance described by the environment, writing its
// events to stdout and its log to stderr, and returns the process exit code.
func runInstanceFromEnv() int {
	var cfg instanceConfig
	if err := json.Unmarshal([]byte(os.Getenv(envInstance)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "payments: instance: bad %s: %v\n", envInstance, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	enc := json.NewEncoder(os.Stdout)
	stats, err := runInstance(ctx, cfg, enc, os.Stderr)
	done := event{Event: "done", Instance: cfg.Number, Stats: &stats}
	if err != nil {
		done.Error = err.Error()
	}
	if encErr := enc.Encode(done); encErr != nil {
		fmt.Fprintf(os.Stderr, "payments: instance %d: report: %v\n", cfg.Number, encErr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "payments: instance %d: %v\n", cfg.Number, err)
		return 1
	}
	return 0
}

// runInstance is one run of the reconciliation job: acquire the batch's lock,
// read which lines are unpaid, and for each of them claim it in the ledger, charge
// it at the provider and record the charge. It stops at the first write the guard
// refuses (the instance was fenced off). It returns what it did, and an error for
// anything but a refusal.
func runInstance(ctx context.Context, cfg instanceConfig, events *json.Encoder, logw io.Writer) (instStats, error) {
	var st instStats
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "instance %d: %s\n", cfg.Number, fmt.Sprintf(format, args...))
	}
	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		return st, fmt.Errorf("payments: instance %d: connect: %w", cfg.Number, err)
	}
	defer pool.Close()
	locker := postgres.NewLocker(pool, nil)
	defer locker.Close()

	lockName := "payouts/" + cfg.Batch
	// Auto-renewal keeps a healthy instance's lease through a long batch; it cannot
	// help a stopped process, which is the point.
	lease, err := locker.Acquire(ctx, lockName, cfg.TTL, fence.WithWait(fence.WaitForever), fence.WithAutoRenew())
	if err != nil {
		return st, fmt.Errorf("payments: instance %d: acquire %q: %w", cfg.Number, lockName, err)
	}
	logf("acquired %s with token %d", lockName, lease.Token())
	if err := events.Encode(event{Event: "acquired", Instance: cfg.Number, Token: lease.Token()}); err != nil {
		return st, fmt.Errorf("payments: instance %d: report: %w", cfg.Number, err)
	}
	defer func() {
		// A paused instance's lease is long gone: ErrNotHeld is the expected answer.
		if err := lease.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, fence.ErrNotHeld) {
			logf("release: %v", err)
		}
	}()

	l := &ledger{pool: pool, table: tableUnconstrained, batch: cfg.Batch, instance: strconv.Itoa(cfg.Number)}
	if cfg.Protect.Unique {
		l.table, l.unique = tableUnique, true
	}
	f := lease.Fence()
	if cfg.Protect.Fencing {
		l.guard = postgres.NewGuard(pool, nil)
		// Fence the ledger off before reading it: from here on no earlier holder
		// can write to this batch's payouts.
		if err := l.guard.Fence(ctx, "payouts/"+cfg.Batch, f); err != nil {
			if errors.Is(err, fence.ErrStaleToken) {
				st.Stale++
				logf("fenced off before starting: %v", err)
				return st, nil
			}
			return st, fmt.Errorf("payments: instance %d: fence: %w", cfg.Number, err)
		}
	}
	client := &providerClient{base: cfg.Provider, instance: cfg.Number, idem: cfg.Protect.Idempotency,
		http: &http.Client{Timeout: 2 * time.Minute}}

	lines, err := l.pending(ctx, cfg.Size)
	if err != nil {
		return st, err
	}
	logf("%d of %d lines to pay", len(lines), cfg.Size)
	for _, line := range lines {
		id, err := l.claim(ctx, f, line)
		switch {
		case errors.Is(err, errAlreadyPaid):
			st.Skipped++
			continue
		case errors.Is(err, fence.ErrStaleToken):
			st.Stale++
			logf("line %d: claim refused, fenced off; stopping: %v", line, err)
			return st, nil
		case err != nil:
			return st, err
		}
		chargeID, replayed, err := client.charge(ctx, cfg.Batch, line)
		if err != nil {
			return st, err
		}
		err = l.record(ctx, f, id, chargeID)
		switch {
		case errors.Is(err, errTakenOver):
			st.TakenOver++
			logf("line %d: charged (%s) but the claim was taken over", line, chargeID)
			continue
		case errors.Is(err, fence.ErrStaleToken):
			st.Stale++
			logf("line %d: charge %s not recorded, fenced off; stopping: %v", line, chargeID, err)
			return st, nil
		case err != nil:
			return st, err
		}
		st.Paid++
		if replayed {
			st.Replayed++
		}
	}
	logf("done: %+v", st)
	return st, nil
}
