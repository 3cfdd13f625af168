package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
	fenceredis "github.com/fencelock/fence/redis"
)

// MonoNow returns the machine's monotonic clock (CLOCK_MONOTONIC) in nanoseconds.
// Unlike Go's monotonic readings it is shared by every process on the machine, so
// the harness and its workers can time operations on one scale.
func MonoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// Cannot happen on Linux; fall back to wall time rather than panic.
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

// WorkerConfig configures one worker process (`fence chaos worker`).
type WorkerConfig struct {
	ID int // worker number, recorded in every Op
	// Server is the base URL of the `fence serve` server (the fenced KV, and the locks
	// unless Redis is set), or a comma-separated list of a cluster's nodes.
	Server string
	Redis  string // host:port of a Redis whose redis.Locker grants the locks; "" means the server
	// Postgres is the DSN of a PostgreSQL whose table holds the counter, written
	// through postgres.Guard; "" means the server's KV.
	Postgres string
	Lock     string        // lock name
	Key      string        // KV key of the fenced counter
	TTL      time.Duration // lease TTL
	Hold     time.Duration // time spent between the read and the write (where pauses bite)
	Wait     time.Duration // how long one acquire waits for the lock
	Fencing  bool          // false: control run, writes ignore the lease's token
	Start    int64         // MonoNow of the run's start; times are recorded relative to it
	// Clock measures the local deadlines of the worker's leases and the waits of its
	// acquisitions; nil means driver.SystemClock. The clock nemesis steps it.
	Clock driver.Clock
}

// Validate returns an error matching fence.ErrInvalid for a config RunWorker cannot run.
func (c WorkerConfig) Validate() error {
	switch {
	case c.Server == "":
		return fmt.Errorf("chaos: worker: %w: server URL is empty", fence.ErrInvalid)
	case c.TTL <= 0 || c.Hold < 0 || c.Wait < 0:
		return fmt.Errorf("chaos: worker: %w: ttl must be positive, hold and wait not negative", fence.ErrInvalid)
	case c.ID < 0:
		return fmt.Errorf("chaos: worker: %w: id %d is negative", fence.ErrInvalid, c.ID)
	}
	if err := fence.ValidateName(c.Lock); err != nil {
		return fmt.Errorf("chaos: worker: lock: %w", err)
	}
	if c.Key == "" {
		return fmt.Errorf("chaos: worker: %w: key is empty", fence.ErrInvalid)
	}
	return nil
}

// recorder writes Ops as JSON lines, one write call per Op, so a worker killed or
// stopped loses at most the line it was writing.
type recorder struct {
	mu    sync.Mutex
	enc   *json.Encoder
	start int64
	err   error
}

func (r *recorder) now() int64 { return MonoNow() - r.start }

func (r *recorder) record(o Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = r.enc.Encode(o)
	}
}

// recordRetried records o as one call of do, retried by retryUnknown, and returns
// do's last error. An outcome still unknown after the retries is recorded as never
// returning: the operation may take effect at any later time.
func (r *recorder) recordRetried(ctx context.Context, o Op, do func() error) error {
	o.Call = r.now()
	err, retried := retryUnknown(ctx, do)
	o.Return = r.now()
	o.Result, o.Err = retriedOutcome(err, retried)
	if res, _ := outcome(err); res == ResultUnknown {
		o.Return = Never
	}
	r.record(o)
	return err
}

