package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/sqlite"
)

// The row fence: the exported KV passes the guard suite.
func TestConformance_KV_RowFence(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return sqlite.NewKV(db(t), nil) })
}

// The resource fence: a plain data table written in the transaction that FenceTx
// fences passes the guard suite.
func TestConformance_ResourceFence(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded {
		d := db(t)
		data := uniqueTable(t, d, "CREATE TABLE %s (k TEXT PRIMARY KEY, v BLOB NOT NULL,"+
			" name TEXT NOT NULL, token INTEGER NOT NULL, lease TEXT NOT NULL)")
		return &txKV{db: d, g: sqlite.NewGuard(d, nil), data: `"` + data + `"`}
	})
}

// txKV is a fenced key-value view over an unfenced table: every Put runs FenceTx
// and then the plain write in one transaction.
type txKV struct {
	db   *sql.DB
	g    *sqlite.Guard
	data string
}

func (kv *txKV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if value == nil {
		value = []byte{}
	}
	return inTx(ctx, kv.db, func(tx *sql.Tx) error {
		if err := kv.g.FenceTx(ctx, tx, key, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+kv.data+" (k, v, name, token, lease) VALUES (?, ?, ?, ?, ?)"+
			" ON CONFLICT (k) DO UPDATE SET v = excluded.v, name = excluded.name, token = excluded.token, lease = excluded.lease",
			key, value, f.Name, int64(f.Token), f.LeaseID)
		return err
	})
}

func (kv *txKV) Get(ctx context.Context, key string) (fence.Item, error) {
	var it fence.Item
	err := kv.db.QueryRowContext(ctx, "SELECT v, name, token, lease FROM "+kv.data+" WHERE k = ?", key).
		Scan(&it.Value, &it.Fence.Name, &it.Fence.Token, &it.Fence.LeaseID)
	if errors.Is(err, sql.ErrNoRows) {
		f, err := kv.g.Highest(ctx, key)
		if err != nil {
			return fence.Item{}, err
		}
		return fence.Item{Fence: f}, nil // fenced, never written
	}
	if err != nil {
		return fence.Item{}, fmt.Errorf("get %q: %w", key, err)
	}
	return it, nil
}

func (kv *txKV) Fence(ctx context.Context, key string, f fence.Fence) error {
	return kv.g.Fence(ctx, key, f)
}
