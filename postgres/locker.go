package postgres

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
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

// LockerSchema is the DDL of the lock table under its default name (see
// Locker.CreateSchema, which uses the configured name). One row per lock name
// holds the name's token counter, which only goes up, and its current lease:
//
//   - name is the primary key, in the "C" collation so that List's prefix scan
//     uses the index and sorts by bytes. It is the only index needed.
//   - A released lock keeps its row and token; its expires_at is -infinity.
//   - owner is the current lease's owner (fence.WithOwner), empty for none; a
//     release or revoke clears it. The ALTER TABLE adds it to a table made by
//     an earlier version's DDL, which had none: its rows get an empty owner.
//   - A row whose lease is empty holds semaphore permits (fence.WithLimit, of
//     limit sem_limit) or shared leases (shared): holders is the jsonb array
//     of their leases, and expires_at the last of their expiries, so that a
//     lock's acquire is held while any of them is live. waiter_until is the end
//     of the record of an exclusive acquire waiting for shared holders, which
//     holds off new shared acquires. The ALTER TABLE adds these columns to a
//     table made by an earlier version's DDL (instantly: constant defaults).
//   - The trigger refuses to lower a token or delete a row (by hand or by a
//     bug): either would let tokens repeat.
const LockerSchema = `CREATE TABLE IF NOT EXISTS fence_locks (
    name         text COLLATE "C" PRIMARY KEY,
    token        bigint      NOT NULL CHECK (token > 0),
    lease        text        NOT NULL,
    expires_at   timestamptz NOT NULL,
    owner        text        NOT NULL DEFAULT '',
    sem_limit    integer     NOT NULL DEFAULT 0,
    shared       boolean     NOT NULL DEFAULT false,
    holders      jsonb,
    waiter_until timestamptz NOT NULL DEFAULT '-infinity'
);
ALTER TABLE fence_locks ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS sem_limit integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS shared boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS holders jsonb,
    ADD COLUMN IF NOT EXISTS waiter_until timestamptz NOT NULL DEFAULT '-infinity';
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
	// also the LISTEN/NOTIFY channel of releases and revokes, and that name with
	// ":watch" appended the channel of grants (see Locker.Watch).
	Table string
	// PollInterval bounds a waiter's sleep when no notification comes (a lost
	// LISTEN connection, a lock that expired rather than being released); it is
	// further bounded by the TTL asked for. Default DefaultPollInterval.
	PollInterval time.Duration
	// Clock measures the leases' local deadlines and Acquire's wait and sleeps.
	// Default driver.SystemClock. Expiry at the database is always judged by the
	// database's clock.
	Clock driver.Clock
}

// Locker is a fence.Locker on PostgreSQL. Each lock name has one row holding
// its token counter and current lease; expiry is judged by the database's clock,
// so the clients' clocks do not matter. Acquire is one statement that grants the
// lock only if its lease expired and advances the counter in the same row, so a
// token is never issued twice and, the table being durable, survives restarts
// and crashes of PostgreSQL: Acquire, Renew, Release and Revoke commit durably
// even when the session's synchronous_commit is off (see the package doc).
// Release and Revoke notify waiters through LISTEN/NOTIFY, on one connection per
// Locker shared by all its waiters and watchers; waiters also wake when the
// holder's lease would expire, and poll at least every PollInterval. Grants
// notify watchers too, on a channel of their own.
//
// Semaphores (fence.WithLimit) and shared locks (fence.WithShared) live in the
// same row, with the same counter: every grant of any kind is one statement on
// that row, so PostgreSQL's row lock orders concurrent grants, which never
// exceed the limit or share a slot.
//
// Locker implements fence.Locker, fence.Inspector, fence.Revoker,
// fence.Watcher and fence.FeatureLocker. It is safe for concurrent use. Close it to stop its listener;
// it does not close the pool.
type Locker struct {
	pool    *pgxpool.Pool
	table   string   // quoted
	channel string   // of releases and revokes, unquoted, as pg_notify takes it
	watchCh string   // of grants (channel + ":watch"), unquoted
	listen  []string // the LISTEN statements, the release channel's last
	poll    time.Duration
	clock   driver.Clock
	engine  driver.Engine
	err     error // a bad option, without the "postgres:" of the method's error

	acquireSQL, heldSQL, renewSQL, releaseSQL, revokeSQL, inspectSQL, listSQL, ddl string
	multiAcquireSQL, multiRenewSQL, multiReleaseSQL, markWaiterSQL                 string

	closeOnce sync.Once
	closing   chan struct{} // closed by Close
	ready     chan struct{} // closed once the first LISTEN succeeded
	readyOnce sync.Once
	done      chan struct{} // closed when the listener goroutine returned

	waiters  driver.Watchers // Acquire calls waiting for a release
	watchers driver.Watchers // Watch subscriptions

	mu   sync.Mutex
	stop context.CancelFunc // stops the listener goroutine; nil until it starts
}

var (
	_ fence.Locker    = (*Locker)(nil)
	_ fence.Inspector = (*Locker)(nil)
	_ fence.Revoker   = (*Locker)(nil)
	_ fence.Watcher   = (*Locker)(nil)

	_ fence.FeatureLocker = (*Locker)(nil)
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
	}
	// The engine's fallback poll is the longest sleep try asks for.
	l.engine = driver.Engine{
		Backend: "postgres", Locker: l, Clock: o.Clock, Poll: max(o.PollInterval, minPoll), Closed: l.closing,
		Features: fence.Features{Semaphores: true, Shared: true},
	}
	var err error
	l.table, err = quoteIdent("table", o.Table, true)
	if inv := (*fence.InvalidError)(nil); errors.As(err, &inv) {
		err = inv // the methods name the package
	}
	if err == nil && pool == nil {
		err = fmt.Errorf("nil pool: %w", fence.ErrInvalid)
	}
	if l.err = err; err != nil {
		return l
	}
	schema, base := "", o.Table
	for i := len(o.Table) - 1; i >= 0; i-- {
		if o.Table[i] == '.' {
			schema, base = o.Table[:i], o.Table[i+1:]
			break
		}
	}
	l.channel, l.watchCh = base, base+":watch"
	// The release channel last, on its own: once pg_stat_activity shows the
	// statement an older version ran, both channels are listened to.
	l.listen = []string{"LISTEN " + pgx.Identifier{l.watchCh}.Sanitize(), "LISTEN " + pgx.Identifier{base}.Sanitize()}
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
	// A grant notifies watchers on $6 in the same statement: NOTIFY is delivered
	// at commit, so only a grant that committed is announced.
	l.acquireSQL = `WITH granted AS (
    INSERT INTO ` + t + ` AS l (name, token, lease, expires_at, owner) VALUES ($1, 1, $2, ` + expiresAt + `, $5)
    ON CONFLICT (name) DO UPDATE SET token = l.token + 1, lease = excluded.lease, expires_at = ` + expiresAt + `, owner = excluded.owner,
        holders = NULL, waiter_until = '-infinity'
    WHERE l.expires_at <= clock_timestamp() AND l.token < $4
    RETURNING token, name)
