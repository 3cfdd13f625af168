//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence/idempotency/pgstore"
)

// config is the coordinator's configuration (the command line).
type config struct {
	DSN       string
	Instances int
	Batch     int
	PauseLine int
	TTL       time.Duration
	Pause     time.Duration // shortest stop of instance 1, at least TTL
	Verbose   bool
	Log       io.Writer // the instances' logs go here when set
}

// validate returns an error naming the first bad setting.
func (c config) validate() error {
	switch {
	case c.DSN == "":
		return errors.New("payments: no database: pass --postgres DSN (or set PAYMENTS_POSTGRES), e.g. postgres://postgres@127.0.0.1:5432/payments?sslmode=disable")
	case c.Instances < 2 || c.Instances > 32:
		return fmt.Errorf("payments: --instances %d: want 2 to 32", c.Instances)
	case c.Batch < 1 || c.Batch > 10000:
		return fmt.Errorf("payments: --batch %d: want 1 to 10000", c.Batch)
	case c.PauseLine < 1 || c.PauseLine > c.Batch:
		return fmt.Errorf("payments: --pause-line %d: want 1 to the batch size %d", c.PauseLine, c.Batch)
	case c.TTL < 200*time.Millisecond || c.TTL > 10*time.Minute:
		return fmt.Errorf("payments: --ttl %v: want 200ms to 10m", c.TTL)
	case c.Pause < c.TTL || c.Pause > 10*time.Minute:
		return fmt.Errorf("payments: --pause %v: want the TTL (%v) to 10m: a shorter stop is no pause past the lease", c.Pause, c.TTL)
	}
	return nil
}

// result is what one run of a protection mode produced.
type result struct {
	Mode       string
	Batch      string
	Charges    int // charges made at the provider (replays excluded)
	Duplicates int // charges beyond the first of each payout
	Unpaid     int // lines of the batch never charged
	LedgerRows int // payout rows of the batch in the ledger
	PaidRows   int // of those, rows marked paid
	Stale      int // ledger writes the guard refused
	Replayed   int // provider answers replayed from the idempotency store
	Paused     time.Duration
	// Overtaken is true if another instance acquired the lock while instance 1 was
	// stopped: the race of the incident happened.
	Overtaken bool
}

