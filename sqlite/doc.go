// Package sqlite makes a SQLite database enforce fencing tokens (fence's P2 and P3),
// with the pure-Go modernc.org/sqlite driver (driver name "sqlite", no cgo).
//
// Two patterns, both one statement per fenced write:
//
//   - Resource fence ([Guard]): a fences table (resource, name, token, lease) whose
//     row for a resource is inserted or advanced by [Guard.FenceTx] inside the
//     caller's own transaction, so every write of that transaction is fenced
//     together, inserts of new rows included. On an error the caller rolls back.
//     [Guard.Fence] advances the fence alone, so a new holder fences off a paused
//     predecessor before its first write.
//   - Row fence ([Row]): a table whose rows carry fence columns, written by
//     [Row.Update] (a conditional UPDATE; a missing row is fence.ErrNotFound, a
//     stale fence a *fence.StaleTokenError) or [Row.Upsert] (INSERT ... ON CONFLICT
//     DO UPDATE ... WHERE). [KV] is a ready-made fenced key-value table.
//
// # The SQL
//
// FenceTx runs, with T the fences table,
//
//	INSERT INTO T AS f (resource, name, token, lease) VALUES (?, ?, ?, ?)
//	ON CONFLICT (resource) DO UPDATE SET lease = excluded.lease, token = excluded.token
//	WHERE f.name = excluded.name AND (excluded.token > f.token
//	   OR (excluded.token = f.token AND excluded.lease <> '' AND excluded.lease = f.lease))
//	RETURNING 1
//
// which returns a row if it inserted or advanced the fence and none if the stored
// fence refused it; only then does a second statement (SELECT name, token, lease
// FROM T WHERE resource = ?) read the highest fence for the error. Row.Upsert is the
// same statement over the row's own columns, with the condition widened to
// f.fence_token = 0 OR ... so that rows that were never fenced (token 0, see
// Row.FenceColumnsDDL) admit any fence; Row.Update is
//
//	UPDATE T SET col1 = ?, ..., fence_name = ?, fence_lease = ?, fence_token = ?
//	WHERE key = ? AND (fence_token = 0 OR (fence_name = ? AND (? > fence_token
//	      OR (? = fence_token AND ? <> '' AND ? = fence_lease))))
//
// whose affected-row count (SQLite counts matched rows) tells written from not; a
// follow-up read tells a missing row from a stale one.
//
// # Concurrency: BEGIN IMMEDIATE
//
// SQLite has one writer at a time, which is what makes each check-and-write atomic.
// A transaction that starts with plain BEGIN reads first and takes the write lock
// only at its first write; if another connection wrote in between, SQLite fails it
// at once with SQLITE_BUSY (in WAL mode the busy timeout cannot help). [Open]
// therefore sets _txlock=immediate, so that every BeginTx issues BEGIN IMMEDIATE and
// waits (busy_timeout 10s) for the write lock up front, and WAL journaling, so that
// readers never block the writer. With another DSN, either do the same or keep
// writes on a single connection (db.SetMaxOpenConns(1)). A writer that still times
// out gets [ErrConflict]: roll back and retry.
//
// [Schema] is the fences table's DDL (a STRICT, WITHOUT ROWID table); its primary
// key on resource is the only index needed. Identifiers are validated and quoted,
// values always bound. Tokens of 0 or above fence.MaxToken are refused before any
// SQL with fence.ErrInvalid; a missing table or column or a NULL stored fence is
// [ErrSchema] with nothing written; a closed *sql.DB is fence.ErrClosed.
package sqlite
