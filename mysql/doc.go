// Package mysql makes MariaDB and MySQL enforce fencing tokens (fence's P2 and P3 on
// a real database), with the go-sql-driver/mysql driver.
//
// Two patterns, both one statement per fenced write:
//
//   - Resource fence ([Guard]): a fences table (resource, name, token, lease) whose
//     row for a resource is inserted or advanced by [Guard.FenceTx] inside the
//     caller's own transaction. Every write of that transaction is fenced together,
//     including inserts of new rows, and the fence row's lock serialises writers.
//     On an error the caller rolls back: nothing of the transaction is applied.
//     [Guard.Fence] advances the fence alone, so a new holder fences off a paused
//     predecessor before its first write.
//   - Row fence ([Row]): a table whose rows carry fence columns, written by
//     [Row.Update] (a conditional UPDATE; a missing row is fence.ErrNotFound, a
//     stale fence a *fence.StaleTokenError) or [Row.Upsert] (INSERT ... ON
//     DUPLICATE KEY UPDATE). [KV] is a ready-made fenced key-value table.
//
// Both apply fence.Admit's rule in SQL: the stored lock name must equal the fence's
// (else *fence.NamespaceError), and the token must be greater, or equal under the same
// non-empty lease (else *fence.StaleTokenError carrying the highest token).
//
// # The SQL
//
// With T the fences table and <admit> the condition
//
//	name = ? AND (? > token OR (? = token AND ? <> '' AND ? = lease))
//
// FenceTx runs
//
//	INSERT INTO T (resource, name, token, lease) VALUES (?, ?, ?, ?)
//	ON DUPLICATE KEY UPDATE
//	  lease = IF(LAST_INSERT_ID(IF(<admit>, 9223372036854775001, 9223372036854775002)) = 9223372036854775001, ?, lease),
//	  token = IF(<admit>, ?, token)
//
// The assignments run in order, lease before token, so both see the stored token.
// The LAST_INSERT_ID marker comes back in the same OK packet as the affected rows
// and tells accepted (…001) from refused (…002); an insert leaves neither. Only a
// refusal runs a second statement, SELECT name, token, lease FROM T WHERE resource
// = ? FOR UPDATE, to report the highest fence. Row.Upsert has the same shape over
// the row's own columns (value columns first, then fence_name, fence_lease, and
// fence_token last), with the condition widened to (fence_token = 0 OR <admit>) so
// that rows that were never fenced (token 0, see Row.FenceColumnsDDL) admit any
// fence; Row.Update is
//
//	UPDATE T SET col1 = ?, ..., fence_name = ?, fence_lease = ?, fence_token = ?
//	WHERE key = ? AND (fence_token = 0 OR <admit over fence_name, fence_token, fence_lease>)
//
// followed, only when it matched no row, by a locking read that tells a missing row
// from a stale one.
//
// # Setup
//
// The DSN must set clientFoundRows=true: without it MariaDB reports changed rows,
// and a repeated identical write under the same lease would look refused. [Open]
// sets it; [CheckDSN] and [Guard.Check] (run by [Guard.CreateSchema]) detect its
// absence, and Row.Update refuses to guess when it sees the symptom.
//
// [Schema] is the fences table's DDL; its primary key on resource is the only index
// needed. Identifiers (tables, columns) are validated and quoted; values are always
// bound parameters. Text columns are VARBINARY so that names compare byte for byte;
// a case-insensitive collation on fence columns would let two lock names collide.
//
// # Errors
//
// Tokens of 0 or above fence.MaxToken (2^53-1, well inside BIGINT) are refused
// before any SQL with fence.ErrInvalid. A missing table or column, a NULL or
// non-positive stored fence: [ErrSchema], nothing written. Deadlocks and lock wait
// timeouts: [ErrConflict] (roll back and retry). Broken connections:
// fence.ErrUnavailable; a closed *sql.DB or finished transaction: fence.ErrClosed.
// The driver's error stays in the chain for errors.As.
package mysql
