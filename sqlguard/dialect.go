package sqlguard

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

// Errors only a SQL database can report. Errors about fences wrap the root
// sentinels (fence.ErrStaleToken, fence.ErrNamespace, fence.ErrInvalid,
// fence.ErrNotFound, fence.ErrUnavailable, fence.ErrClosed); these two cover the
// rest, for every dialect and for the postgres package.
var (
	// ErrSchema means the table a guard was given does not have the expected
	// shape: it is missing, lacks a column or the unique key, or holds a NULL or
	// out-of-range fence. Nothing was written. CreateSchema makes the right one.
	ErrSchema = errors.New("sqlguard: wrong or missing schema")

	// ErrConflict means the database aborted the statement or the transaction to
	// resolve a conflict with another one (deadlock, lock wait timeout,
	// serialization failure, busy database). Nothing of the transaction was
	// written: roll it back and retry it.
	ErrConflict = errors.New("sqlguard: transaction conflict, roll back and retry")
)

// Shared defaults of every dialect.
const (
	// DefaultTable is the fences table a Guard uses when GuardOptions.Table is empty.
	DefaultTable = "fence_resources"
	// DefaultKVTable is the table a KV uses when KVOptions.Table is empty.
	DefaultKVTable = "fence_kv"
	// MaxValueLen is the largest value KV.Put accepts, in bytes. It stays well
	// below MariaDB's default max_allowed_packet (16 MiB).
	MaxValueLen = 1 << 20
)

// Querier runs statements: a *sql.Tx for writes fenced together with the caller's
// own, or a *sql.DB or *sql.Conn for a single autocommitted statement.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is what a Guard or KV needs of the database: a Querier that can begin
// transactions, in practice a *sql.DB of the dialect's driver.
type DB interface {
	Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Dialector is a dialect as a type: the type argument of Guard, KV and Row. Its
// SQL method returns the same *Dialect every time, whatever the receiver's value
// (the zero value is used). mysql.Dialect and sqlite.Dialect are Dialectors.
type Dialector interface {
	SQL() *Dialect
}

// dialectOf returns D's dialect.
func dialectOf[D Dialector]() *Dialect {
	var d D
	return d.SQL()
}

// Dialect is what differs between two SQL databases behind a guard: the
// statements, how their outcome is read, quoting, and the driver's errors. Every
// field must be set except FoundRowsErr and LockSuffix. A Dialect is read, never
// written, by the guards: declare it once as a package variable.
type Dialect struct {
	// Name prefixes every error message ("mysql", "sqlite").
	Name string
	// Translate maps a driver error to the sentinel it means (ErrSchema,
	// ErrConflict, fence.ErrUnavailable, fence.ErrClosed), or nil if it knows none;
	// Wrap then tries the database/sql sentinels.
	Translate func(err error) error
	// Schema and KVSchema are the DDL of the default fences table (DefaultTable)
	// and KV table (DefaultKVTable), with the table name quoted by Quote; a Guard
	// or KV over another table replaces the quoted default name with its own.
	Schema, KVSchema string

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
	// was counted as unchanged, and by Guard.Check when an update of an
	// unchanged row counts none (the connection counts changed rows).
	FoundRowsErr error

	// FenceSQL is the guard's fence statement over the quoted table, FenceArgs
	// its arguments.
	FenceSQL  func(table string) string
	FenceArgs func(resource string, f fence.Fence) []any
	// UpsertSQL is a row upsert over quoted names (cols may be empty), and
	// UpsertArgs its arguments.
	UpsertSQL  func(table, key string, cols []string, fn, ft, fl string) string
	UpsertArgs func(key any, values []any, f fence.Fence) []any
	// Run runs a statement of FenceSQL or UpsertSQL and reports whether it
	// inserted or advanced the fence (true) or the stored fence refused it.
	Run func(ctx context.Context, q Querier, stmt string, args []any) (accepted bool, err error)
	// ColumnTypes are the SQL types of the fence name, token and lease columns.
	NameType, TokenType, LeaseType string
}

// AdmitSQL returns fence.Admit's rule as a SQL condition over the stored fence
// columns name, token and lease (quoted names), for a new fence bound as AdmitArgs
// returns it: the lock names are equal, and the new token is greater, or equal
// under the same non-empty lease. A NULL column makes it NULL, which refuses the
// write. Row.Update uses it; a dialect may use it in its own statements.
func AdmitSQL(name, token, lease string) string {
	return name + " = ? AND (? > " + token + " OR (? = " + token + " AND ? <> '' AND ? = " + lease + "))"
}

// AdmitArgs returns the arguments of AdmitSQL's placeholders for the new fence f:
// its lock name, token, token, lease id and lease id.
func AdmitArgs(f fence.Fence) []any {
	t := int64(f.Token)
	return []any{f.Name, t, t, f.LeaseID, f.LeaseID}
}

// errorf formats an error with the dialect's prefix: errorf("put %q: %w", k, err).
func (d *Dialect) errorf(format string, args ...any) error {
	return fmt.Errorf(d.Name+": "+format, args...)
}

// Wrap adds the dialect's prefix and the context what to err, and translates a
// driver error to the sentinel it means (ErrSchema, ErrConflict,
// fence.ErrUnavailable, fence.ErrClosed) so that callers can test it with
// errors.Is without importing the driver; the driver error stays in the chain for
// errors.As. It returns nil for nil.
func (d *Dialect) Wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var st *fence.StaleTokenError
	var ns *fence.NamespaceError
	var inv *fence.InvalidError
	switch {
	case errors.As(err, &st), errors.As(err, &ns), errors.As(err, &inv),
		errors.Is(err, ErrSchema), errors.Is(err, ErrConflict), errors.Is(err, fence.ErrNotFound),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return d.errorf("%s: %w", what, err)
	}
	if s := d.Translate(err); s != nil {
		return d.errorf("%s: %w: %w", what, s, err)
	}
	switch {
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone), err.Error() == "sql: database is closed":
		// database/sql has no exported sentinel for a closed *sql.DB.
		return d.errorf("%s: %w: %w", what, fence.ErrClosed, err)
	case errors.Is(err, driver.ErrBadConn):
		return d.errorf("%s: %w: %w", what, fence.ErrUnavailable, err)
	}
	return d.errorf("%s: %w", what, err)
}

