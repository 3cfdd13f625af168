package mysql

import (
	"errors"
	"net"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// Errors of this package: sqlguard's, shared by every SQL guard (sqlite and
// postgres return the same values). Errors about fences wrap the root sentinels
// (fence.ErrStaleToken, fence.ErrNamespace, fence.ErrInvalid, fence.ErrNotFound,
// fence.ErrUnavailable); these two cover what only a SQL database can say.
var (
	// ErrSchema means the table the guard was given does not have the expected
	// shape: it is missing, lacks a column, or holds a NULL or non-positive fence.
	// Nothing was written. CreateSchema (or the DDL in Schema) makes the right one.
	ErrSchema = sqlguard.ErrSchema

	// ErrConflict means the server aborted the statement or the transaction to
	// resolve a lock conflict (deadlock, lock wait timeout). Roll the transaction
	// back and retry it.
	ErrConflict = sqlguard.ErrConflict
)

// MariaDB and MySQL error numbers the guard translates.
const (
	errNoSuchTable      = 1146
	errBadField         = 1054
	errNoDefault        = 1364
	errBadNull          = 1048
	errCheckMariaDB     = 4025
	errCheckMySQL       = 3819
	errLockWaitTimeout  = 1205
	errDeadlock         = 1213
	errTruncatedWrong   = 1292
	errDataTooLong      = 1406
	errOutOfRange       = 1264
	errUnknownDatabase  = 1049
	errReadOnlyTxn      = 1792
	errServerShutdown   = 1053
	errQueryInterrupted = 1317
)

// translate maps a MariaDB or MySQL error to the sentinel it means, nil if none
// (sqlguard.Dialect.Translate).
func translate(err error) error {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errNoSuchTable, errBadField, errNoDefault, errBadNull, errCheckMariaDB, errCheckMySQL,
			errUnknownDatabase, errTruncatedWrong, errDataTooLong, errOutOfRange:
			return ErrSchema
		case errDeadlock, errLockWaitTimeout:
			return ErrConflict
		case errServerShutdown, errQueryInterrupted, errReadOnlyTxn:
			return fence.ErrUnavailable
		}
		return nil
	}
	var ne net.Error
	if errors.Is(err, gomysql.ErrInvalidConn) || errors.As(err, &ne) {
		return fence.ErrUnavailable
	}
	return nil
}
