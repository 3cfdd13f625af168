package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of this package. Errors returned by the package wrap them (and, for the
// database's own errors, the *pgconn.PgError too), so match them with errors.Is.
// ErrSchema and ErrConflict are sqlguard's, shared by every SQL guard (mysql and
// sqlite return the same values).
var (
	// ErrSchema means a table or column the statement needs is missing or has the
	// wrong type or constraints (run CreateSchema, or fix the DDL). Nothing was
	// written.
	ErrSchema = sqlguard.ErrSchema

	// ErrConflict means PostgreSQL aborted the transaction with a serialization
	// failure or a deadlock (SQLSTATE 40001, 40P01). Nothing of the transaction
	// was written: roll it back and retry it.
	ErrConflict = sqlguard.ErrConflict

	// ErrCorrupt means a row the package maintains holds values it never writes (a
	// NULL fence, a token below 1 or above fence.MaxToken, an expiry beyond
	// fence.MaxTTL): it was edited by hand. The operation was refused, and nothing
	// was granted or written.
	ErrCorrupt = errors.New("postgres: row edited by hand")
)

// dbErr translates an error of pgx into one that matches this package's or the
// fence package's sentinels, keeping the driver error in the chain for detail.
// It never returns pgx.ErrNoRows: callers handle that themselves.
func dbErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The statement may or may not have run: the caller's context decided.
		return err
	}
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("%w: the transaction was already committed or rolled back: %w", fence.ErrInvalid, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", // undefined_table
			"42703", // undefined_column
			"42P10", // invalid_column_reference: no unique index for ON CONFLICT
			"42804", // datatype_mismatch
			"42883", // undefined_function: an operator for the column's type is missing
			"23502": // not_null_violation
			return fmt.Errorf("%w: %s (SQLSTATE %s): %w", ErrSchema, pgErr.Message, pgErr.Code, pgErr)
		case "40001", "40P01":
			return fmt.Errorf("%w: %w", ErrConflict, pgErr)
		case "25P02":
			return fmt.Errorf("postgres: the transaction was already aborted by an earlier error, roll it back: %w", pgErr)
		case "22003", "22P02", "23514": // numeric out of range, bad text representation, check violation
			return fmt.Errorf("%w: %s (SQLSTATE %s): %w", fence.ErrInvalid, pgErr.Message, pgErr.Code, pgErr)
		}
		if len(pgErr.Code) >= 2 {
			switch pgErr.Code[:2] {
			case "08", "57", "53": // connection exception, operator intervention (shutdown), insufficient resources
				return fmt.Errorf("%w: %s (SQLSTATE %s): %w", fence.ErrUnavailable, pgErr.Message, pgErr.Code, pgErr)
			}
		}
		return fmt.Errorf("postgres: %s (SQLSTATE %s): %w", pgErr.Message, pgErr.Code, pgErr)
	}
	// Anything else is the connection: refused, reset, closed pool or conn.
	return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
}
