package idempotency_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence/idempotency"
	"github.com/fencelock/fence/idempotency/boltstore"
	"github.com/fencelock/fence/idempotency/pgstore"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// dsn is the database of the package's one PostgreSQL server (empty under -short);
// each test uses its own table.
var dsn string

func TestMain(m *testing.M) {
	os.Exit(servertest.RunWithPostgres(m, "idempotency", &dsn))
}

// testStore is a Store under test with a way to move its clock forward.
type testStore struct {
	name    string
	store   idempotency.Store
	advance func(t *testing.T, d time.Duration)
}

// stores returns a fresh bolt store (manual clock) and, unless -short, a fresh
// PostgreSQL store (own table; time moves by shifting the stored times back).
func stores(t *testing.T) []testStore {
	t.Helper()
	clock := inmem.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bs, err := boltstore.Open(filepath.Join(t.TempDir(), "idem.db"), &boltstore.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	out := []testStore{{name: "bolt", store: bs, advance: func(_ *testing.T, d time.Duration) { clock.Advance(d) }}}
	if testing.Short() {
		return out
	}
	table := servertest.TableName(t)
	pool := servertest.Pool(t, dsn)
	ps := pgstore.New(pool, &pgstore.Options{Table: table})
	ctx := context.Background()
	if err := ps.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`"`) })
	out = append(out, testStore{name: "postgres", store: ps, advance: func(t *testing.T, d time.Duration) {
		_, err := pool.Exec(ctx, `UPDATE "`+table+`" SET locked_until = locked_until - $1 * interval '1 millisecond', expires_at = expires_at - $1 * interval '1 millisecond'`, d.Milliseconds())
		if err != nil {
			t.Fatal(err)
		}
	}})
	return out
}

// eachStore runs f as a subtest over each of stores(t).
func eachStore(t *testing.T, f func(t *testing.T, ts testStore)) {
	t.Helper()
	for _, ts := range stores(t) {
		t.Run(ts.name, func(t *testing.T) { f(t, ts) })
	}
}
