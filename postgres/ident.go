package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs one statement. *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn and pgx.Tx
// all satisfy it; pass a pgx.Tx to make a fenced statement part of your
// transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is what a Guard needs of the database: statements and transactions.
// *pgxpool.Pool and *pgx.Conn satisfy it (and pgx.Tx, whose Begin makes a
// savepoint).
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer identifiers are truncated
// silently by the server, so they are refused here instead.
const maxIdentLen = 63

// quoteIdent validates an identifier given in options ("table", or
// "schema.table" where dotted is true) and returns it double-quoted. Identifiers
// are ASCII letters, digits and underscores, not starting with a digit: anything
// else is refused rather than escaped, so no user data ever reaches SQL text.
func quoteIdent(field, ident string, dotted bool) (string, error) {
	parts := []string{ident}
	if dotted {
		parts = strings.Split(ident, ".")
		if len(parts) > 2 {
			return "", fmt.Errorf("postgres: %w", &fence.InvalidError{Field: field, Value: ident, Reason: "has more than one dot (want table or schema.table)"})
		}
	}
	for _, p := range parts {
		if err := checkIdent(p); err != "" {
			return "", fmt.Errorf("postgres: %w", &fence.InvalidError{Field: field, Value: ident, Reason: err})
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

func checkIdent(s string) string {
	if s == "" {
		return "is empty"
	}
	if len(s) > maxIdentLen {
		return fmt.Sprintf("is %d bytes, longer than PostgreSQL's %d", len(s), maxIdentLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return "must be ASCII letters, digits and underscores, not starting with a digit"
		}
	}
	return ""
}

// admitSQL is fence.Admit as a SQL condition: true when the new fence (newName,
// newToken, newLease) may replace the stored one (name, token, lease). A stored
// token of 0 means "never fenced" (row fences whose columns default to 0). A
// NULL stored column makes the condition NULL, so nothing is written and the
// caller reports the corrupt row.
func admitSQL(name, token, lease, newName, newToken, newLease string) string {
	return fmt.Sprintf("(%[2]s = 0 OR (%[1]s = %[4]s AND (%[2]s < %[5]s OR (%[2]s = %[5]s AND %[6]s <> '' AND %[3]s = %[6]s))))",
		name, token, lease, newName, newToken, newLease)
}

// validateFence checks a resource (or key) and a fence before any statement.
func validateFence(resource string, f fence.Fence) error {
	if err := fence.ValidateKey(resource); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	return nil
}

// storedFence is a fence as read back from a row, with NULL columns kept apart.
type storedFence struct {
	name, lease *string
	token       *int64
}

// fence returns the stored fence, or an error matching ErrCorrupt if a column
// is NULL or the token is outside [0, fence.MaxToken].
func (s storedFence) fence() (fence.Fence, error) {
	switch {
	case s.name == nil:
		return fence.Fence{}, fmt.Errorf("%w: the fence name column is NULL", ErrCorrupt)
	case s.token == nil:
		return fence.Fence{}, fmt.Errorf("%w: the fence token column is NULL", ErrCorrupt)
	case s.lease == nil:
		return fence.Fence{}, fmt.Errorf("%w: the fence lease column is NULL", ErrCorrupt)
	case *s.token < 0 || *s.token > int64(fence.MaxToken):
		return fence.Fence{}, fmt.Errorf("%w: the fence token %d is outside [0, %d]", ErrCorrupt, *s.token, uint64(fence.MaxToken))
	}
	return fence.Fence{Name: *s.name, Token: fence.Token(*s.token), LeaseID: *s.lease}, nil
}