// run runs the job once under protection p: it prepares the database, starts the
// provider and the instances, pauses instance 1 during its charge of
// cfg.PauseLine until every other instance exited, and counts the outcome.
func run(cfg config, p protection) (result, error) {
	res := result{Mode: p.Name, Batch: fmt.Sprintf("nightly-%s-%d", p.Name, time.Now().UnixNano())}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+20*cfg.TTL)
	defer cancel()

	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		return res, fmt.Errorf("payments: connect to %s: %w", redactDSN(cfg.DSN), err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return res, fmt.Errorf("payments: connect to %s: %w", redactDSN(cfg.DSN), err)
	}
	store := pgstore.New(pool, nil)
	if err := createSchema(ctx, pool, store.CreateSchema); err != nil {
		return res, err
	}

	exe, err := os.Executable()
	if err != nil {
		return res, fmt.Errorf("payments: find own executable to start instances: %w", err)
	}

	// The chaos hook: stop instance 1 while its charge of PauseLine is in flight.
	var first atomic.Pointer[os.Process]
	var pausedAt time.Time
	paused := make(chan struct{})
	var pauseOnce sync.Once
	var pauseErr error
	hook := func(instance, line int) {
		if instance != 1 || line != cfg.PauseLine {
			return
		}
		pauseOnce.Do(func() {
			if proc := first.Load(); proc != nil {
				pauseErr = proc.Signal(syscall.SIGSTOP)
				if pauseErr == nil {
					pauseErr = waitStopped(proc.Pid)
				}
				pausedAt = time.Now()
			}
			close(paused)
		})
	}
	prov, err := startProvider(store, hook)
	if err != nil {
		return res, err
	}
	defer prov.Close()

	base := instanceConfig{DSN: cfg.DSN, Provider: prov.URL(), Batch: res.Batch, Size: cfg.Batch, TTL: cfg.TTL, Protect: p}
	children := make([]*child, cfg.Instances)
	defer func() {
		for _, c := range children {
			if c != nil {
				c.kill()
			}
		}
	}()
	start := func(n int) error {
		ic := base
		ic.Number = n
		c, err := startChild(ctx, exe, ic, cfg.Log)
		if err != nil {
			return err
		}
		children[n-1] = c
		return nil
	}

	// Instance 1 first, and the others only once it holds the lock.
	if err := start(1); err != nil {
		return res, err
	}
	first.Store(children[0].cmd.Process)
	select {
	case <-children[0].acquired:
	case <-children[0].exited:
		return res, children[0].failure()
	case <-ctx.Done():
		return res, fmt.Errorf("payments: instance 1 did not acquire the lock: %w", ctx.Err())
	}
	for n := 2; n <= cfg.Instances; n++ {
		if err := start(n); err != nil {
			return res, err
		}
	}
	for _, c := range children[1:] {
		select {
		case <-c.exited:
		case <-ctx.Done():
			return res, fmt.Errorf("payments: instance %d did not finish: %w", c.cfg.Number, ctx.Err())
		}
	}
	select {
	case <-paused:
		if pauseErr != nil {
			return res, fmt.Errorf("payments: pause instance 1: %w", pauseErr)
		}
		// The others can only have run after instance 1's lease expired, so the
		// pause already outlasted the lease; it is also kept at least cfg.Pause
		// (one TTL or more) long, as the incident's GC pause was.
		if rest := cfg.Pause - time.Since(pausedAt); rest > 0 {
			t := time.NewTimer(rest)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return res, fmt.Errorf("payments: resume instance 1: %w", ctx.Err())
			}
		}
		if err := children[0].cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return res, fmt.Errorf("payments: resume instance 1: %w", err)
		}
		res.Paused = time.Since(pausedAt)
		for _, c := range children[1:] {
			if !c.acquiredAt.IsZero() && c.acquiredAt.After(pausedAt) {
				res.Overtaken = true
			}
		}
	default:
		// Instance 1 never reached the pause line (it failed, or found the line paid).
	}
	select {
	case <-children[0].exited:
	case <-ctx.Done():
		return res, fmt.Errorf("payments: instance 1 did not finish: %w", ctx.Err())
	}
	for _, c := range children {
		if err := c.failure(); err != nil {
			return res, err
		}
		res.Stale += c.stats.Stale
		res.Replayed += c.stats.Replayed
	}

	counts := prov.chargeCounts()
	for _, n := range counts {
		res.Charges += n
		if n > 1 {
			res.Duplicates += n - 1
		}
	}
	res.Unpaid = cfg.Batch - len(counts)
	table := tableUnconstrained
	if p.Unique {
		table = tableUnique
	}
	err = pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE status = 'paid') FROM %s WHERE batch_id = $1`, table),
		res.Batch).Scan(&res.LedgerRows, &res.PaidRows)
	if err != nil {
		return res, fmt.Errorf("payments: count ledger rows: %w", err)
	}
	return res, nil
}

// child is one instance process.
type child struct {
	cfg        instanceConfig
	cmd        *exec.Cmd
	stderr     lockedBuffer
	acquired   chan struct{} // closed at the "acquired" event
	acquiredAt time.Time     // when the "acquired" event came, valid after acquired
	exited     chan struct{} // closed once the process was waited for
	waitErr    error         // the process's exit, valid after exited
	stats      instStats     // from the "done" event, valid after exited
	done       *event
}

// startChild re-executes the program as instance cfg.Number.
func startChild(ctx context.Context, exe string, cfg instanceConfig, logw io.Writer) (*child, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("payments: instance %d: encode config: %w", cfg.Number, err)
	}
	c := &child{cfg: cfg, acquired: make(chan struct{}), exited: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, exe)
	c.cmd.Env = append(os.Environ(), envInstance+"="+string(js))
	c.cmd.SysProcAttr = childProcAttr()
	if logw != nil {
		c.cmd.Stderr = io.MultiWriter(&c.stderr, logw)
	} else {
		c.cmd.Stderr = &c.stderr
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("payments: instance %d: %w", cfg.Number, err)
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("payments: start instance %d: %w", cfg.Number, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		var once sync.Once
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			switch ev.Event {
			case "acquired":
				once.Do(func() {
					c.acquiredAt = time.Now()
					close(c.acquired)
				})
			case "done":
				c.done = &ev
				if ev.Stats != nil {
					c.stats = *ev.Stats
				}
			}
		}
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// failure returns why the instance failed, or nil if it exited cleanly. Call it
// after exited is closed.
func (c *child) failure() error {
	select {
	case <-c.exited:
	default:
		return fmt.Errorf("payments: instance %d still running", c.cfg.Number)
	}
	switch {
	case c.waitErr != nil:
		return fmt.Errorf("payments: instance %d failed: %w; its log:\n%s", c.cfg.Number, c.waitErr, c.stderr.tail(2000))
	case c.done == nil:
		return fmt.Errorf("payments: instance %d exited without a report; its log:\n%s", c.cfg.Number, c.stderr.tail(2000))
	case c.done.Error != "":
		return fmt.Errorf("payments: instance %d: %s", c.cfg.Number, c.done.Error)
	}
	return nil
}

// kill stops a still running instance with SIGKILL (which also ends a stopped
// process) and waits for it.
func (c *child) kill() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// lockedBuffer is a bytes.Buffer safe for the exec copier and a reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail returns the last n bytes written.
func (b *lockedBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.Bytes()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return string(s)
}

// redactDSN hides a password in a DSN for error messages.
func redactDSN(dsn string) string {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return "the --postgres DSN"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
}
