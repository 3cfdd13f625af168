// Package postgres makes PostgreSQL enforce fencing tokens and hand them out,
// on pgx v5:
//
//   - [Guard], the resource fence: a fences table with one row per resource.
//     [Guard.FenceTx] advances that row inside the caller's own transaction, so
//     every write of the transaction is fenced together and committed with the
//     fence or not at all; [Guard.Do] wraps begin, FenceTx, your writes and
//     commit; [Guard.Fence] advances the fence alone, so a new holder fences off
//     paused predecessors before its first write.
//   - [Row], the row fence, for a table whose rows carry fence columns:
//     [Row.Update] and [Row.Upsert] write values and fence in one statement.
//   - [KV], a fenced key-value table: fence.KV, fence.Guard and fence.Purger.
//   - [Locker], a fence.Locker (with fence.Inspector, fence.Revoker,
//     fence.Watcher, semaphores and shared locks) whose lock rows keep the
//     token counter and whose expiry is judged by the database's clock.
//
// Start with CreateSchema (it creates the table if missing, and upgrades a lock
// table of an earlier version in place), then acquire and write:
//
//	locker := postgres.NewLocker(pool, nil) // pool: a *pgxpool.Pool
//	guard := postgres.NewGuard(pool, nil)
//	// locker.CreateSchema(ctx), guard.CreateSchema(ctx) once
//	lease, err := locker.Acquire(ctx, "reconcile", 30*time.Second, fence.WithWait(time.Minute))
//	err = guard.Do(ctx, "ledger", lease.Fence(), func(tx pgx.Tx) error { ... })
//
// # Contract
//
// Every guard applies fence.Admit's rule in one SQL statement: a fence is
// accepted if its token is above the stored one, or equal under the same
// non-empty lease id, and only under the stored lock name. A refused write
// changes nothing and returns a *fence.StaleTokenError carrying the highest
// token seen, or a *fence.NamespaceError. A guarded write is as durable as the
// caller's commit: with synchronous_commit = off a crash can lose it together
// with its fence, never one without the other.
//
// The Locker grants in one statement that advances the name's counter in the
// row it grants, so a token is never issued twice and survives restarts and
// crashes of PostgreSQL: Acquire, Renew, Release and Revoke commit durably even
// when the session's synchronous_commit is off. Expiry is judged by the
// database's clock (clock_timestamp()), so the clients' clocks do not matter; a
// step of the database server's clock moves every expiry with it. Waiters are
// woken by LISTEN/NOTIFY on one connection per Locker, when the holder's lease
// would expire, and at least every [LockerOptions].PollInterval, so a lost
// notification costs latency, never liveness. Watch reads a
// lock again at least every driver.DefaultWatchPoll.
//
// A KV told its Locker's table ([KVOptions].LockTable, as `fence serve --store
// postgres://` sets it) refuses, with a *fence.UnissuedTokenError and nothing
// written, a fence that Locker never issued (P9): a name never granted, a token
// above its counter, or a lease id that is not the one recorded for that token;
// and, with a *fence.LeaseRequiredError, a fence without a lease id whose token
// a live lease holds (stored without a lease, it would refuse that lease's own
// writes; once the lease ended, the token alone is admitted as fence.Admit
// admits it).
// Without a lock table the KV guards with the tokens of any lock. Delete keeps
// the key's fence (a stale writer is still refused); Purge removes value and
// fence, the one way a key's fence goes back.
//
// Semaphores (fence.WithLimit) and shared locks (fence.WithShared) live in the
// name's one row, next to its counter, so the limit is never exceeded and no
// slot is granted twice; an exclusive acquire waiting for shared holders holds
// off new shared acquires (writer preference). During a rolling upgrade an
// older binary sees the name held while permits are live.
//
// # Limits
//
//   - Tokens from 1 to fence.MaxToken (well inside bigint); others are
//     fence.ErrInvalid before any statement.
//   - Table and column names in options: ASCII letters, digits and
//     underscores ("schema.table" allowed); they are quoted, and user data only
//     travels as parameters. KV values up to [MaxValueLen].
//   - The only index any statement needs is the primary key (for a Row, a
//     unique index on its key column). A Row's fence columns should be NOT NULL
//     with defaults meaning "never fenced" ([Row.FenceColumnsDDL]).
//   - The lock table's triggers refuse to lower a token, delete a lock row or
//     truncate the table. A row edited into something the Locker never writes
//     makes Acquire return [ErrCorrupt] and grant nothing.
//
// # Errors
//
// Errors wrap the fence sentinels (fence.ErrStaleToken, fence.ErrNamespace,
// fence.ErrInvalid, fence.ErrNotFound, fence.ErrNotAcquired, fence.ErrNotHeld,
// fence.ErrTokenExhausted, fence.ErrUnissuedToken, fence.ErrLeaseRequired,
// fence.ErrUnavailable, fence.ErrClosed) or this package's: [ErrSchema] (a missing table or column,
// or a lock table not yet upgraded by CreateSchema), [ErrConflict] (roll back
// and retry), [ErrCorrupt] (a row edited by hand). A database error stays in
// the chain as a *pgconn.PgError; pgx.ErrNoRows never escapes.
//
// The SQL each operation runs, and why each is safe (clocks, waiting,
// watching, semaphores, durability, rolling upgrades), is in docs/postgres.md
// in the repository.
package postgres
