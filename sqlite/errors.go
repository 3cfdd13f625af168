package sqlite

import (
	"errors"
	"strings"

	msqlite "modernc.org/sqlite"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// Errors of this package: sqlguard's, shared by every SQL guard (mysql and
// postgres return the same values). Errors about fences wrap the root sentinels
// (fence.ErrStaleToken, fence.ErrNamespace, fence.ErrInvalid, fence.ErrNotFound,
// fence.ErrUnavailable, fence.ErrClosed); these two cover what only a SQL database
// can say.
var (
	// ErrSchema means the table the guard was given does not have the expected
	// shape: it is missing, lacks a column or the unique key, or holds a NULL or
	// non-positive fence. Nothing was written.
	ErrSchema = sqlguard.ErrSchema

	// ErrConflict means the database was locked by another connection for longer
	// than the busy timeout (SQLITE_BUSY, SQLITE_LOCKED). Roll the transaction back
	// and retry it; see Open for the settings that make this rare.
	ErrConflict = sqlguard.ErrConflict
)

// SQLite primary result codes the guard translates (the low byte of extended codes).
const (
	codeError    = 1
	codeBusy     = 5
	codeLocked   = 6
	codeReadOnly = 8
	codeIOErr    = 10
	codeCorrupt  = 11
	codeFull     = 13
	codeCantOpen = 14
	codeConstr   = 19
	codeMismatch = 20
)

// translate maps a SQLite error to the sentinel it means, nil if none
// (sqlguard.Dialect.Translate).
func translate(err error) error {
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case codeBusy, codeLocked:
			return ErrConflict
		case codeConstr, codeMismatch:
			return ErrSchema
		case codeError:
			msg := se.Error()
			for _, s := range []string{"no such table", "no such column", "has no column named", "ON CONFLICT clause does not match", "no such database"} {
				if strings.Contains(msg, s) {
					return ErrSchema
				}
			}
		case codeReadOnly, codeIOErr, codeCorrupt, codeFull, codeCantOpen:
			return fence.ErrUnavailable
		}
		return nil
	}
	if strings.HasPrefix(err.Error(), "sql: Scan error") {
		return ErrSchema
	}
	return nil
}
