package sqlguardtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/sqlguard"
)

// KVTests runs the KV tests and the fencetest guard suite, over the KV (the row
// fence) and over a plain table written in FenceTx's transaction (the resource
// fence), against b.
func KVTests[D sqlguard.Dialector](t *testing.T, b Backend[D]) {
	t.Run("PutGetFence", b.kvPutGetFence)
	// The row fence: the exported KV passes the guard suite.
	t.Run("Conformance_RowFence", func(t *testing.T) {
		fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return b.NewKV(b.DB(t)) })
	})
	// The resource fence: a plain data table written in the transaction that
	// FenceTx fences passes the guard suite.
	t.Run("Conformance_ResourceFence", func(t *testing.T) {
		fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded {
			d := b.DB(t)
			data := b.table(t, d, "CREATE TABLE %s (k {NAME} PRIMARY KEY, v {BLOB} NOT NULL,"+
				" name {NAME} NOT NULL, token {INT} NOT NULL, lease {LEASE} NOT NULL)")
			return &txKV[D]{b: &b, db: d, g: b.NewGuard(d, ""), data: "`" + data + "`"}
		})
	})
}

func (b *Backend[D]) kvPutGetFence(t *testing.T) {
	kv := b.NewKV(b.DB(t))
	ctx := context.Background()
	k := Resource(t)
	if _, err := kv.Get(ctx, k); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get of a new key: want fence.ErrNotFound, got %v", err)
	}
	if err := kv.Fence(ctx, k, FenceOf("l", 2, "a")); err != nil {
		t.Fatal(err)
	}
	it, err := kv.Get(ctx, k)
	if err != nil || it.Value != nil || it.Fence != FenceOf("l", 2, "a") {
		t.Fatalf("Get of a fenced key: want nil value, fence l#2 a, got %q %+v %v", it.Value, it.Fence, err)
	}
	WantStale(t, kv.Put(ctx, k, []byte("zombie"), FenceOf("l", 1, "z")), 2, false)
	if err := kv.Put(ctx, k, []byte("v1"), FenceOf("l", 2, "a")); err != nil {
		t.Fatal(err)
	}
	if it, err := kv.Get(ctx, k); err != nil || !bytes.Equal(it.Value, []byte("v1")) {
		t.Fatalf("want v1, got %q %v", it.Value, err)
	}
	if err := kv.Put(ctx, k, make([]byte, sqlguard.MaxValueLen+1), FenceOf("l", 3, "b")); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("oversized value: want fence.ErrInvalid, got %v", err)
	}
}

// txKV is a fenced key-value view over an unfenced table: every Put runs FenceTx
// and then the plain write in one transaction.
type txKV[D sqlguard.Dialector] struct {
	b    *Backend[D]
	db   *sql.DB
	g    *sqlguard.Guard[D]
	data string
}

func (kv *txKV[D]) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if value == nil {
		value = []byte{}
	}
	return InTx(ctx, kv.db, func(tx *sql.Tx) error {
		if err := kv.g.FenceTx(ctx, tx, key, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+kv.data+" (k, v, name, token, lease) VALUES (?, ?, ?, ?, ?)"+
			kv.b.Upsert("k", "v", "name", "token", "lease"),
			key, value, f.Name, int64(f.Token), f.LeaseID)
		return err
	})
}

func (kv *txKV[D]) Get(ctx context.Context, key string) (fence.Item, error) {
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

func (kv *txKV[D]) Fence(ctx context.Context, key string, f fence.Fence) error {
	return kv.g.Fence(ctx, key, f)
}

// Delete runs FenceTx and then removes the plain row in one transaction; with
// no row it rolls back (the fence is not recorded) and returns fence.ErrNotFound.
func (kv *txKV[D]) Delete(ctx context.Context, key string, f fence.Fence) error {
	return InTx(ctx, kv.db, func(tx *sql.Tx) error {
		if err := kv.g.FenceTx(ctx, tx, key, f); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM "+kv.data+" WHERE k = ?", key)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("delete %q: key holds no value: %w", key, fence.ErrNotFound)
		}
		return nil
	})
}
