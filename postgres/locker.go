package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultLockTable is the lock table a Locker uses when LockerOptions.Table is empty.
const DefaultLockTable = "fence_locks"

// DefaultPollInterval bounds how long a waiter sleeps without a notification
// before it tries again (it also wakes when the holder's lease would expire).
const DefaultPollInterval = time.Second

// minPoll is the shortest fallback poll, so that waiters asking for tiny TTLs do
// not hammer the database.
const minPoll = 10 * time.Millisecond

// DefaultListLimit is how many locks List returns when its limit is <= 0.
const DefaultListLimit = 1000

// LockerSchema is the DDL of the lock table under its default name (see
// Locker.CreateSchema, which uses the configured name). One row per lock name
// holds the name's token counter, which only goes up, and its current lease:
//
//   - name is the primary key, in the "C" collation so that List's prefix scan
//     uses the index and sorts by bytes. It is the only index needed.
//   - A released lock keeps its row and token; its expires_at is -infinity.
//   - The trigger refuses to lower a token or delete a row (by hand or by a
//     bug): either would let tokens repeat.
const LockerSchema = `CREATE TABLE IF NOT EXISTS fence_locks (
    name       text COLLATE "C" PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    lease      text        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION fence_locks_keep_counters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fence: % on %: lock rows hold token counters that must never go down or be deleted', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE OR REPLACE TRIGGER fence_locks_no_lower BEFORE UPDATE ON fence_locks
    FOR EACH ROW WHEN (NEW.token < OLD.token) EXECUTE FUNCTION fence_locks_keep_counters();
CREATE OR REPLACE TRIGGER fence_locks_no_delete BEFORE DELETE ON fence_locks
    FOR EACH ROW EXECUTE FUNCTION fence_locks_keep_counters();
CREATE OR REPLACE TRIGGER fence_locks_no_truncate BEFORE TRUNCATE ON fence_locks
    FOR EACH STATEMENT EXECUTE FUNCTION fence_locks_keep_counters();`

// LockerOptions configure a Locker. The zero value (or nil) is usable.
type LockerOptions struct {
	// Table is the lock table, "table" or "schema.table" (ASCII letters, digits,
	// underscores). Default DefaultLockTable. Its name (without the schema) is
	// also the LISTEN/NOTIFY channel.
	Table string
	// PollInterval bounds a waiter's sleep when no notification comes (a lost
	// LISTEN connection, a lock that expired rather than being released); it is
	// further bounded by the TTL asked for. Default DefaultPollInterval.
	PollInterval time.Duration
	// Clock measures the leases' local deadlines. Default driver.SystemClock.
	// Expiry at the database is always judged by the database's clock.
	Clock driver.Clock
}

// Locker is a fence.Locker on PostgreSQL. Each lock name has one row holding
// its token counter and current lease; expiry is judged by the database's clock,
// so the clients' clocks do not matter. Acquire is one statement that grants the
// lock only if its lease expired and advances the counter in the same row, so a
// token is never issued twice and, the table being durable, survives restarts
// and crashes of PostgreSQL: Acquire, Renew and Release commit durably even when
// the session's synchronous_commit is off (see the package doc). Release notifies waiters through LISTEN/NOTIFY, on one
// connection per Locker shared by all its waiters; waiters also wake when the
// holder's lease would expire, and poll at least every PollInterval.
//
// Locker implements fence.Locker and fence.Inspector. It is safe for concurrent
// use. Close it to stop its listener; it does not close the pool.
type Locker struct {
	pool    *pgxpool.Pool
	table   string // quoted
	channel string // unquoted, as pg_notify takes it
	listen  string // LISTEN statement
	poll    time.Duration
	clock   driver.Clock
	err     error

	acquireSQL, heldSQL, renewSQL, releaseSQL, inspectSQL, listSQL, ddl string

	mu        sync.Mutex
	closed    bool
	closing   chan struct{}
	waiters   map[string]map[chan struct{}]struct{}
	started   bool          // listener goroutine started
	ready     chan struct{} // closed once the first LISTEN succeeded
	readyOnce sync.Once
	stop      context.CancelFunc
	done      chan struct{} // closed when the listener goroutine returned
}

var (
	_ fence.Locker    = (*Locker)(nil)
	_ fence.Inspector = (*Locker)(nil)
)

