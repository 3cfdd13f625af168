package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/postgres"
)

// Resource names accepted by Config.Resource: what the workers' counter lives in.
const (
	ResourceServe    = "serve"    // the fenced KV of `fence serve`
	ResourcePostgres = "postgres" // a PostgreSQL table written through postgres.Guard
)

// counterTable is the PostgreSQL table of the postgres resource: one row per key.
const counterTable = "fence_chaos_counter"

// resource is the fenced store of the workers' counter.
type resource interface {
	// fence advances key's fence to f without writing data.
	fence(ctx context.Context, key string, f fence.Fence) error
	// get returns key's value, "" if it has none.
	get(ctx context.Context, key string) (string, error)
	// put writes value under f.
	put(ctx context.Context, key, value string, f fence.Fence) error
	close()
}

// serveResource is the KV of `fence serve` through the HTTP client.
type serveResource struct{ c *fencehttp.Client }

func (r serveResource) fence(ctx context.Context, key string, f fence.Fence) error {
	return r.c.Fence(ctx, key, f)
}

func (r serveResource) get(ctx context.Context, key string) (string, error) {
	item, err := r.c.Get(ctx, key)
	if errors.Is(err, fence.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(item.Value), nil
}

func (r serveResource) put(ctx context.Context, key, value string, f fence.Fence) error {
	return r.c.Put(ctx, key, []byte(value), f)
}

func (serveResource) close() {}

// pgResource is a row of counterTable per key, written through a postgres.Guard
// whose resource fence is advanced in the same transaction as the row's update.
type pgResource struct {
	pool  *pgxpool.Pool
	guard *postgres.Guard
}

// openPostgresResource connects to dsn and creates the guard's fences table and
// counterTable if they are missing.
func openPostgresResource(ctx context.Context, dsn string) (*pgResource, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("chaos: postgres: %w", err)
	}
	g := postgres.NewGuard(pool, nil)
	if err := g.CreateSchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("chaos: postgres: %w", err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+counterTable+" (key text PRIMARY KEY, value text NOT NULL)"); err != nil {
		pool.Close()
		return nil, fmt.Errorf("chaos: postgres: create %s: %w", counterTable, err)
	}
	return &pgResource{pool: pool, guard: g}, nil
}

// reset deletes key's row and fence, so a run starts from nothing.
func (r *pgResource) reset(ctx context.Context, key string) error {
	if _, err := r.pool.Exec(ctx, "DELETE FROM "+counterTable+" WHERE key = $1", key); err != nil {
		return fmt.Errorf("chaos: postgres: reset %q: %w", key, err)
	}
	if _, err := r.pool.Exec(ctx, "DELETE FROM "+postgres.DefaultGuardTable+" WHERE resource = $1", key); err != nil {
		return fmt.Errorf("chaos: postgres: reset fence %q: %w", key, err)
	}
	return nil
}

func (r *pgResource) fence(ctx context.Context, key string, f fence.Fence) error {
	return r.guard.Fence(ctx, key, f)
}

func (r *pgResource) get(ctx context.Context, key string) (string, error) {
	var v string
	err := r.pool.QueryRow(ctx, "SELECT value FROM "+counterTable+" WHERE key = $1", key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("chaos: postgres: read %q: %w", key, err)
	}
	return v, nil
}

func (r *pgResource) put(ctx context.Context, key, value string, f fence.Fence) error {
	return r.guard.Do(ctx, key, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+counterTable+" (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value", key, value)
		return err
	})
}

func (r *pgResource) close() { r.pool.Close() }

// validResource reports whether name is a known resource ("" means serve).
func validResource(name string) error {
	switch name {
	case "", ResourceServe, ResourcePostgres:
		return nil
	}
	return fmt.Errorf("chaos: %w: unknown resource %q (have %s)", fence.ErrInvalid, name, strings.Join([]string{ResourceServe, ResourcePostgres}, ", "))
}
