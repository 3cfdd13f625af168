package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
	"github.com/jackc/pgx/v5"
)

// DefaultKVTable is the table a KV uses when KVOptions.Table is empty.
const DefaultKVTable = "fence_kv"

// MaxValueLen is the largest value KV.Put stores, in bytes (1 MiB).
const MaxValueLen = 1 << 20

// KVSchema is the DDL of a KV's table under its default name (see
// KV.CreateSchema). A NULL value marks a key that was fenced but never written.
// fence_attempts are the attempt ids of the puts and deletes applied under the
// row's fence, oldest first (fence.RememberAttempt); the ALTER TABLE adds the
// column to a table made by an earlier version's DDL (instantly: a constant
// default).
const KVSchema = `CREATE TABLE IF NOT EXISTS fence_kv (
    key            text PRIMARY KEY,
    value          bytea,
    fence_name     text   NOT NULL DEFAULT '',
    fence_token    bigint NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
    fence_lease    text   NOT NULL DEFAULT '',
    fence_attempts text[] NOT NULL DEFAULT '{}'
);
ALTER TABLE fence_kv ADD COLUMN IF NOT EXISTS fence_attempts text[] NOT NULL DEFAULT '{}'`

// KVOptions configure a KV. The zero value (or nil) is usable.
type KVOptions struct {
	// Table is the table, "table" or "schema.table". Default DefaultKVTable.
	Table string
	// LockTable, if set, is the lock table (LockerOptions.Table of the Locker whose
	// grants the KV fences for, "table" or "schema.table"): the KV then refuses a
	// fence that Locker never issued (P9), checked in the statement that writes.
	// Empty: the KV guards with the tokens of any lock and checks no issuance.
	LockTable string
}

// KV is a fenced key-value table on PostgreSQL, a row fence: each key's row holds
// its value and the fence that wrote it, and Put is one upsert that writes both
// only if the fence is admitted. It implements fence.KV, fence.Guard (Fence
// advances a key's fence, keeping its value) and fence.Purger. With
// KVOptions.LockTable it also refuses fences its Locker never issued (see the
// package documentation). It is safe for concurrent use.
type KV struct {
	db    DB
	table string // quoted, or "" with err set
	locks string // the quoted lock table, "" if none
	err   error

	get, put, fence, del, purge, issued string
}

var (
	_ fence.KV     = (*KV)(nil)
	_ fence.Guard  = (*KV)(nil)
	_ fence.Purger = (*KV)(nil)
)

// NewKV returns a KV on db. A malformed KVOptions.Table or LockTable is reported,
// matching fence.ErrInvalid, by every method.
func NewKV(db DB, opts *KVOptions) *KV {
	var o KVOptions
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultKVTable
	}
	kv := &KV{db: db}
	kv.table, kv.err = quoteIdent("table", o.Table, true)
	if kv.err == nil && o.LockTable != "" {
		kv.locks, kv.err = quoteIdent("lock table", o.LockTable, true)
	}
	if kv.err == nil && db == nil {
		kv.err = fmt.Errorf("postgres: kv: nil DB: %w", fence.ErrInvalid)
	}
	kv.build()
	return kv
}