// hashLease returns a short digest of a lease id: enough to tell leases apart in a
// history without recording the credential itself.
func hashLease(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// outcome classifies the error of a fenced write or fence.
func outcome(err error) (Result, string) {
	switch {
	case err == nil:
		return ResultOK, ""
	case errors.Is(err, fence.ErrStaleToken), errors.Is(err, fence.ErrNamespace):
		return ResultRejected, err.Error()
	case errors.Is(err, fence.ErrInvalid):
		return ResultFailed, err.Error()
	}
	return ResultUnknown, err.Error()
}

// RunWorker loops until ctx is done: acquire cfg.Lock, fence cfg.Key with the lease
// (skipped with fencing off), read the counter, wait cfg.Hold, write counter+1,
// release. Each operation is written to out as one JSON Op. It returns nil when ctx
// ends, an error matching fence.ErrInvalid for a bad config, or the error writing to
// out.
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	opts := &fencehttp.ClientOptions{RequestTimeout: 2*time.Second + cfg.Wait, Clock: cfg.Clock}
	if strings.Contains(cfg.Server, ",") {
		// Several servers (a cluster's nodes): a node that does not answer within a
		// TTL is passed over for the next, while the lease can still be used.
		opts.AttemptTimeout = cfg.TTL
	}
	c, err := fencehttp.NewClient(cfg.Server, opts)
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	var locker fence.Locker = c
	if cfg.Redis != "" {
		rc := goredis.NewClient(&goredis.Options{Addr: cfg.Redis, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second})
		defer rc.Close()
		rl, err := fenceredis.NewLocker(rc, &fenceredis.Options{PollInterval: cfg.TTL, Clock: cfg.Clock})
		if err != nil {
			return fmt.Errorf("chaos: worker: %w", err)
		}
		locker = rl
	}
	var res resource = serveResource{c}
	if cfg.Postgres != "" {
		pr, err := openPostgresResource(ctx, cfg.Postgres)
		if err != nil {
			return fmt.Errorf("chaos: worker: %w", err)
		}
		res = pr
	}
	defer res.close()
	rec := &recorder{enc: json.NewEncoder(out), start: cfg.Start}
	base := Op{Worker: cfg.ID, Key: cfg.Key, Lock: cfg.Lock}
	backoff := func() {
		t := time.NewTimer(20 * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	for seq := 1; ctx.Err() == nil; seq++ {
		if rec.err != nil {
			return fmt.Errorf("chaos: worker %d: log: %w", cfg.ID, rec.err)
		}
		o := base
		o.Kind = KindAcquire
		o.Call = rec.now()
		lease, err := locker.Acquire(ctx, cfg.Lock, cfg.TTL, fence.WithWait(cfg.Wait))
		o.Return = rec.now()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			o.Result, o.Err = ResultFailed, err.Error()
			rec.record(o)
			backoff()
			continue
		}
		f := lease.Fence()
		base.Token, base.Lease = f.Token, hashLease(f.LeaseID)
		o.Token, o.Lease, o.Result = base.Token, base.Lease, ResultOK
		rec.record(o)
		if highest := cfg.critical(ctx, res, rec, base, lease, locker, seq); highest > 0 {
			// Refused as stale: the lock's counter is behind what the key accepted (a
			// failover lost increments). Heal it, as fence's P4 says, so the next grant
			// is above.
			if h, ok := locker.(fence.Healer); ok {
				o := base
				o.Kind, o.Token, o.Lease, o.Call = KindHeal, highest, "", rec.now()
				err := h.Heal(ctx, cfg.Lock, highest)
				o.Return = rec.now()
				o.Result, o.Err = ResultOK, ""
				if err != nil {
					o.Result, o.Err = ResultFailed, err.Error()
				}
				rec.record(o)
			}
		}
		base.Token, base.Lease = 0, ""
	}
	return rec.err
}

// critical runs one critical section under lease and releases it. It returns the
// highest token the key reported when it refused the lease's fence as stale, else 0.
func (cfg WorkerConfig) critical(ctx context.Context, res resource, rec *recorder, base Op, lease *fence.Lease, locker fence.Locker, seq int) (highest fence.Token) {
	f := lease.Fence()
	defer func() {
		o := base
		o.Kind = KindRelease
		o.Call = rec.now()
		// A fresh context: release even when the run is ending.
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := lease.Release(rctx)
		cancel()
		o.Return = rec.now()
		o.Result = ResultOK
		if err != nil {
			o.Result, o.Err = ResultFailed, err.Error()
		}
		rec.record(o)
	}()
	if cfg.Fencing {
		o := base
		o.Kind = KindFence
		if err := rec.recordRetried(ctx, o, func() error { return res.fence(ctx, cfg.Key, f) }); err != nil {
			return staleHighest(err)
		}
	}
	o := base
	o.Kind = KindRead
	o.Call = rec.now()
	v, err := res.get(ctx, cfg.Key)
	o.Return = rec.now()
	if err != nil {
		o.Result, o.Err = ResultFailed, err.Error()
		rec.record(o)
		return 0
	}
	o.Result, o.Value = ResultOK, v
	rec.record(o)
	n, _ := counterOf(o.Value) // only workers write the key: "" or "N:wW:S"
	value := fmt.Sprintf("%d:w%d:%d", n+1, cfg.ID, seq)
	if cfg.Hold > 0 {
		t := time.NewTimer(cfg.Hold)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0
		case <-t.C:
		}
	}
	o = base
	o.Kind = KindWrite
	o.Value = value
	sent := f
	if !cfg.Fencing {
		// Control run: a token drawn just before the write from a lock of the
		// control's own, which no worker holds, so the store admits any write that
		// arrives later, as if it did not check tokens at all. (An invented token
		// would be refused: a store that grants the locks refuses tokens it never
		// issued.)
		ctl, err := controlFence(ctx, locker, cfg.Lock)
		if err != nil {
			return 0 // no write: the store could not be reached
		}
		sent = ctl
		o.Unfenced = true
	}
	err = rec.recordRetried(ctx, o, func() error { return res.put(ctx, cfg.Key, value, sent) })
	if cfg.Fencing {
		return staleHighest(err)
	}
	return 0
}