SELECT token FROM granted, pg_notify($6, name)`
	l.heldSQL = `SELECT token, lease IS NULL, ` + remainingMS + `, ` + multiCols + ` FROM ` + t + ` WHERE name = $1`
	l.renewSQL = `UPDATE ` + t + ` SET expires_at = ` + expiresAt + `
WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()`
	// Release and Revoke end an unexpired lease and notify waiters (NOTIFY is
	// delivered at commit); the row keeps its token.
	end := func(lease, channel string) string {
		return `WITH ended AS (
    UPDATE ` + t + ` SET expires_at = '-infinity', owner = ''
    WHERE name = $1` + lease + ` AND expires_at > clock_timestamp()
    RETURNING name)
SELECT pg_notify(` + channel + `, name) FROM ended`
	}
	l.releaseSQL = end(" AND lease = $2", "$3")
	l.revokeSQL = end("", "$2")
	l.inspectSQL = `SELECT token, ` + remainingMS + `, owner, ` + multiCols + ` FROM ` + t + ` WHERE name = $1`
	// $3 true lists every row; false only those with a lease unexpired by the
	// database's clock (a semaphore's or shared lock's expires_at follows its last
	// holder, so it is live while any holder is).
	l.listSQL = `SELECT name, token, ` + remainingMS + `, owner, ` + multiCols + ` FROM ` + t + `
