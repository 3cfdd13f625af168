// Package sqlguard makes a SQL database behind database/sql enforce fencing
// tokens: the resource fence ([Guard]), the row fence ([Row]) and a fenced
// key-value table ([KV]), written once for every dialect.
//
// What differs between databases (the upsert statement and how it reports
// accepted or refused, identifier quoting, column types, the driver's error codes)
// is a [Dialect]. The packages mysql (MariaDB and MySQL) and sqlite hold one each,
// and name this package's types for it: mysql.Guard is Guard[mysql.Dialect], so a
// Guard of one dialect is not mistaken for another's. Most programs use those
// packages and never name sqlguard; a new dialect is a Dialect value and a type
// whose SQL method returns it (see [Dialector]).
//
// Both patterns apply fence.Admit's rule in SQL, in one statement per fenced
// write: the stored lock name must equal the fence's (else *fence.NamespaceError),
// and the token must be greater, or equal under the same non-empty lease (else
// *fence.StaleTokenError carrying the highest token). Only a refusal runs a second
// statement, a read of the stored fence, to report it.
//
// KV.Delete is one conditional UPDATE that sets the value to NULL and the fence to
// the Delete's, under the same rule and only while the key holds a value: the
// fence stays, so a stale writer is still refused; a key holding no value is
// fence.ErrNotFound (after a refusal, which is reported first). KV.Purge
// (fence.Purger) deletes the row, value and fence: the one way a key's fence goes
// back. None of this checks that a token was issued (P9): a guard grants no
// locks, and admits any fence fence.Admit admits, whichever locker made it.
//
// # Errors
//
// Every error is prefixed with the dialect's name ("mysql: fence \"r\": ...").
// Tokens of 0 or above fence.MaxToken and malformed names are fence.ErrInvalid
// before any SQL. A missing table or column or a NULL or out-of-range stored
// fence is [ErrSchema], with nothing written; a deadlock, lock wait timeout or
// busy database is [ErrConflict] (roll back and retry); a broken connection is
// fence.ErrUnavailable and a closed *sql.DB or finished transaction
// fence.ErrClosed. The driver's error stays in the chain for errors.As. The
// postgres package, which runs on pgx rather than database/sql, returns the same
// ErrSchema and ErrConflict.
package sqlguard