// controlFence returns a fence the store issued for the control lock of lock (a
// grant released at once, its lease id left out): the control run's token.
func controlFence(ctx context.Context, locker fence.Locker, lock string) (fence.Fence, error) {
	name := lock + "/control"
	l, err := locker.Acquire(ctx, name, time.Minute, fence.WithWait(5*time.Second))
	if err != nil {
		return fence.Fence{}, err
	}
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = locker.Release(rctx, name, l.ID())
	return fence.Fence{Name: name, Token: l.Token()}, nil
}

// retryUnknown calls do until its outcome is definite (accepted or refused), for up
// to about 3s, and returns the last error. A fence or a write retried with the same
// lease fence is idempotent: applied twice it leaves the state it leaves once, and
// once a retry is refused, a delayed earlier attempt would be refused too (the
// key's fence only rises). So the retried operation is recorded as one, from the
// first call to the last return (its outcome unknown if a retry was refused, see
// retriedOutcome), which keeps outcomes of unknown, unbounded
// duration (which make the linearizability search explode) to the few cases where
// the server stayed unreachable. A control run's write carries a fixed token (the
// control lock's, drawn once before it), so it is idempotent in the same way.
func retryUnknown(ctx context.Context, do func() error) (err error, retried bool) {
	for try := 0; try < 30; try++ {
		retried = try > 0
		if err = do(); err != nil {
			if r, _ := outcome(err); r == ResultUnknown && ctx.Err() == nil {
				t := time.NewTimer(100 * time.Millisecond)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				continue
			}
		}
		return err, retried
	}
	return err, retried
}

// retriedOutcome is outcome for a retried operation: refused after an attempt of
// unknown outcome, the first attempt may have been applied before the refusal, so
// the outcome is unknown, but bounded by the refusal (the key's fence only rises).
func retriedOutcome(err error, retried bool) (Result, string) {
	r, msg := outcome(err)
	if retried && r == ResultRejected {
		return ResultUnknown, "refused on a retry after an unknown outcome: " + msg
	}
	return r, msg
}

// staleHighest returns the highest token of a *fence.StaleTokenError, else 0.
func staleHighest(err error) fence.Token {
	var se *fence.StaleTokenError
	if errors.As(err, &se) {
		return se.Highest
	}
	return 0
}