// execRows runs stmt on q and returns how many rows it affected, with errors
// wrapped by Wrap(what, ...).
func (d *Dialect) execRows(ctx context.Context, q Querier, what, stmt string, args ...any) (int64, error) {
	res, err := q.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, d.Wrap(what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, d.Wrap(what, err)
	}
	return n, nil
}

// quoteIdent validates a table or column name (optionally qualified once) and
// quotes it. It returns a *fence.InvalidError for a bad name.
func (d *Dialect) quoteIdent(s string) (string, error) {
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

// scanFence reads (name, token, lease) into a fence. With zeroOK a token of 0
// is the zero Fence (a row never fenced); otherwise tokens must be positive. NULLs
// and tokens out of range are ErrSchema. Scan errors are returned as they are.
func (d *Dialect) scanFence(row *sql.Row, zeroOK bool) (fence.Fence, error) {
	var name, lease sql.NullString
	var token sql.NullInt64
	if err := row.Scan(&name, &token, &lease); err != nil {
		return fence.Fence{}, err
	}
	if !name.Valid || !token.Valid || !lease.Valid {
		return fence.Fence{}, fmt.Errorf("%w: a fence column is NULL (name %v, token %v, lease %v); declare them NOT NULL", ErrSchema, name.Valid, token.Valid, lease.Valid)
	}
	lo := int64(1)
	if zeroOK {
		if token.Int64 == 0 {
			return fence.Fence{}, nil
		}
		lo = 0
	}
	if token.Int64 <= 0 || uint64(token.Int64) > uint64(fence.MaxToken) {
		return fence.Fence{}, fmt.Errorf("%w: stored token %d is outside [%d, %d]", ErrSchema, token.Int64, lo, uint64(fence.MaxToken))
	}
	return fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}, nil
}

// refused explains a refusal of f by the statement what ran: it reads the stored
// fence with readLock and returns fence.Admit's error, or ErrSchema if the row
// vanished or the stored fence admits f after all (hint says what to check).
func (d *Dialect) refused(ctx context.Context, q Querier, readLock string, key any, zeroOK bool, f fence.Fence, what, hint string) error {
	stored, err := d.scanFence(q.QueryRowContext(ctx, readLock, key), zeroOK)
	if errors.Is(err, sql.ErrNoRows) {
		return d.errorf("%s: %w: the row vanished after a rejection", what, ErrSchema)
	}
	if err != nil {
		return d.Wrap(what, err)
	}
	if err := fence.Admit(fmt.Sprint(key), stored, f); err != nil {
		return d.Wrap(what, err)
	}
	return d.errorf("%s: %w: %s refused %v over %v, which the rule admits %s", what, ErrSchema, d.Refuser, f, stored, hint)
}

// errNilDB is the cause every method of a Guard or KV made over a nil DB returns.
var errNilDB = &fence.InvalidError{Field: "db", Value: "<nil>", Reason: "is nil"}