// build makes the KV's statements. Parameters: $1 key, $2 lock name, $3 token,
// $4 lease id, $5 value. Every write is one statement whose WHERE clauses are
// P9's check (with a lock table) and fence.Admit's rule; a refused write returns
// no row and changes nothing.
func (kv *KV) build() {
	t := kv.table
	// issued holds while the lock table's row of $2 has issued token $3 (its
	// counter is at least $3) to the lease $4: no lease id, or neither the last
	// exclusive grant (token, lease) nor a semaphore or shared holder recorded
	// with token $3 has another lease.
	ok := "true"
	if kv.locks != "" {
		ok = `EXISTS (SELECT FROM ` + kv.locks + ` l WHERE l.name = $2::text AND l.token >= $3::bigint AND NOT ` + otherLeaseSQL("l", "$3::bigint", "$4::text") +
			` AND NOT ` + leaseRequiredSQL("$3::bigint", "$4::text") + `)`
		kv.issued = `SELECT l.token, ` + otherLeaseSQL("l", "$2::bigint", "$3::text") + `, ` + leaseRequiredSQL("$2::bigint", "$3::text") +
			` FROM ` + kv.locks + ` l WHERE l.name = $1`
	}
	admit := admitSQL("r.fence_name", "r.fence_token", "r.fence_lease", "$2::text", "$3::bigint", "$4::text")
	set := `fence_name = $2::text, fence_token = $3::bigint, fence_lease = $4::text`
	same := `(r.fence_name = $2::text AND r.fence_token = $3::bigint AND r.fence_lease = $4::text)`
	putReplayed, putRemember := attemptSQL(same, "$6::text")
	kv.put = `INSERT INTO ` + t + ` AS r (key, fence_name, fence_token, fence_lease, value, fence_attempts)
SELECT $1::text, $2::text, $3::bigint, $4::text, $5::bytea, ` + firstAttemptSQL("$6::text") + ` WHERE ` + ok + `
ON CONFLICT (key) DO UPDATE SET value = CASE WHEN ` + putReplayed + ` THEN r.value ELSE $5::bytea END, ` + set + `,
    fence_attempts = CASE WHEN ` + putReplayed + ` THEN r.fence_attempts ELSE ` + putRemember + ` END
WHERE ` + putReplayed + ` OR ` + admit + `
RETURNING true`
	kv.fence = `INSERT INTO ` + t + ` AS r (key, fence_name, fence_token, fence_lease)
SELECT $1::text, $2::text, $3::bigint, $4::text WHERE ` + ok + `
ON CONFLICT (key) DO UPDATE SET ` + set + `,
    fence_attempts = CASE WHEN ` + same + ` THEN r.fence_attempts ELSE '{}'::text[] END
WHERE ` + admit + `
RETURNING true`
	delReplayed, delRemember := attemptSQL(same, "$5::text")
	kv.del = `UPDATE ` + t + ` AS r SET value = CASE WHEN ` + delReplayed + ` THEN r.value END, ` + set + `,
    fence_attempts = CASE WHEN ` + delReplayed + ` THEN r.fence_attempts ELSE ` + delRemember + ` END
WHERE r.key = $1::text AND (` + delReplayed + ` OR (r.value IS NOT NULL AND ` + admit + `)) AND ` + ok + `
RETURNING true`
	kv.purge = `DELETE FROM ` + t + ` WHERE key = $1`
	kv.get = `SELECT value, fence_name, fence_token, fence_lease FROM ` + t + ` WHERE key = $1`
}

// attemptSQL returns, for a write whose attempt id is the parameter id (empty for
// none) on a row r whose fence is the write's when same holds, the condition
// that r remembers the id under that fence (the write already applied: it
// writes nothing, P3), and the row's attempt ids after the write: its own if its
// fence stays, none if it moves, then id, the newest fence.MaxWriteAttempts.
func attemptSQL(same, id string) (replayed, remember string) {
	replayed = `(` + id + ` <> '' AND ` + same + ` AND ` + id + ` = ANY(r.fence_attempts))`
	kept := fmt.Sprintf(`(CASE WHEN %s THEN r.fence_attempts[greatest(1, cardinality(r.fence_attempts) - %d):] ELSE '{}'::text[] END)`, same, fence.MaxWriteAttempts-2)
	remember = `(CASE WHEN ` + id + ` = '' THEN (CASE WHEN ` + same + ` THEN r.fence_attempts ELSE '{}'::text[] END) ELSE ` + kept + ` || ` + id + ` END)`
	return replayed, remember
}

// firstAttemptSQL is the attempt ids of a new row written by a write whose
// attempt id is the parameter id: id, or none.
func firstAttemptSQL(id string) string {
	return `(CASE WHEN ` + id + ` = '' THEN '{}'::text[] ELSE ARRAY[` + id + `] END)`
}

// otherLeaseSQL is the condition that the lock row l records token tok as issued
// to a lease other than lease (never when lease is ”): the row's last exclusive
// grant (token and lease columns; a semaphore or shared grant leaves lease empty)
// or one of its semaphore or shared holders ({"l": lease, "t": token}).
func otherLeaseSQL(l, tok, lease string) string {
	return `(` + lease + ` <> '' AND ((` + l + `.token = ` + tok + ` AND ` + l + `.lease <> '' AND ` + l + `.lease <> ` + lease + `)
    OR EXISTS (SELECT FROM jsonb_array_elements(coalesce(` + l + `.holders, '[]')) h
        WHERE (h->>'t')::bigint = ` + tok + ` AND h->>'l' <> ` + lease + `)))`
}