// NewLocker returns a Locker on pool. A malformed option is reported, matching
// fence.ErrInvalid, by every method.
func NewLocker(pool *pgxpool.Pool, opts *LockerOptions) *Locker {
	var o LockerOptions
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultLockTable
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Clock == nil {
		o.Clock = driver.SystemClock
	}
	l := &Locker{
		pool: pool, poll: o.PollInterval, clock: o.Clock,
		closing: make(chan struct{}), ready: make(chan struct{}), done: make(chan struct{}),
		waiters: make(map[string]map[chan struct{}]struct{}),
	}
	l.table, l.err = quoteIdent("table", o.Table, true)
	if l.err == nil && pool == nil {
		l.err = fmt.Errorf("postgres: locker: nil pool: %w", fence.ErrInvalid)
	}
	if l.err != nil {
		return l
	}
	schema, base := "", o.Table
	for i := len(o.Table) - 1; i >= 0; i-- {
		if o.Table[i] == '.' {
			schema, base = o.Table[:i], o.Table[i+1:]
			break
		}
	}
	l.channel = base
	l.listen = "LISTEN " + pgx.Identifier{base}.Sanitize()
	l.buildSQL(schema, base)
	return l
}

// expiresAt is the expiry of a lease of $3 milliseconds from now. It uses
// clock_timestamp(), the time the statement reaches this point, rather than
// now(), the start of the transaction: in a longer transaction now() lies in the
// past, and an expiry counted from it could come before the holder's local
// deadline (which counts from when it sent the request).
const expiresAt = `clock_timestamp() + $3::bigint * interval '1 millisecond'`

// remainingMS is the time left on a row's lease in whole milliseconds, rounded
// up: 0 if expired or released, -1 if infinite (edited by hand), NULL if the
// expiry is NULL (edited by hand).
const remainingMS = `CASE WHEN expires_at IS NULL THEN NULL
     WHEN expires_at <= clock_timestamp() THEN 0
     WHEN NOT isfinite(expires_at) THEN -1
     ELSE ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint END`

