package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence/postgres"
)

// openPostgresStore serves locks and the fenced KV from PostgreSQL: --store
// postgres://user:pass@host:5432/db?sslmode=disable. Tables are created if missing,
// so several servers on one database share locks and data.
func openPostgresStore(ctx context.Context, u *url.URL, _ string) (*servedStore, error) {
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("serve: postgres store %s: %w", redactURL(u.String()), err)
	}
	locker := postgres.NewLocker(pool, nil)
	// The KV refuses tokens the locker's table never issued (P9).
	kv := postgres.NewKV(pool, &postgres.KVOptions{LockTable: postgres.DefaultLockTable})
	for _, create := range []func(context.Context) error{locker.CreateSchema, kv.CreateSchema} {
		if err := create(ctx); err != nil {
			locker.Close()
			pool.Close()
			return nil, fmt.Errorf("serve: postgres store %s: %w", redactURL(u.String()), err)
		}
	}
	return &servedStore{
		locker: locker,
		kv:     kv,
		close: func() error {
			err := locker.Close()
			pool.Close()
			return err
		},
		desc: "postgres:" + redactURL(u.String()),
	}, nil
}
