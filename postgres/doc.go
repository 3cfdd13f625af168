// Package postgres makes PostgreSQL enforce fencing tokens and hand them out.
//
// It has three guards and a lock service, all on pgx v5:
//
//   - [Guard], the resource fence: a fences table with one row per resource
//     (lock name, highest token, lease). [Guard.FenceTx] advances that row
//     inside the caller's own transaction, so every write of the transaction is
//     fenced together and committed with the fence or not at all; [Guard.Do]
//     wraps begin, FenceTx, your writes and commit. [Guard.Fence] advances the
//     fence without data, so a new holder fences off paused predecessors before
//     its first write. Use it for tables that have no fence column, and to stop
//     a stale holder from inserting new rows.
//   - [Row], the row fence: for a table whose rows carry fence columns,
//     [Row.Update] and [Row.Upsert] write values and fence in one conditional
//     statement.
//   - [KV], a fenced key-value table (a row fence on a table of its own); it
//     implements fence.KV, fence.Guard and fence.Purger, and, told its
//     Locker's table (KVOptions.LockTable), refuses tokens that Locker never
//     issued (see Fenced KV and issued tokens).
//   - [Locker], a fence.Locker whose lock rows keep the token counter and whose
//     expiry is judged by the database's clock; waiters and watchers are woken
//     by LISTEN/NOTIFY. It also makes semaphores and shared locks, fenced by
//     the same counter (see Semaphores and shared locks).
//
// Every guard applies fence.Admit's rule in SQL: a fence is accepted if its
// token is above the stored one, or equal under the same non-empty lease id, and
// only if its lock name is the stored one (tokens of different locks are not
// comparable). A refused write changed nothing and returns a
// *fence.StaleTokenError carrying the highest token seen, or a
// *fence.NamespaceError. The check and the write are one statement; only a
// refusal runs a second one, a SELECT that reads the fence that refused it
// (inside a transaction the first statement holds that row's lock).
//
// # Schema
//
// [Schema], [KVSchema] and [LockerSchema] are the DDL, and CreateSchema runs it
// under the configured table name. Locker.CreateSchema also upgrades a lock
// table made by an earlier version: it adds the owner column and the columns of
// semaphores and shared locks (sem_limit, shared, holders, waiter_until; ADD
// COLUMN IF NOT EXISTS with constant defaults, so without rewriting the table),
// keeping every row and held lease; until it has run, the new version's Acquire
// and Inspect return [ErrSchema]. The only index any
// statement needs is the primary key (or, for a Row, a unique index on its key column): every
// statement looks a row up by it, and ON CONFLICT arbitrates on it. A Row's
// fence columns should be NOT NULL with defaults meaning "never fenced" (see
// [Row.FenceColumnsDDL]); a NULL fence is reported as [ErrCorrupt], never
// written over.
//
// # The SQL each operation runs
//
// Guard.FenceTx, Guard.Fence and Guard.Do (after BEGIN, before your writes),
// with $1 resource, $2 lock name, $3 token, $4 lease id:
//
//	INSERT INTO "fence_resources" AS r (resource, name, token, lease) VALUES ($1, $2, $3, $4)
//	ON CONFLICT (resource) DO UPDATE SET token = excluded.token, lease = excluded.lease
//	WHERE (r.token = 0 OR (r.name = excluded.name AND (r.token < excluded.token
//	    OR (r.token = excluded.token AND excluded.lease <> '' AND r.lease = excluded.lease))))
//	RETURNING true
//
// A row returned means accepted. No row means refused: PostgreSQL still locks a
// conflicting row whose WHERE clause is false, so the fence cannot change until
// the transaction ends, and the guard reads it to say why:
//
//	SELECT name, token, lease FROM "fence_resources" WHERE resource = $1
//
// Row.Update, for Row{Table: "accounts", Key: "id", Columns: []string{"balance"}},
// with $1 key, $2-$4 the fence, $5... the values (zero rows affected runs the
// SELECT below to tell a missing row, fence.ErrNotFound, from a refusal):
//
//	UPDATE "accounts" SET "balance" = $5, "fence_name" = $2, "fence_token" = $3, "fence_lease" = $4
//	WHERE "id" = $1 AND ("fence_token" = 0 OR ("fence_name" = $2 AND ("fence_token" < $3
//	    OR ("fence_token" = $3 AND $4 <> '' AND "fence_lease" = $4))))
//
// Row.Upsert (Row.Fence is the same without the value columns; KV.Put is it on
// the KV's table, see Fenced KV and issued tokens):
//
//	INSERT INTO "accounts" AS r ("id", "fence_name", "fence_token", "fence_lease", "balance")
//	VALUES ($1, $2, $3, $4, $5)
//	ON CONFLICT ("id") DO UPDATE SET "balance" = excluded."balance", "fence_name" = excluded."fence_name",
//	    "fence_token" = excluded."fence_token", "fence_lease" = excluded."fence_lease"
//	WHERE (r."fence_token" = 0 OR (r."fence_name" = excluded."fence_name" AND (r."fence_token" < excluded."fence_token"
//	    OR (r."fence_token" = excluded."fence_token" AND excluded."fence_lease" <> '' AND r."fence_lease" = excluded."fence_lease"))))
//	RETURNING true
//
// and on a refusal:
//
//	SELECT "fence_name", "fence_token", "fence_lease" FROM "accounts" WHERE "id" = $1
//
// Locker.Acquire, with $1 name, $2 the new lease id, $3 the TTL in ms, $4
// fence.MaxToken, $5 the owner (fence.WithOwner, empty for none), $6 the watch
// channel ("fence_locks:watch"); the token counter lives in the lock row and is
// advanced in the statement that grants the lease, which also notifies watchers
// (see Watching):
//
//	WITH granted AS (
//	    INSERT INTO "fence_locks" AS l (name, token, lease, expires_at, owner)
//	    VALUES ($1, 1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond', $5)
//	    ON CONFLICT (name) DO UPDATE SET token = l.token + 1, lease = excluded.lease,
//	        expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond', owner = excluded.owner
//	    WHERE l.expires_at <= clock_timestamp() AND l.token < $4
//	    RETURNING token, name)
//	SELECT token FROM granted, pg_notify($6, name)
//
// When no row comes back the lock is held (or exhausted, or edited by hand), and
// a SELECT of the row's token and time left says which; the time left becomes
// the *fence.HeldError's ExpiresIn and a waiter's wake-up timer. Renew:
//
//	UPDATE "fence_locks" SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
//	WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()
//
// Release keeps the row and its token, clears the owner and notifies waiters in
// the same statement (NOTIFY is delivered at commit):
//
//	WITH ended AS (
//	    UPDATE "fence_locks" SET expires_at = '-infinity', owner = ''
//	    WHERE name = $1 AND lease = $2 AND expires_at > clock_timestamp()
//	    RETURNING name)
//	SELECT pg_notify($3, name) FROM ended
//
// Locker.Revoke is the same statement without the lease id (so $2 is the
// channel): it ends whatever unexpired lease the row holds when the UPDATE locks
// it, never one granted after a look at the lock, and wakes waiters as a release
// does.
//
// # Fenced KV and issued tokens
//
// KV.Put and KV.Fence are the upsert above on the KV's table, with the new row
// proposed by a SELECT whose WHERE clause is P9's check (true without a lock
// table), and KV.Delete an UPDATE that sets the value to NULL and the fence to f:
//
//	INSERT INTO "fence_kv" AS r (key, fence_name, fence_token, fence_lease, value)
//	SELECT $1::text, $2::text, $3::bigint, $4::text, $5::bytea WHERE ISSUED
//	ON CONFLICT (key) DO UPDATE SET value = $5::bytea, fence_name = $2::text, ...
//	WHERE ADMIT
//	RETURNING true
//
//	UPDATE "fence_kv" AS r SET value = NULL, fence_name = $2::text, ...
//	WHERE r.key = $1::text AND r.value IS NOT NULL AND ADMIT AND ISSUED
//	RETURNING true
//
// With KVOptions.LockTable (what `fence serve --store postgres://` sets: the
// Locker's table), ISSUED reads the lock row of the fence's name in the same
// statement:
//
//	EXISTS (SELECT FROM "fence_locks" l WHERE l.name = $2::text AND l.token >= $3::bigint
//	    AND NOT ($4::text <> '' AND ((l.token = $3::bigint AND l.lease <> '' AND l.lease <> $4::text)
//	        OR EXISTS (SELECT FROM jsonb_array_elements(coalesce(l.holders, '[]')) h
//	            WHERE (h->>'t')::bigint = $3::bigint AND h->>'l' <> $4::text))))
//
// so a Put, Fence or Delete is refused, nothing written, with a
// *fence.UnissuedTokenError (fence.ErrUnissuedToken) when the name has no lock
// row (never granted), its counter (the last token issued) is below the token,
// or the non-empty lease id is not the one the row records for that token: the
// row's lease column while the token is the counter and the last grant was
// exclusive (kept after release), or a semaphore or shared holder with that
// token. An earlier exclusive grant's lease is no longer recorded, so its token
// is admitted with any lease id (the key's own fence still refuses an equal
// token under another lease once written). The counter never goes down (a
// trigger refuses it), so the check cannot turn false between the statement and
// its commit. When no row comes back, a SELECT of the lock row says whether P9
// refused, then the key's fence whether fence.Admit did, then a NULL value makes
// a Delete fence.ErrNotFound. Without a lock table the KV checks no issuance: it
// guards with the tokens of any lock.
//
// Delete keeps the row and its fence, so a stale writer is still refused and Get
// returns a nil value with the fence; Purge (fence.Purger) deletes the row,
// value and fence: the one way a key's fence goes back.
//
// # Semaphores and shared locks
//
// A permit (fence.WithLimit) or shared lease (fence.WithShared) lives in the
// name's one row, next to its counter, so a grant of any kind is still one
// statement on one row: concurrent grants queue on its row lock, and one that
// waited re-checks its condition on the row as the grant before it left it, so
// the limit is never exceeded and no slot is granted twice. Such a row has an
// empty lease (never a lease id), sem_limit the limit (0 for shared), shared,
// and holders, a jsonb array of {"l": lease id, "t": token, "s": slot, "e": expiry in µs
// since the epoch, "o": owner}; its expires_at is the last of their expiries. A
// lock's acquire, this version's or an older one's, is thus held while any
// permit is live, and a revoke (expires_at = -infinity) ends them all. The grant,
// with $7 the limit (0 for shared), $8 shared, $9 the most live leases (the
// limit, or fence.MaxLimit), the other parameters as for a lock:
//
//	WITH granted AS (
//	    INSERT INTO "fence_locks" AS l (name, token, lease, expires_at, owner, sem_limit, shared, holders)
//	    SELECT $1, 1, '', <n.e as timestamptz>, '', $7, $8, <[the new holder, token 1, slot 0]>
//	    FROM (SELECT <now + $3 ms, in µs> AS e) n
//	    ON CONFLICT (name) DO UPDATE SET token = l.token + 1, lease = '', owner = '', sem_limit = $7, shared = $8,
//	        (holders, expires_at) = (<the live holders and the new one, token l.token + 1,
//	            in the lowest slot in [0, $7) no live holder has; the last expiry>)
//	    WHERE l.token < $4 AND (NOT $8 OR l.waiter_until <= clock_timestamp())
//	        AND (l.expires_at <= clock_timestamp() OR (l.lease = '' AND l.sem_limit = $7 AND l.shared = $8
//	            AND <the number of live holders> < $9))
//	    RETURNING token, name, holders)
//	SELECT token, (holders->-1->>'s')::int FROM granted, pg_notify($6, name)
//
// (the elided parts are spelt out in the package's source, multi.go). A lock's acquire also resets
// holders and waiter_until. A permit's or shared lease's id starts with "m.", so
// Renew and Release pick the statement that updates its holder (and the row's
// expiry, the last of what is left) without a look at the row, and a lock's
// Renew and Release are the statements above, unchanged. A refused grant reads
// the row and applies driver.Decide to it: the *fence.HeldError's time left, a
// *fence.LimitError for another limit, and, for an exclusive acquire that waits
// for shared holders, a record in waiter_until (the later of the one there and
// now plus the smaller of its TTL and its wait left) that holds off new shared
// acquires until it ends or an exclusive grant clears it: writer preference. A
// release of one of several leases notifies waiters as a release of a lock
// does.
//
// An older binary on the upgraded table keeps working during a rolling upgrade:
// its acquire finds the name held while permits are live, its renew and release
// never match a permit (their lease is empty), and its revoke ends them all; the new
// binary takes the older one's grants for locks.
//
// # Clocks
//
// Lease expiry is judged by the database's clock only, so the clients' clocks
// do not matter. The Locker uses clock_timestamp() (the time the statement
// reaches that point), not now() (the start of the transaction): from inside a
// longer transaction now() lies in the past, so a lease counted from it could
// end before the holder's local deadline, which counts from when the holder sent
// the request. A step of the database server's clock moves every expiry with it.
//
// # Waiting
//
// Each Locker keeps one connection, taken out of the pool, that LISTENs on the
// channel named after the lock table, and dispatches each notification (its
// payload is the lock name) to that name's waiters. A waiter also wakes when the
// holder's lease would expire (the held lock's time left) and at least every
// LockerOptions.PollInterval (default 1s, and at most the TTL asked for), so a
// lost LISTEN connection or an expiry without release costs latency, never
// liveness. After the listener reconnects it wakes every waiter.
//
// # Watching
//
// [Locker.Watch] follows one lock's state (fence.Watcher) on the same listening
// connection, however many names are watched. A grant notifies the channel
// "fence_locks:watch" (the lock table's name with ":watch"), a release or revoke
// the waiters' channel "fence_locks", both with the lock name as payload and in
// the statement that changes the row, so only a committed change is announced
// and a waiter is never woken by a grant. An expiry sends nothing: the watch
// reads the lock again when the holder's time left runs out. When the listener
// reconnects it signals every watcher to read its lock again, so a change made
// while the connection was down is seen once it is back; and every watch reads
// its lock at least every driver.DefaultWatchPoll (5s), for a notification lost
// any other way. Versions before Watch grant without notifying: during a
// rolling upgrade their grants are seen at that poll (their releases and
// revokes notify as before).
//
// # Durability and hand edits
//
// Tokens and leases live in the lock table, so they survive restarts and crashes
// of PostgreSQL as committed data does, and the Locker makes sure its own commits
// are durable whatever the session's synchronous_commit (a role or database may
// set it to off for speed, and then a crash of the server loses the last
// commits: tokens would be issued again and held leases forgotten). Acquire,
// Renew, Release and Revoke send, in the same pipeline as their statement and so in one
// round trip and one implicit transaction,
//
//	SELECT set_config('synchronous_commit',
//	    CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on' ELSE current_setting('synchronous_commit') END, true)
//
// which raises off to on for that transaction only and keeps any other setting
// (local, remote_write, on, remote_apply), so a stricter one is never weakened.
// They return only after PostgreSQL acknowledged the commit. CreateSchema does
// the same for its DDL. The cost is the WAL flush the commit waits for, which
// is what synchronous_commit = on costs every other statement.
//
// Guards do not change the commit setting: the fence is checked and written in
// the caller's own transaction, with the caller's writes, so a fenced write is
// exactly as durable as the caller's commit makes it. With synchronous_commit =
// off an acknowledged fenced write can be lost in a crash together with its
// fence (never one without the other), and the fence is then back where the
// surviving commits left it: a holder of a token between the two may write again.
// If the write must survive, commit it with synchronous_commit on (SET LOCAL
// synchronous_commit = on in the transaction). KV.Put and KV.Fence, which commit
// their own transactions, follow the session's setting in the same way.
//
// The table's triggers refuse to lower a token, delete a lock row or truncate
// the table, since any of these would let a token be issued twice. A row edited into something the Locker never writes (a
// NULL or infinite expiry, an expiry beyond fence.MaxTTL) makes Acquire return
// [ErrCorrupt] and grant nothing; its holder's Renew returns fence.ErrNotHeld.
// A NULL owner, harmless to tokens, makes only Inspect and List return
// [ErrCorrupt].
//
// # Errors
//
// Errors wrap the fence sentinels (fence.ErrStaleToken, fence.ErrNamespace,
// fence.ErrInvalid, fence.ErrNotFound, fence.ErrNotAcquired, fence.ErrNotHeld,
// fence.ErrTokenExhausted, fence.ErrUnavailable, fence.ErrClosed) or this
// package's ([ErrSchema], [ErrConflict], [ErrCorrupt]); a database error stays
// in the chain as a *pgconn.PgError. pgx.ErrNoRows never escapes. Tokens are
// validated before any statement (0 and anything above fence.MaxToken, so well
// inside bigint, are fence.ErrInvalid), and identifiers in options must be ASCII
// letters, digits and underscores: they are quoted, and user data only ever
// travels as parameters.
package postgres
