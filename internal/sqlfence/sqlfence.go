// Package sqlfence is the database/sql machinery shared by the mysql and sqlite
// guards: the resource fence (Guard), the row fence (Row) and the fenced key-value
// table (KV). What differs between the databases (SQL dialect, identifier quoting,
// driver error codes, the package's error sentinels and message prefix) is a
// Dialect; the admit decision, the stale-versus-missing disambiguation, validation
// and error wrapping are written once here. The public packages wrap these types
// and keep their own exported API and documentation.
package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/fencelock/fence"
)

// Querier runs statements: a *sql.Tx, *sql.DB or *sql.Conn.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is a Querier that can begin transactions (a *sql.DB).
type DB interface {
	Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Dialect is what differs between two SQL databases behind a guard. Every field
// must be set except FoundRowsErr and LockSuffix.
type Dialect struct {
	// Name prefixes every error message ("mysql", "sqlite").
	Name string
	// ErrSchema and ErrConflict are the package's sentinels.
	ErrSchema, ErrConflict error
	// Translate maps a driver error to the sentinel it means (ErrSchema,
	// ErrConflict, fence.ErrUnavailable, fence.ErrClosed), or nil if it knows none;
	// Wrap then tries the database/sql sentinels.
	Translate func(err error) error

	// Quote is the identifier quote character; IdentRE the pattern of one
	// identifier part and IdentReason the message when a part does not match it.
	Quote       string
	IdentRE     *regexp.Regexp
	IdentReason string

	// LockSuffix makes a read lock the row until the transaction ends
	// (" FOR UPDATE"), empty where the database locks it already.
	LockSuffix string
	// Refuser names the database in the message of an impossible refusal
	// ("the database", "SQLite"); GuardHint ends that message for a Guard.
	Refuser, GuardHint string
	// FoundRowsErr, if set, is returned by Row.Update when the row matched but
	// was counted as unchanged (the connection counts changed rows).
	FoundRowsErr error

	// FenceSQL is the guard's fence statement over the quoted table, FenceArgs
	// its arguments.
	FenceSQL  func(table string) string
	FenceArgs func(resource string, f fence.Fence) []any
	// UpsertSQL is a row upsert over quoted names (cols may be empty), and
	// UpsertArgs its arguments.
	UpsertSQL  func(table, key string, cols []string, fn, ft, fl string) string
	UpsertArgs func(key any, values []any, f fence.Fence) []any
	// UpdateCond is the WHERE condition of Row.Update after the key, binding
	// (name, token, token, lease, lease).
	UpdateCond func(fn, ft, fl string) string
	// Run runs a statement of FenceSQL or UpsertSQL and reports whether it
	// inserted or advanced the fence (true) or the stored fence refused it.
	Run func(ctx context.Context, q Querier, stmt string, args []any) (accepted bool, err error)
	// ColumnTypes are the SQL types of the fence name, token and lease columns.
	NameType, TokenType, LeaseType string
}

// Errorf formats an error with the dialect's prefix: Errorf("put %q: %w", k, err).
func (d *Dialect) Errorf(format string, args ...any) error {
	return fmt.Errorf(d.Name+": "+format, args...)
}

// Wrap adds the prefix and context what to err and translates driver errors to the
// root sentinels; the driver error stays in the chain. It returns nil for nil.
func (d *Dialect) Wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var st *fence.StaleTokenError
	var ns *fence.NamespaceError
	var inv *fence.InvalidError
	switch {
	case errors.As(err, &st), errors.As(err, &ns), errors.As(err, &inv),
		errors.Is(err, d.ErrSchema), errors.Is(err, d.ErrConflict), errors.Is(err, fence.ErrNotFound),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return d.Errorf("%s: %w", what, err)
	}
	if s := d.Translate(err); s != nil {
		return d.Errorf("%s: %w: %w", what, s, err)
	}
	switch {
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone), err.Error() == "sql: database is closed":
		// database/sql has no exported sentinel for a closed *sql.DB.
		return d.Errorf("%s: %w: %w", what, fence.ErrClosed, err)
	case errors.Is(err, driver.ErrBadConn):
		return d.Errorf("%s: %w: %w", what, fence.ErrUnavailable, err)
	}
	return d.Errorf("%s: %w", what, err)
}

// QuoteIdent validates a table or column name (optionally qualified once) and
// quotes it. It returns a *fence.InvalidError for a bad name.
func (d *Dialect) QuoteIdent(s string) (string, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return "", &fence.InvalidError{Field: "identifier", Value: s, Reason: "has more than one '.'"}
	}
	for i, p := range parts {
		if !d.IdentRE.MatchString(p) {
			return "", &fence.InvalidError{Field: "identifier", Value: s, Reason: d.IdentReason}
		}
		parts[i] = d.Quote + p + d.Quote
	}
	return strings.Join(parts, "."), nil
}

// ScanFence reads (name, token, lease) into a fence. With zeroOK a token of 0
// is the zero Fence (a row never fenced); otherwise tokens must be positive. NULLs
// and tokens out of range are ErrSchema. Scan errors are returned as they are.
func (d *Dialect) ScanFence(row *sql.Row, zeroOK bool) (fence.Fence, error) {
	var name, lease sql.NullString
	var token sql.NullInt64
	if err := row.Scan(&name, &token, &lease); err != nil {
		return fence.Fence{}, err
	}
	if !name.Valid || !token.Valid || !lease.Valid {
		return fence.Fence{}, fmt.Errorf("%w: a fence column is NULL (name %v, token %v, lease %v); declare them NOT NULL", d.ErrSchema, name.Valid, token.Valid, lease.Valid)
	}
	lo := int64(1)
	if zeroOK {
		if token.Int64 == 0 {
			return fence.Fence{}, nil
		}
		lo = 0
	}
	if token.Int64 <= 0 || uint64(token.Int64) > uint64(fence.MaxToken) {
		return fence.Fence{}, fmt.Errorf("%w: stored token %d is outside [%d, %d]", d.ErrSchema, token.Int64, lo, uint64(fence.MaxToken))
	}
	return fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}, nil
}

// ErrNilDB is the cause every method of a Guard or KV made over a nil DB returns.
var ErrNilDB = &fence.InvalidError{Field: "db", Value: "<nil>", Reason: "is nil"}
