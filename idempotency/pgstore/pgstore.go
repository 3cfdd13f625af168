// Package pgstore is an idempotency.Store in a PostgreSQL table, shared by every
// server on one database.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/idempotency"
	"github.com/fencelock/fence/sqlguard"
)

// DefaultTable is the table a Store uses when Options.Table
// is empty.
const DefaultTable = "idempotency_keys"

// Schema is the DDL of the default table, as CreateSchema runs it. The
// primary key serves Begin, Complete and Release; the index on expires_at serves
// Purge.
const Schema = `CREATE TABLE IF NOT EXISTS idempotency_keys (
  key          text PRIMARY KEY,
  fingerprint  text NOT NULL,
  owner        text NOT NULL,
  done         boolean NOT NULL DEFAULT false,
  locked_until timestamptz NOT NULL,
  expires_at   timestamptz NOT NULL,
  status       integer,
  header       jsonb,
  body         bytea
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at_idx ON idempotency_keys (expires_at)`

// DB is what a Store needs: *pgxpool.Pool and *pgx.Conn satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Options configure a Store. The zero value (or nil) uses
// DefaultTable.
type Options struct {
	Table string // optionally schema-qualified; letters, digits and '_' only
}

// Store is an idempotency.Store in a PostgreSQL table, shared by every server that uses
// the same database. Lock timeouts and retention are measured by the database
// clock (now()), so application servers' clocks do not matter.
type Store struct {
	db  DB
	err error

	schema, begin, read, complete, release, purge string
}

var _ idempotency.Store = (*Store)(nil)

var pgIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// New returns a store over db. A bad table name or nil db is reported
// by every method as an error matching fence.ErrInvalid.
func New(db DB, opts *Options) *Store {
	table := DefaultTable
	if opts != nil && opts.Table != "" {
		table = opts.Table
	}
	s := &Store{db: db}
	parts := strings.Split(table, ".")
	for _, p := range parts {
		if len(parts) > 2 || !pgIdent.MatchString(p) {
			s.err = fmt.Errorf("idempotency: postgres store: %w", &fence.InvalidError{Field: "table", Value: table, Reason: "must be 1 to 63 lower-case letters, digits or '_' (optionally schema.table)"})
			return s
		}
	}
	if db == nil {
		s.err = fmt.Errorf("idempotency: postgres store: %w", &fence.InvalidError{Field: "db", Value: "<nil>", Reason: "is nil"})
		return s
	}
	q := `"` + strings.Join(parts, `"."`) + `"`
	idx := `"` + parts[len(parts)-1] + `_expires_at_idx"`
	s.schema = strings.NewReplacer("TABLE IF NOT EXISTS idempotency_keys", "TABLE IF NOT EXISTS "+q,
		"idempotency_keys_expires_at_idx ON idempotency_keys", idx+" ON "+q).Replace(Schema)
	s.begin = `INSERT INTO ` + q + ` AS r (key, fingerprint, owner, locked_until, expires_at)
VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond', now() + $5 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, owner = excluded.owner, done = false,
  locked_until = excluded.locked_until, expires_at = excluded.expires_at, status = NULL, header = NULL, body = NULL
WHERE r.expires_at <= now() OR (NOT r.done AND r.locked_until <= now() AND r.fingerprint = excluded.fingerprint)
RETURNING owner`
	s.read = `SELECT fingerprint, done, GREATEST(0, CEIL(EXTRACT(EPOCH FROM locked_until - now()) * 1000))::bigint, status, header, body
FROM ` + q + ` WHERE key = $1 AND expires_at > now()`
	s.complete = `UPDATE ` + q + ` SET done = true, status = $3, header = $4, body = $5, expires_at = now() + $6 * interval '1 millisecond'
WHERE key = $1 AND owner = $2 AND NOT done AND expires_at > now()`
	s.release = `DELETE FROM ` + q + ` WHERE key = $1 AND owner = $2 AND NOT done`
	s.purge = `DELETE FROM ` + q + ` WHERE expires_at <= now()`
	return s
}

// CreateSchema creates the table and its index if they do not exist.
func (s *Store) CreateSchema(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	for _, stmt := range strings.Split(s.schema, ";\n") {
		if _, err := s.db.Exec(ctx, stmt); err != nil {
			return pgWrap("create schema", err)
		}
	}
	return nil
}