// leaseRequiredSQL is the condition that lease is ” and a live lease of the
// lock row l (the last exclusive grant, or a semaphore or shared holder) holds
// token tok (P9): stored without a lease, the fence would refuse that lease's
// own writes. Live is judged by the database's clock, as grants judge it; a
// lease that ended never lives again, so the statement's snapshot decides.
func leaseRequiredSQL(tok, lease string) string {
	return `(` + lease + ` = '' AND ((l.token = ` + tok + ` AND l.lease <> '' AND l.expires_at > clock_timestamp())
    OR EXISTS (SELECT FROM ` + liveHolders + ` AND (h->>'t')::bigint = ` + tok + `)))`
}

// CreateSchema creates the KV's table if it does not exist (KVSchema under the
// configured name). It returns fence.ErrUnavailable if the database cannot be
// reached.
func (kv *KV) CreateSchema(ctx context.Context) error {
	if kv.err != nil {
		return kv.err
	}
	ddl := strings.NewReplacer(" EXISTS "+DefaultKVTable+" ", " EXISTS "+kv.table+" ",
		"ALTER TABLE "+DefaultKVTable+" ", "ALTER TABLE "+kv.table+" ").Replace(KVSchema)
	if _, err := kv.db.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("postgres: create table %s: %w", kv.table, dbErr(err))
	}
	return nil
}

// Put stores value under key with fence f if f is admitted for key, in one
// statement. It returns a *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if f is refused, and with a lock
// table a *fence.UnissuedTokenError (fence.ErrUnissuedToken) if its Locker never
// issued f, or a *fence.LeaseRequiredError (fence.ErrLeaseRequired) if f has no
// lease id and its token is a live lease's; in each case nothing changed. It returns fence.ErrInvalid for a bad
// key or fence or a value longer than MaxValueLen, ErrCorrupt for a row edited
// into something KV never writes, ErrSchema for a missing table or column,
// ErrConflict on a serialization failure and fence.ErrUnavailable if the
// connection failed.
//
// A Put whose context names its write by an attempt id (fence.WithWriteAttempt)
// claims the id in the key's row, in the same statement; a later attempt with
// the same id and f, while f is still key's fence, returns nil and changes
// nothing (P3). A malformed id is fence.ErrInvalid. The table needs the
// fence_attempts column: CreateSchema adds it to a table of an earlier version.
func (kv *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if err := checkFence(kv.err, key, f); err != nil {
		return fmt.Errorf("postgres: put: %w", err)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("postgres: put %q: value is %d bytes, more than %d: %w", key, len(value), MaxValueLen, fence.ErrInvalid)
	}
	if value == nil {
		value = []byte{} // NULL means "no value": fenced only, or deleted
	}
	attempt, err := fence.AttemptKey(ctx, "put", value)
	if err != nil {
		return fmt.Errorf("postgres: put %q: %w", key, err)
	}
	return kv.write(ctx, "put", kv.put, key, f, value, attempt)
}

// Fence advances key's fence to f without changing its value. It returns what
// Put returns.
func (kv *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	if err := checkFence(kv.err, key, f); err != nil {
		return fmt.Errorf("postgres: fence: %w", err)
	}
	return kv.write(ctx, "fence", kv.fence, key, f)
}

// Delete removes key's value if f is admitted, as Put admits it (P9 included with
// a lock table), and records f as the key's fence, in one statement: the fence
// stays, so a stale writer is still refused, and Get returns the key with a nil
// value. It returns Put's refusals first, then fence.ErrNotFound if key holds no
// value (never written, only fenced or already deleted); in each case nothing
// changed. Its other errors are Put's. An attempt id claims and replays as in
// Put: a later attempt of an applied Delete returns nil.
func (kv *KV) Delete(ctx context.Context, key string, f fence.Fence) error {
	if err := checkFence(kv.err, key, f); err != nil {
		return fmt.Errorf("postgres: delete: %w", err)
	}
	attempt, err := fence.AttemptKey(ctx, "delete", nil)
	if err != nil {
		return fmt.Errorf("postgres: delete %q: %w", key, err)
	}
	return kv.write(ctx, "delete", kv.del, key, f, attempt)
}

