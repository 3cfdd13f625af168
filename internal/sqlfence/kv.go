package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// KV is a fenced key-value table: every key is a row with its own fence columns,
// written with Row.Upsert in one statement.
type KV struct {
	d        *Dialect
	db       DB
	row      *Row
	schema   string
	get      string
	maxValue int
	err      error
}

// NewKV returns a KV of dialect d over db and table; schema is the DDL of the
// default table defaultTable, maxValue the longest value Put accepts. A bad table
// name or nil db is reported by every method as fence.ErrInvalid.
func NewKV(d *Dialect, db DB, table, schema, defaultTable string, maxValue int) *KV {
	kv := &KV{d: d, db: db, maxValue: maxValue, row: NewRow(d, RowSpec{Table: table, Key: "k", Columns: []string{"v"}})}
	q, err := d.QuoteIdent(table)
	switch {
	case err != nil:
		kv.err = d.Errorf("new kv: %w", err)
	case db == nil:
		kv.err = d.Errorf("new kv: %w", ErrNilDB)
	}
	kv.schema = strings.Replace(schema, d.Quote+defaultTable+d.Quote, q, 1)
	kv.get = "SELECT v, fence_name, fence_token, fence_lease FROM " + q + " WHERE k = ?"
	return kv
}

// CreateSchema creates the KV table if it does not exist, returning the
// translated error of the database.
func (kv *KV) CreateSchema(ctx context.Context) error {
	if kv.err != nil {
		return kv.err
	}
	if _, err := kv.db.ExecContext(ctx, kv.schema); err != nil {
		return kv.d.Wrap("create kv schema", err)
	}
	return nil
}

// Put stores value under key if f is admitted. It returns the refusal of
// Row.Upsert and fence.ErrInvalid for a bad key or fence or a value too long.
func (kv *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := driver.ValidateKey(key); err != nil {
		return kv.d.Errorf("put: %w", err)
	}
	if len(value) > kv.maxValue {
		return kv.d.Errorf("put %q: %w", key, &fence.InvalidError{Field: "value", Value: fmt.Sprintf("%d bytes", len(value)), Reason: fmt.Sprintf("is longer than %d bytes", kv.maxValue)})
	}
	if value == nil {
		value = []byte{} // NULL means "fenced, never written"
	}
	return kv.row.Upsert(ctx, kv.db, f, key, value)
}

// Get returns the value under key and its fence: fence.ErrNotFound if key was
// never written nor fenced; a key only fenced has a nil Value.
func (kv *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	if kv.err != nil {
		return fence.Item{}, kv.err
	}
	if err := driver.ValidateKey(key); err != nil {
		return fence.Item{}, kv.d.Errorf("get: %w", err)
	}
	var v []byte
	var name, lease sql.NullString
	var token sql.NullInt64
	err := kv.db.QueryRowContext(ctx, kv.get, key).Scan(&v, &name, &token, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Item{}, kv.d.Errorf("get %q: %w", key, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Item{}, kv.d.Wrap(fmt.Sprintf("get %q", key), err)
	}
	if !name.Valid || !token.Valid || !lease.Valid || token.Int64 <= 0 {
		return fence.Item{}, kv.d.Errorf("get %q: %w: NULL or non-positive fence", key, kv.d.ErrSchema)
	}
	return fence.Item{Value: v, Fence: fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}}, nil
}

// Fence advances key's fence to f without writing a value (see Row.Fence).
func (kv *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := driver.ValidateKey(key); err != nil {
		return kv.d.Errorf("fence: %w", err)
	}
	return kv.row.Fence(ctx, kv.db, f, key)
}