// Begin implements Store.Begin in one INSERT ... ON CONFLICT DO UPDATE ... WHERE
// statement, which takes a new key, an expired record, or an in-flight record of
// the same fingerprint whose lock timed out; when it takes nothing, a read of the
// record says why (completed, in flight, or another fingerprint).
func (s *Store) Begin(ctx context.Context, key, fingerprint string, lockTimeout, retention time.Duration) (idempotency.Claim, error) {
	if s.err != nil {
		return idempotency.Claim{}, s.err
	}
	if err := idempotency.ValidateBegin("postgres begin", key, fingerprint, lockTimeout, retention); err != nil {
		return idempotency.Claim{}, err
	}
	owner := idempotency.NewOwner()
	// A record can expire or be released between the two statements; then the
	// insert is tried again.
	for attempt := 0; attempt < 3; attempt++ {
		var got string
		err := s.db.QueryRow(ctx, s.begin, key, fingerprint, owner, lockTimeout.Milliseconds(), retention.Milliseconds()).Scan(&got)
		if err == nil {
			return idempotency.Claim{State: idempotency.Started, Owner: got}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return idempotency.Claim{}, pgWrap(fmt.Sprintf("begin %q", key), err)
		}
		var fp string
		var done bool
		var leftMS int64
		var status *int32
		var header []byte
		var body []byte
		err = s.db.QueryRow(ctx, s.read, key).Scan(&fp, &done, &leftMS, &status, &header, &body)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return idempotency.Claim{}, pgWrap(fmt.Sprintf("begin %q", key), err)
		}
		switch {
		case fp != fingerprint:
			return idempotency.Claim{State: idempotency.Mismatch}, nil
		case !done:
			return idempotency.Claim{State: idempotency.InFlight, RetryAfter: time.Duration(leftMS) * time.Millisecond}, nil
		}
		resp := &idempotency.Response{Body: body}
		if status != nil {
			resp.Status = int(*status)
		}
		if len(header) > 0 {
			if err := json.Unmarshal(header, &resp.Header); err != nil {
				return idempotency.Claim{}, fmt.Errorf("idempotency: postgres begin %q: stored header: %w", key, err)
			}
		}
		return idempotency.Claim{State: idempotency.Completed, Response: resp}, nil
	}
	return idempotency.Claim{}, fmt.Errorf("idempotency: postgres begin %q: %w: the record kept changing", key, fence.ErrUnavailable)
}

// Complete implements Store.Complete with one conditional UPDATE.
func (s *Store) Complete(ctx context.Context, key, owner string, resp *idempotency.Response, retention time.Duration) error {
	if s.err != nil {
		return s.err
	}
	if err := idempotency.ValidateOwner("postgres complete", key, owner); err != nil {
		return err
	}
	if resp == nil || retention <= 0 {
		return fmt.Errorf("idempotency: postgres complete %q: %w", key, &fence.InvalidError{Field: "response", Value: fmt.Sprint(retention), Reason: "needs a response and a positive retention"})
	}
	header, err := json.Marshal(resp.Header)
	if err != nil {
		return fmt.Errorf("idempotency: postgres complete %q: %w", key, err)
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	tag, err := s.db.Exec(ctx, s.complete, key, owner, resp.Status, header, body, retention.Milliseconds())
	if err != nil {
		return pgWrap(fmt.Sprintf("complete %q", key), err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("idempotency: postgres complete %q: %w", key, idempotency.ErrNotOwner)
	}
	return nil
}

// Release implements Store.Release with one conditional DELETE.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	if s.err != nil {
		return s.err
	}
	if err := idempotency.ValidateOwner("postgres release", key, owner); err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, s.release, key, owner)
	if err != nil {
		return pgWrap(fmt.Sprintf("release %q", key), err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("idempotency: postgres release %q: %w", key, idempotency.ErrNotOwner)
	}
	return nil
}

// Purge implements Store.Purge: DELETE ... WHERE expires_at <= now().
func (s *Store) Purge(ctx context.Context) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	tag, err := s.db.Exec(ctx, s.purge)
	if err != nil {
		return 0, pgWrap("purge", err)
	}
	return int(tag.RowsAffected()), nil
}

// pgWrap prefixes err and translates connection failures to fence.ErrUnavailable
// and a closed pool to fence.ErrClosed; the pgx error stays in the chain.
func pgWrap(what string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("idempotency: postgres %s: %w", what, err)
	case errors.As(err, &pgErr):
		switch {
		case pgErr.Code == "42P01" || pgErr.Code == "42703": // undefined table / column
			return fmt.Errorf("idempotency: postgres %s: %w: %w (run CreateSchema)", what, ErrSchema, err)
		case strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P"): // connection, shutdown
			return fmt.Errorf("idempotency: postgres %s: %w: %w", what, fence.ErrUnavailable, err)
		}
		return fmt.Errorf("idempotency: postgres %s: %w", what, err)
	case strings.Contains(err.Error(), "closed pool"), strings.Contains(err.Error(), "conn closed"):
		return fmt.Errorf("idempotency: postgres %s: %w: %w", what, fence.ErrClosed, err)
	}
	return fmt.Errorf("idempotency: postgres %s: %w: %w", what, fence.ErrUnavailable, err)
}

// ErrSchema means the store's table is missing or has another shape (run
// CreateSchema). It is sqlguard.ErrSchema, the one sentinel of every SQL store.
var ErrSchema = sqlguard.ErrSchema