func (l *Locker) buildSQL(schema, base string) {
	t := l.table
	// Expiry is judged with clock_timestamp() too: the database's clock at the
	// moment the row is examined (locked), never an earlier reading.
	l.acquireSQL = `INSERT INTO ` + t + ` AS l (name, token, lease, expires_at) VALUES ($1, 1, $2, ` + expiresAt + `)
ON CONFLICT (name) DO UPDATE SET token = l.token + 1, lease = excluded.lease, expires_at = ` + expiresAt + `
WHERE l.expires_at <= clock_timestamp() AND l.token < $4
RETURNING token`
	l.heldSQL = `SELECT token, lease IS NULL, ` + remainingMS + ` FROM ` + t + ` WHERE name = $1`
	l.renewSQL = `UPDATE ` + t + ` SET expires_at = ` + expiresAt + `
WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()`
	l.releaseSQL = `WITH released AS (
    UPDATE ` + t + ` SET expires_at = '-infinity'
    WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()
    RETURNING name)
SELECT pg_notify($3, name) FROM released`
	l.inspectSQL = `SELECT token, ` + remainingMS + ` FROM ` + t + ` WHERE name = $1`
	l.listSQL = `SELECT name, token, ` + remainingMS + ` FROM ` + t + `
WHERE name >= $1 AND starts_with(name, $1) ORDER BY name LIMIT $2`

	fn := pgx.Identifier{base + "_keep_counters"}
	if schema != "" {
		fn = pgx.Identifier{schema, base + "_keep_counters"}
	}
	trig := func(s string) string { return pgx.Identifier{base + s}.Sanitize() }
	l.ddl = `CREATE TABLE IF NOT EXISTS ` + t + ` (
    name       text COLLATE "C" PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    lease      text        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION ` + fn.Sanitize() + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fence: % on %: lock rows hold token counters that must never go down or be deleted', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE OR REPLACE TRIGGER ` + trig("_no_lower") + ` BEFORE UPDATE ON ` + t + `
    FOR EACH ROW WHEN (NEW.token < OLD.token) EXECUTE FUNCTION ` + fn.Sanitize() + `();
CREATE OR REPLACE TRIGGER ` + trig("_no_delete") + ` BEFORE DELETE ON ` + t + `
    FOR EACH ROW EXECUTE FUNCTION ` + fn.Sanitize() + `();
CREATE OR REPLACE TRIGGER ` + trig("_no_truncate") + ` BEFORE TRUNCATE ON ` + t + `
    FOR EACH STATEMENT EXECUTE FUNCTION ` + fn.Sanitize() + `();`
	if len(base)+len("_keep_counters") > maxIdentLen {
		l.err = fmt.Errorf("postgres: %w", &fence.InvalidError{Field: "table", Value: base, Reason: fmt.Sprintf("is too long to name its trigger function (at most %d bytes)", maxIdentLen-len("_keep_counters"))})
	}
}

// CreateSchema creates the lock table, its trigger function and its triggers if
// they do not exist (the DDL of LockerSchema under the configured name), in one
// transaction. It returns fence.ErrUnavailable if the database cannot be reached.
func (l *Locker) CreateSchema(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	// Several statements in one Exec run as one implicit transaction (simple
	// protocol, since there are no arguments).
	// The DDL commits durably whatever the session's synchronous_commit.
	if _, err := l.pool.Exec(ctx, syncCommitSQL+";\n"+l.ddl); err != nil {
		return fmt.Errorf("postgres: create lock table %s: %w", l.table, dbErr(err))
	}
	return nil
}

// Acquire grants a lease on name for ttl, by the database's clock. By default it
// tries once; fence.WithWait makes it wait for a release (woken by NOTIFY) or
// for the holder's lease to expire.
//
// It returns a *fence.HeldError (fence.ErrNotAcquired) with the holder's time
// left if the lock stayed held, also matching ctx.Err() if ctx ended the wait;
// fence.ErrInvalid for a bad name or TTL; fence.ErrTokenExhausted when name's
// counter reached fence.MaxToken; ErrCorrupt if name's row was edited into
// something the Locker never writes (it then grants nothing); ErrSchema if the
// table is missing; fence.ErrUnavailable if the database cannot be reached (the
// grant may then have happened: the lease simply expires); and fence.ErrClosed
// after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	if err := l.check(name, ttl); err != nil {
		return nil, fmt.Errorf("postgres: acquire: %w", err)
	}
	o := driver.ApplyOptions(opts...)
	var (
		wake     chan struct{}
		deadline <-chan time.Time
	)
	if o.Wait > 0 {
		// Listen before the first try, so that a release right after it wakes us.
		wake = l.addWaiter(name)
		defer l.removeWaiter(name, wake)
		l.startListener(ctx)
		if o.Wait != fence.WaitForever {
			t := time.NewTimer(o.Wait)
			defer t.Stop()
			deadline = t.C
		}
	}
	id := driver.NewLeaseID()
	for {
		start := l.clock.Now()
		tok, held, err := l.try(ctx, name, id, ttl)
		if err == nil {
			return driver.NewLease(driver.LeaseConfig{
				Locker: l, Name: name, Token: tok, ID: id, TTL: ttl,
				Start: start, Clock: l.clock, AutoRenew: o.AutoRenew,
			}), nil
		}
		if held == nil {
			if cerr := ctx.Err(); cerr != nil && o.Wait > 0 {
				return nil, fmt.Errorf("postgres: acquire %q: %w: %w", name, fence.ErrNotAcquired, cerr)
			}
			return nil, fmt.Errorf("postgres: acquire %q: %w", name, err)
		}
		if o.Wait <= 0 {
			return nil, fmt.Errorf("postgres: acquire: %w", held)
		}
		// Poll at most every PollInterval and at most every TTL asked for, but
		// not more often than minPoll; wake exactly when the holder's lease
		// ends if that comes first.
		sleep := max(min(l.poll, ttl), minPoll)
		if held.ExpiresIn > 0 && held.ExpiresIn < sleep {
			sleep = held.ExpiresIn
		}
		t := time.NewTimer(sleep)
		select {
		case <-wake:
		case <-t.C:
		case <-deadline:
			t.Stop()
			return nil, fmt.Errorf("postgres: acquire: %w", held)
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("postgres: acquire: %w: %w", held, ctx.Err())
		case <-l.closing:
			t.Stop()
			return nil, fmt.Errorf("postgres: acquire %q: %w", name, fence.ErrClosed)
		}
		t.Stop()
	}
}

// syncCommitSQL raises the session's synchronous_commit from off to on for the
// current transaction only (set_config with is_local), so that the commit of
// the statement sent after it in the same pipeline waits for its WAL to be
// flushed. Any other setting (local, remote_write, on, remote_apply) is kept, so
// a stricter setting of the caller's is never weakened.
const syncCommitSQL = `SELECT set_config('synchronous_commit',
    CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on' ELSE current_setting('synchronous_commit') END, true)`

// durableQueryRow runs sql, returning one bigint column into dest, in one
// round trip with syncCommitSQL: both go in one pipeline ending in one Sync, so
// they share one implicit transaction, and the result is returned only after
// the commit is acknowledged (durable even if the role or database sets
// synchronous_commit = off). pgx.ErrNoRows means no row.
func (l *Locker) durableQueryRow(ctx context.Context, dest *int64, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(syncCommitSQL)
	b.Queue(sql, args...)
	br := l.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(dest)
	}
	// Close reads up to the Sync's answer: only then is the commit done.
	if cerr := br.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) && cerr != nil {
		err = cerr
	}
	return err
}