WHERE name >= $1 AND starts_with(name, $1) AND ($3 OR expires_at > clock_timestamp())
ORDER BY name LIMIT $2`

	l.buildMultiSQL()

	fn := pgx.Identifier{base + "_keep_counters"}
	if schema != "" {
		fn = pgx.Identifier{schema, base + "_keep_counters"}
	}
	trig := func(s string) string { return pgx.Identifier{base + s}.Sanitize() }
	// LockerSchema under the configured names; longer names first, so that the
	// function and the triggers are not taken for the table.
	l.ddl = strings.NewReplacer(
		"fence_locks_keep_counters", fn.Sanitize(),
		"fence_locks_no_lower", trig("_no_lower"),
		"fence_locks_no_delete", trig("_no_delete"),
		"fence_locks_no_truncate", trig("_no_truncate"),
		"fence_locks", t,
	).Replace(LockerSchema)
	if len(base)+len("_keep_counters") > maxIdentLen {
		l.err = &fence.InvalidError{Field: "table", Value: base, Reason: fmt.Sprintf("is too long to name its trigger function (at most %d bytes)", maxIdentLen-len("_keep_counters"))}
	}
}

// CreateSchema creates the lock table, its trigger function and its triggers if
// they do not exist (the DDL of LockerSchema under the configured name), in one
// transaction. On a lock table made by an earlier version it adds the owner
// column and those of semaphores and shared locks, keeping every row (tokens
// and held leases). It returns fence.ErrUnavailable if the database cannot be reached.
func (l *Locker) CreateSchema(ctx context.Context) error {
	if l.err != nil {
		return fmt.Errorf("postgres: create lock table: %w", l.err)
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
// tries once; fence.WithWait makes it wait for a release (woken by NOTIFY), for
// the holder's lease to expire, or at most PollInterval (and at most ttl).
//
// With fence.WithLimit(n) it grants a permit of a semaphore of n, in the
// lowest slot no live permit has; with fence.WithShared a shared lease, unless
// an exclusive acquire is waiting for shared holders to leave (it records
// itself in the row, for the smaller of its TTL and its wait left).
//
// It returns a *fence.HeldError (fence.ErrNotAcquired) with the holder's time
// left if the lock stayed held, also matching ctx.Err() if ctx ended the wait;
// a *fence.LimitError (fence.ErrInvalid) if the live leases have another limit
// (a lock or a shared lease counts as 1); fence.ErrInvalid for a bad name, TTL
// or option; fence.ErrTokenExhausted when
// name's counter reached fence.MaxToken; ErrCorrupt if name's row was edited into
// something the Locker never writes (it then grants nothing); ErrSchema if the
// table is missing; fence.ErrUnavailable if the database cannot be reached (the
// grant may then have happened: the lease simply expires); and fence.ErrClosed
// after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	var wake <-chan struct{} // this call's NOTIFY wake-up, once it waits
	wctx, stopWake := context.WithCancel(ctx)
	defer stopWake() // ends the wake-up's subscription
	return l.engine.Acquire(ctx, name, ttl, opts, func(ctx context.Context, r *driver.Request) (driver.Result, error) {
		if l.err != nil {
			return driver.Result{}, l.err
		}
		if r.Waiting && wake == nil {
			// Listen before the first look, so that a release right after it wakes us.
			wake, _ = l.waiters.Subscribe(wctx, r.Name) // never fails
			l.startListener(ctx)
		}
		return l.try(ctx, r, wake)
	})
}

// syncCommitSQL raises the session's synchronous_commit from off to on for the
// current transaction only (set_config with is_local), so that the commit of
// the statement sent after it in the same pipeline waits for its WAL to be
// flushed. Any other setting (local, remote_write, on, remote_apply) is kept, so
// a stricter setting of the caller's is never weakened.
const syncCommitSQL = `SELECT set_config('synchronous_commit',
    CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on' ELSE current_setting('synchronous_commit') END, true)`

// durable runs sql in one round trip with syncCommitSQL, and read reads sql's
// result: both go in one pipeline ending in one Sync, so they share one implicit
// transaction, and durable returns only after the commit is acknowledged
// (durable even if the role or database sets synchronous_commit = off). It
// returns pgx's error (pgx.ErrNoRows if read found no row).
func (l *Locker) durable(ctx context.Context, read func(pgx.BatchResults) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(syncCommitSQL)
	b.Queue(sql, args...)
	br := l.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = read(br)
	}
	// Close reads up to the Sync's answer: only then is the commit done.
	if cerr := br.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) && cerr != nil {
		err = cerr
	}
	return err
}

// durableExec runs sql durably and returns the number of rows it affected, or
// dbErr's error.
func (l *Locker) durableExec(ctx context.Context, sql string, args ...any) (int64, error) {
	var tag pgconn.CommandTag
	err := l.durable(ctx, func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	}, sql, args...)
	return tag.RowsAffected(), dbErr(err)
}

