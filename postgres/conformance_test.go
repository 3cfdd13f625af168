package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5"
)

func TestLocker_Conformance(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return openLocker(t, sharedPool, nil) })
}

func TestKV_Conformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded {
		return postgres.NewKV(sharedPool, nil)
	})
}

// TestGuard_Conformance runs the guard suite on the resource fence: a value
// table without fence columns (guarded_kv), written in the transaction that
// FenceTx advanced the fence in.
func TestGuard_Conformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded {
		return &resourceKV{Guard: postgres.NewGuard(sharedPool, nil)}
	})
}

// resourceKV is a fence.KV whose values live in guarded_kv and whose fences live
// in the Guard's table.
type resourceKV struct{ *postgres.Guard }

func (kv *resourceKV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if len(value) > postgres.MaxValueLen {
		return fmt.Errorf("test kv: put %q: %d bytes: %w", key, len(value), fence.ErrInvalid)
	}
	if value == nil {
		value = []byte{}
	}
	return kv.Do(ctx, key, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO guarded_kv (key, value) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
		return err
	})
}

// Delete deletes key's value in the transaction that advanced its fence; a key
// with no value rolls both back.
func (kv *resourceKV) Delete(ctx context.Context, key string, f fence.Fence) error {
	return kv.Do(ctx, key, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM guarded_kv WHERE key = $1`, key)
		if err == nil && tag.RowsAffected() == 0 {
			err = fence.ErrNotFound
		}
		return err
	})
}

func (kv *resourceKV) Get(ctx context.Context, key string) (fence.Item, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, err
	}
	var it fence.Item
	var tok int64
	err := sharedPool.QueryRow(ctx, `SELECT d.value, r.name, r.token, r.lease
FROM fence_resources r LEFT JOIN guarded_kv d ON d.key = r.resource WHERE r.resource = $1`, key).
		Scan(&it.Value, &it.Fence.Name, &tok, &it.Fence.LeaseID)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.Item{}, fmt.Errorf("test kv: get %q: %w", key, fence.ErrNotFound)
	}
	it.Fence.Token = fence.Token(tok)
	return it, err
}