// durableExec is durableQueryRow for a statement whose command tag is wanted.
func (l *Locker) durableExec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(syncCommitSQL)
	b.Queue(sql, args...)
	br := l.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// try runs the acquire statement once. It returns the token if granted, or a
// *fence.HeldError (with err set too) if the lock is held, or another error.
func (l *Locker) try(ctx context.Context, name, id string, ttl time.Duration) (fence.Token, *fence.HeldError, error) {
	for attempt := 1; ; attempt++ {
		var tok int64
		err := l.durableQueryRow(ctx, &tok, l.acquireSQL, name, id, ttl.Milliseconds(), int64(fence.MaxToken))
		if err == nil {
			if tok < 1 || tok > int64(fence.MaxToken) {
				// Only a hand edit gets here (the CHECK allows up to int64): the
				// lease is ours but its token is not a valid one. Give it back.
				_ = l.release(ctx, name, id)
				return 0, nil, fmt.Errorf("%w: token %d is outside [1, %d]", ErrCorrupt, tok, uint64(fence.MaxToken))
			}
			return fence.Token(tok), nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, nil, dbErr(err)
		}
		// Not granted: held, exhausted, or a row edited by hand.
		var (
			token     *int64
			leaseNull bool
			leftMS    *int64
		)
		err = l.pool.QueryRow(ctx, l.heldSQL, name).Scan(&token, &leaseNull, &leftMS)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Deleted since (the triggers were dropped): the insert will win.
		case err != nil:
			return 0, nil, dbErr(err)
		case token == nil || leaseNull || leftMS == nil:
			return 0, nil, fmt.Errorf("%w: NULL token, lease or expires_at in the lock row; refusing to grant", ErrCorrupt)
		case *leftMS < 0 || tooFar(*leftMS):
			return 0, nil, fmt.Errorf("%w: the lock row expires more than %v from now; refusing to grant", ErrCorrupt, fence.MaxTTL)
		case *leftMS > 0:
			h := &fence.HeldError{Name: name, ExpiresIn: time.Duration(*leftMS) * time.Millisecond}
			return 0, h, h
		case *token >= int64(fence.MaxToken):
			return 0, nil, fmt.Errorf("counter at %d: %w", *token, fence.ErrTokenExhausted)
		}
		// Free by now (released or expired between the two statements): again.
		if attempt == maxFenceAttempts {
			h := &fence.HeldError{Name: name}
			return 0, h, h
		}
	}
}

// Renew extends the lease name/leaseID to ttl from now by the database's clock.
// It returns fence.ErrNotHeld if that lease expired, was released or never
// existed (a newer holder's lease is never touched), fence.ErrInvalid for bad
// arguments, fence.ErrUnavailable if the database cannot be reached, and
// fence.ErrClosed after Close.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := l.check(name, ttl); err != nil {
		return fmt.Errorf("postgres: renew: %w", err)
	}
	if err := driver.ValidateLeaseID(leaseID); err != nil {
		return fmt.Errorf("postgres: renew %q: %w", name, err)
	}
	tag, err := l.durableExec(ctx, l.renewSQL, name, leaseID, ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("postgres: renew %q: %w", name, dbErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: renew %q: %w", name, fence.ErrNotHeld)
	}
	return nil
}

// Release ends the lease name/leaseID and notifies waiters, in one statement.
// It returns fence.ErrNotHeld if that lease is no longer held (so a retried
// release is harmless), fence.ErrInvalid for bad arguments,
// fence.ErrUnavailable if the database cannot be reached, and fence.ErrClosed
// after Close. The lock row keeps its token.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := l.check(name, fence.MinTTL); err != nil {
		return fmt.Errorf("postgres: release: %w", err)
	}
	if err := driver.ValidateLeaseID(leaseID); err != nil {
		return fmt.Errorf("postgres: release %q: %w", name, err)
	}
	if err := l.release(ctx, name, leaseID); err != nil {
		return fmt.Errorf("postgres: release %q: %w", name, err)
	}
	return nil
}