// try runs the acquire statement once, under r.ID. A grant's Start is when the
// statement was sent; a held lock's Result wakes on wake, at the holder's expiry,
// or after the fallback poll: PollInterval, at most the TTL asked for, at least
// minPoll.
func (l *Locker) try(ctx context.Context, r *driver.Request, wake <-chan struct{}) (driver.Result, error) {
	held := func(left time.Duration) driver.Result {
		sleep := max(min(l.poll, r.TTL), minPoll)
		if left > 0 && left < sleep {
			sleep = left
		}
		return driver.Result{ExpiresIn: left, Wake: wake, Retry: sleep}
	}
	multi := r.Options.Limit > 0 || r.Options.Shared
	id, most := r.ID, r.Options.Limit // the lease id, and the most live leases of a multi grant
	if multi {
		id = multiPrefix + r.ID
	}
	if r.Options.Shared {
		most = fence.MaxLimit
	}
	start := l.clock.Now()
	for attempt := 1; ; attempt++ {
		var (
			tok  int64
			slot int
			err  error
		)
		if multi {
			err = l.durable(ctx, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&tok, &slot) },
				l.multiAcquireSQL, r.Name, id, r.TTL.Milliseconds(), int64(fence.MaxToken), r.Options.Owner, l.watchCh,
				r.Options.Limit, r.Options.Shared, most)
		} else {
			err = l.durable(ctx, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&tok) },
				l.acquireSQL, r.Name, id, r.TTL.Milliseconds(), int64(fence.MaxToken), r.Options.Owner, l.watchCh)
		}
		if err == nil {
			if tok < 1 || tok > int64(fence.MaxToken) {
				// Only a hand edit gets here (the CHECK allows up to int64): the
				// lease is ours but its token is not a valid one. Give it back.
				_ = l.release(ctx, r.Name, id)
				return driver.Result{}, fmt.Errorf("%w: token %d is outside [1, %d]", ErrCorrupt, tok, uint64(fence.MaxToken))
			}
			res := driver.Result{Token: fence.Token(tok), Start: start, Slot: slot}
			if multi {
				res.ID = id
			}
			return res, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return driver.Result{}, dbErr(err)
		}
		// Not granted: held, exhausted, or a row edited by hand.
		var (
			token     *int64
			leaseNull bool
			leftMS    *int64
			k         rowKind
		)
		err = l.pool.QueryRow(ctx, l.heldSQL, r.Name).Scan(append([]any{&token, &leaseNull, &leftMS}, k.dest()...)...)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Deleted since (the triggers were dropped): the insert will win.
		case err != nil:
			return driver.Result{}, dbErr(err)
		case token == nil || leaseNull || leftMS == nil:
			return driver.Result{}, fmt.Errorf("%w: NULL token, lease or expires_at in the lock row; refusing to grant", ErrCorrupt)
		case *leftMS < 0 || tooFar(*leftMS):
			return driver.Result{}, fmt.Errorf("%w: the lock row expires more than %v from now; refusing to grant", ErrCorrupt, fence.MaxTTL)
		default:
			live, err := k.live(*token, *leftMS, "")
			if err != nil {
				return driver.Result{}, err
			}
			d, err := driver.Decide(r, live, k.now(), k.waiterUntil())
			if err != nil {
				return driver.Result{}, err
			}
			if !d.Grant {
				res := held(d.ExpiresIn)
				if d.MarkWaiter {
					if err := l.markWaiter(ctx, r); err != nil {
						return driver.Result{}, err
					}
					res.Retry = min(res.Retry, d.Retry) // renew the record before it lapses
				}
				return res, nil
			}
			if *token >= int64(fence.MaxToken) {
				return driver.Result{}, fmt.Errorf("counter at %d: %w", *token, fence.ErrTokenExhausted)
			}
		}
		// Free by now (released or expired between the two statements): again.
		if attempt == maxFenceAttempts {
			return held(0), nil
		}
		start = l.clock.Now()
	}
}

// Renew extends the lease name/leaseID (a lock, a permit or a shared lease) to
// ttl from now by the database's clock; the name's other leases are untouched.
// It returns fence.ErrNotHeld if that lease expired, was released or never
// existed (a newer holder's lease is never touched), fence.ErrInvalid for bad
// arguments, fence.ErrUnavailable if the database cannot be reached, and
// fence.ErrClosed after Close.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := driver.ValidateLease(name, leaseID); err != nil {
		return fmt.Errorf("postgres: renew: %w", err)
	}
	err := fence.ValidateTTL(ttl)
	if err == nil {
		err = l.usable()
	}
	if err == nil {
		sql := l.renewSQL
		if isMulti(leaseID) {
			sql = l.multiRenewSQL
		}
		err = l.change(ctx, sql, name, leaseID, ttl.Milliseconds())
	}
	if err != nil {
		return fmt.Errorf("postgres: renew %q: %w", name, err)
	}
	return nil
}