// Purge deletes key's row, its value and its fence (see fence.Purger), so the
// next write under any lock and token is admitted: the one way a key's fence goes
// back, for an administrator. It returns fence.ErrNotFound if key has no row,
// fence.ErrInvalid for a bad key, and the database errors of Put.
func (kv *KV) Purge(ctx context.Context, key string) error {
	if kv.err != nil {
		return kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("postgres: purge: %w", err)
	}
	tag, err := kv.db.Exec(ctx, kv.purge, key)
	if err != nil {
		return fmt.Errorf("postgres: purge %q: %w", key, dbErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: purge %q: %w", key, fence.ErrNotFound)
	}
	return nil
}

// write runs the fenced statement stmt of op on key with f (and the value, for a
// put). When it writes nothing, write tells why: P9's check (with a lock table),
// then fence.Admit against the row's fence, then, for a delete, a row without a
// value. A refusal none of these explains (the row changed in between) runs the
// statement again, at most maxFenceAttempts times.
func (kv *KV) write(ctx context.Context, op, stmt, key string, f fence.Fence, value ...any) error {
	args := append([]any{key, f.Name, int64(f.Token), f.LeaseID}, value...)
	for attempt := 1; ; attempt++ {
		var ok bool
		err := kv.db.QueryRow(ctx, stmt, args...).Scan(&ok)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres: %s %q: %w", op, key, dbErr(err))
		}
		if err := kv.checkIssued(ctx, f); err != nil {
			return fmt.Errorf("postgres: %s %q: %w", op, key, err)
		}
		it, err := kv.read(ctx, key)
		switch {
		case errors.Is(err, fence.ErrNotFound) && op == "delete":
			return fmt.Errorf("postgres: delete %q: %w", key, fence.ErrNotFound)
		case errors.Is(err, fence.ErrNotFound):
			// The conflicting row was purged since: try again.
		case err != nil:
			return fmt.Errorf("postgres: %s %q: %w", op, key, err)
		default:
			if err := fence.Admit(key, it.Fence, f); err != nil {
				return fmt.Errorf("postgres: %s: %w", op, err)
			}
			if op == "delete" && it.Value == nil {
				return fmt.Errorf("postgres: delete %q: %w", key, fence.ErrNotFound)
			}
		}
		if attempt == maxFenceAttempts {
			return fmt.Errorf("postgres: %s %q: %w: the row kept changing under concurrent writers", op, key, fence.ErrUnavailable)
		}
	}
}

// checkIssued is P9's check of f against the lock table as it is now (nil without
// a lock table): a *fence.UnissuedTokenError if f.Name has no row (never granted),
// its counter is below f's token, or the row records f's token as issued to
// another lease; a *fence.LeaseRequiredError if f has no lease id and a live
// lease of the row holds its token. It explains a refused write; the write's own statement is what
// enforces the rule.
func (kv *KV) checkIssued(ctx context.Context, f fence.Fence) error {
	if kv.locks == "" {
		return nil
	}
	var last int64
	var other, live bool
	err := kv.db.QueryRow(ctx, kv.issued, f.Name, int64(f.Token), f.LeaseID).Scan(&last, &other, &live)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return dbErr(err)
	}
	if err := fence.CheckIssued(f, fence.Token(max(last, 0))); err != nil {
		return err
	}
	if other {
		return &fence.UnissuedTokenError{Lock: f.Name, Token: f.Token, Last: fence.Token(last), OtherLease: true}
	}
	return fence.CheckLeaseGiven(f, live)
}

// read returns key's row as Get does, without the method's wording.
func (kv *KV) read(ctx context.Context, key string) (fence.Item, error) {
	var (
		value []byte
		s     storedFence
	)
	err := kv.db.QueryRow(ctx, kv.get, key).Scan(&value, &s.name, &s.token, &s.lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.Item{}, fence.ErrNotFound
	}
	if err != nil {
		return fence.Item{}, dbErr(err)
	}
	f, err := s.fence()
	if err == nil && f.Token == 0 {
		err = fmt.Errorf("%w: the row has no fence", ErrCorrupt)
	}
	if err != nil {
		return fence.Item{}, err
	}
	return fence.Item{Value: value, Fence: f}, nil
}

// Get returns the value under key and the fence that last wrote, deleted or fenced
// it (a key only fenced, or deleted, has a nil value). It returns
// fence.ErrNotFound if key was never written nor fenced (or was purged),
// fence.ErrInvalid for a bad key, ErrCorrupt for a row edited into something KV
// never writes, and the database errors of Put.
func (kv *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	if kv.err != nil {
		return fence.Item{}, kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, fmt.Errorf("postgres: get: %w", err)
	}
	it, err := kv.read(ctx, key)
	if err != nil {
		return fence.Item{}, fmt.Errorf("postgres: get %q: %w", key, err)
	}
	return it, nil
}