func (l *Locker) release(ctx context.Context, name, leaseID string) error {
	tag, err := l.durableExec(ctx, l.releaseSQL, name, leaseID, l.channel)
	if err != nil {
		return dbErr(err)
	}
	if tag.RowsAffected() == 0 {
		return fence.ErrNotHeld
	}
	return nil
}

// Inspect returns the state of lock name by the database's clock; a lock never
// acquired is reported with Held false and LastToken 0. It returns
// fence.ErrInvalid for a bad name, ErrCorrupt for a row edited by hand,
// fence.ErrUnavailable if the database cannot be reached and fence.ErrClosed
// after Close.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := l.check(name, fence.MinTTL); err != nil {
		return fence.LockInfo{}, fmt.Errorf("postgres: inspect: %w", err)
	}
	var token, leftMS *int64
	err := l.pool.QueryRow(ctx, l.inspectSQL, name).Scan(&token, &leftMS)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.LockInfo{Name: name}, nil
	}
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("postgres: inspect %q: %w", name, dbErr(err))
	}
	info, err := lockInfo(name, token, leftMS)
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("postgres: inspect %q: %w", name, err)
	}
	return info, nil
}

// List returns the locks whose names start with prefix, held or not, in byte
// order of their names, at most limit of them (DefaultListLimit if limit <= 0).
// It returns the errors of Inspect.
func (l *Locker) List(ctx context.Context, prefix string, limit int) ([]fence.LockInfo, error) {
	if err := l.usable(); err != nil {
		return nil, fmt.Errorf("postgres: list: %w", err)
	}
	if len(prefix) > fence.MaxNameLen {
		return nil, fmt.Errorf("postgres: list: %w", driver.ValidateName(prefix))
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	rows, err := l.pool.Query(ctx, l.listSQL, prefix, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, dbErr(err))
	}
	defer rows.Close()
	var out []fence.LockInfo
	for rows.Next() {
		var (
			name          string
			token, leftMS *int64
		)
		if err := rows.Scan(&name, &token, &leftMS); err != nil {
			return nil, fmt.Errorf("postgres: list %q: %w", prefix, dbErr(err))
		}
		info, err := lockInfo(name, token, leftMS)
		if err != nil {
			return nil, fmt.Errorf("postgres: list %q: lock %q: %w", prefix, name, err)
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, dbErr(err))
	}
	return out, nil
}

func lockInfo(name string, token, leftMS *int64) (fence.LockInfo, error) {
	if token == nil || leftMS == nil || *token < 1 || *token > int64(fence.MaxToken) || *leftMS < 0 || tooFar(*leftMS) {
		return fence.LockInfo{}, fmt.Errorf("%w: NULL or out-of-range token or expiry in the lock row", ErrCorrupt)
	}
	info := fence.LockInfo{Name: name, LastToken: fence.Token(*token)}
	if *leftMS > 0 {
		info.Held, info.Token, info.ExpiresIn = true, fence.Token(*token), time.Duration(*leftMS)*time.Millisecond
	}
	return info, nil
}

// tooFar reports whether a lease's time left (in ms) exceeds what any grant
// gives, with a minute of slack: only a hand edit sets such an expiry.
func tooFar(leftMS int64) bool {
	return leftMS > (fence.MaxTTL + time.Minute).Milliseconds()
}

// check validates the Locker's state and a name and TTL.
func (l *Locker) check(name string, ttl time.Duration) error {
	if err := l.usable(); err != nil {
		return err
	}
	if err := driver.ValidateName(name); err != nil {
		return err
	}
	return driver.ValidateTTL(ttl)
}

// usable returns the Locker's option error, or fence.ErrClosed after Close.
func (l *Locker) usable() error {
	if l.err != nil {
		return l.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fence.ErrClosed
	}
	return nil
}

// Close stops the Locker's listener and makes waiting Acquires return
// fence.ErrClosed. Leases already granted stay held at the database until they
// expire; Renew and Release then return fence.ErrClosed. Close does not close the
// pool. It always returns nil; a second Close does nothing.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closing)
	started, stop := l.started, l.stop
	l.mu.Unlock()
	if started {
		stop()
		<-l.done
	}
	return nil
}