// Release ends the lease name/leaseID (a lock, a permit or a shared lease; the
// name's other leases stay) and notifies waiters, in one statement.
// It returns fence.ErrNotHeld if that lease is no longer held (so a retried
// release is harmless), fence.ErrInvalid for bad arguments,
// fence.ErrUnavailable if the database cannot be reached, and fence.ErrClosed
// after Close. The lock row keeps its token.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := driver.ValidateLease(name, leaseID); err != nil {
		return fmt.Errorf("postgres: release: %w", err)
	}
	err := l.usable()
	if err == nil {
		err = l.release(ctx, name, leaseID)
	}
	if err != nil {
		return fmt.Errorf("postgres: release %q: %w", name, err)
	}
	return nil
}

// release runs the release statement: nil, fence.ErrNotHeld or the database's
// error.
func (l *Locker) release(ctx context.Context, name, leaseID string) error {
	sql := l.releaseSQL
	if isMulti(leaseID) {
		sql = l.multiReleaseSQL
	}
	return l.change(ctx, sql, name, leaseID, l.channel)
}

// Revoke ends the current unexpired lease on name (by the database's clock),
// whoever holds it, or every live permit or shared lease, and notifies
// waiters, in one durable statement: the leases it ends are those the row holds
// when the statement locks it, so a lease granted
// after a look at the lock is never ended by a revoke decided on that look. The
// revoked holder's Renew and Release then return fence.ErrNotHeld, and the next
// grant's token is higher. It returns fence.ErrNotHeld if no unexpired lease is
// held, fence.ErrInvalid for a bad name, fence.ErrUnavailable if the database
// cannot be reached, and fence.ErrClosed after Close.
func (l *Locker) Revoke(ctx context.Context, name string) error {
	if err := fence.ValidateName(name); err != nil {
		return fmt.Errorf("postgres: revoke: %w", err)
	}
	err := l.usable()
	if err == nil {
		err = l.change(ctx, l.revokeSQL, name, l.channel)
	}
	if err != nil {
		return fmt.Errorf("postgres: revoke %q: %w", name, err)
	}
	return nil
}

// change runs sql, a statement on one lease, durably: nil if it changed a row,
// fence.ErrNotHeld if none (the lease is no longer held), or dbErr's error.
func (l *Locker) change(ctx context.Context, sql string, args ...any) error {
	n, err := l.durableExec(ctx, sql, args...)
	if err == nil && n == 0 {
		err = fence.ErrNotHeld
	}
	return err
}

// Inspect returns the state of lock name by the database's clock; a lock never
// acquired is reported with Held false and LastToken 0. Live permits and shared
// leases are reported as driver.Info shapes them: Limit, Shared and Holders
// (slot, token, owner, time left), with Token, Owner and ExpiresIn of the
// highest token. It returns
// fence.ErrInvalid for a bad name, ErrCorrupt for a row edited by hand,
// fence.ErrUnavailable if the database cannot be reached and fence.ErrClosed
// after Close.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := fence.ValidateName(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("postgres: inspect: %w", err)
	}
	info, err := l.inspect(ctx, name)
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("postgres: inspect %q: %w", name, err)
	}
	return info, nil
}

// inspect is Inspect of a valid name, its errors not yet prefixed (Watch says
// "watch" where Inspect says "inspect").
func (l *Locker) inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := l.usable(); err != nil {
		return fence.LockInfo{}, err
	}
	var (
		token, leftMS *int64
		owner         *string
		k             rowKind
	)
	err := l.pool.QueryRow(ctx, l.inspectSQL, name).Scan(append([]any{&token, &leftMS, &owner}, k.dest()...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.LockInfo{Name: name}, nil
	}
	if err != nil {
		return fence.LockInfo{}, dbErr(err)
	}
	return lockInfo(name, token, leftMS, owner, &k)
}

// Watch yields the state of name as Inspect reports it, then its state after
// each grant, release, expiry and revoke, in order (see fence.Watcher); a
// receiver that falls behind gets the latest state, never an older one.
//
// Changes are learned by LISTEN/NOTIFY on the Locker's one listening
// connection, the one its waiters share, however many names are watched: a
// grant notifies the channel of watchers (the lock table's name with ":watch"),
// a release or revoke the channel of waiters, each in the statement that
// changes the row, so only a committed change is announced. An expiry sends
// nothing: the watch reads the lock again when the holder's time left, as the
// database reported it, runs out. A lost listening connection is recovered by
// the listener, which reconnects with backoff and then signals every watcher to
// read its lock again, so a change made while it was away is seen once it is
// back; meanwhile, and for a notification lost any other way, each watch reads
// its lock every driver.DefaultWatchPoll. Older versions of this package grant
// without notifying: during a rolling upgrade a watcher sees their grants only
// at that poll (or at the lock's next notified change); their releases and
// revokes notify as before.
//
// It yields an error matching fence.ErrInvalid for a bad name or option, or
// fence.ErrClosed after Close, and ends; while the database cannot be reached
// it yields errors matching fence.ErrUnavailable and goes on trying. Errors read
// "postgres: watch NAME: ...".
func (l *Locker) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	return l.engine.Watch(ctx, name, l.subscribe, l.inspect)
}

// List returns the locks opts selects (see fence.Inspector), in byte order of
// their names, at most opts.Limit of them (fence.DefaultListLimit if <= 0): by
// default the rows whose lease is unexpired by the database's clock, chosen in
// the query, with opts.All every row (every name acquired or healed once). It
// returns fence.ErrInvalid for a prefix longer than a name, and otherwise the
// errors of Inspect.
func (l *Locker) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	prefix := opts.Prefix
	if len(prefix) > fence.MaxNameLen {
		return nil, fmt.Errorf("postgres: list: %w", fence.ValidateName(prefix))
	}
	if err := l.usable(); err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, err)
	}
	rows, err := l.pool.Query(ctx, l.listSQL, prefix, driver.ListLimit(opts.Limit), opts.All)
	if err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, dbErr(err))
	}
	defer rows.Close()
	var out []fence.LockInfo
	for rows.Next() {
		var (
			name          string
			token, leftMS *int64
			owner         *string
			k             rowKind
		)
		if err := rows.Scan(append([]any{&name, &token, &leftMS, &owner}, k.dest()...)...); err != nil {
			return nil, fmt.Errorf("postgres: list %q: %w", prefix, dbErr(err))
		}
		info, err := lockInfo(name, token, leftMS, owner, &k)
		if err != nil {
			return nil, fmt.Errorf("postgres: list %q: lock %q: %w", prefix, name, err)
		}
		// A holder may expire between the WHERE and the clock reading that judges
		// it: the lock is then free, and left out as the WHERE would have.
		if driver.Listed(info, opts) {
			out = append(out, info)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, dbErr(err))
	}
	return out, nil
}

// lockInfo returns the state a lock row's columns describe (the owner only while
// held; the holders of a semaphore or shared lock as driver.Info shapes them),
// or ErrCorrupt for values the Locker never writes.
func lockInfo(name string, token, leftMS *int64, owner *string, k *rowKind) (fence.LockInfo, error) {
	if token == nil || leftMS == nil || owner == nil || *token < 1 || *token > int64(fence.MaxToken) || *leftMS < 0 || tooFar(*leftMS) {
		return fence.LockInfo{}, fmt.Errorf("%w: NULL or out-of-range token or expiry, or NULL owner, in the lock row", ErrCorrupt)
	}
	live, err := k.live(*token, *leftMS, *owner)
	if err != nil {
		return fence.LockInfo{}, err
	}
	return driver.Info(name, live, fence.Token(*token), k.now()), nil
}

// tooFar reports whether a lease's time left (in ms) exceeds what any grant
// gives, with a minute of slack: only a hand edit sets such an expiry.
func tooFar(leftMS int64) bool {
	return leftMS > (fence.MaxTTL + time.Minute).Milliseconds()
}

// usable returns the Locker's option error, or fence.ErrClosed after Close.
func (l *Locker) usable() error {
	if l.err != nil {
		return l.err
	}
	select {
	case <-l.closing:
		return fence.ErrClosed
	default:
		return nil
	}
}

// Close stops the Locker's listener and makes waiting Acquires return
// fence.ErrClosed. Leases already granted stay held at the database until they
// expire; Renew and Release then return fence.ErrClosed. Close does not close the
// pool. It always returns nil; a second Close does nothing.
func (l *Locker) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		close(l.closing) // under mu: startListener starts no listener after it
		stop := l.stop
		l.mu.Unlock()
		if stop != nil {
			stop()
			<-l.done
		}
	})
	return nil
}
