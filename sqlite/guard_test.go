package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlite"
)

// SQLite's write lock serialises writers: a second transaction (BEGIN IMMEDIATE)
// waits for the first, then sees its fence.
func TestGuard_FenceTx_RowLockSerialisesWriters(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(t)
	tx1, err := d.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.FenceTx(ctx, tx1, r, fenceOf("lock", 5, "a")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		tx2, err := d.BeginTx(ctx, nil) // BEGIN IMMEDIATE waits for tx1
		if err != nil {
			done <- err
			return
		}
		defer tx2.Rollback()
		done <- g.FenceTx(ctx, tx2, r, fenceOf("lock", 4, "b"))
	}()
	<-started
	select {
	case err := <-done:
		t.Fatalf("second writer did not wait for the first transaction: %v", err)
	default:
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	wantStale(t, <-done, 5, false)
}

func TestGuard_WrongSchema_MissingLeaseColumn_ErrSchema(t *testing.T) {
	d := db(t)
	table := uniqueTable(t, d, "CREATE TABLE %s (resource TEXT PRIMARY KEY, name TEXT NOT NULL, token INTEGER NOT NULL)")
	g := sqlite.NewGuard(d, &sqlite.GuardOptions{Table: table})
	if err := g.Fence(context.Background(), resource(t), fenceOf("lock", 1, "a")); !errors.Is(err, sqlite.ErrSchema) {
		t.Fatalf("want sqlite.ErrSchema, got %v", err)
	}
}

func TestGuard_MissingTable_ErrSchema(t *testing.T) {
	g := sqlite.NewGuard(db(t), &sqlite.GuardOptions{Table: "no_such_fences"})
	if err := g.Fence(context.Background(), resource(t), fenceOf("lock", 1, "a")); !errors.Is(err, sqlite.ErrSchema) {
		t.Fatalf("want sqlite.ErrSchema, got %v", err)
	}
}

func TestGuard_ClosedDB_ErrClosed(t *testing.T) {
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "closed.db"))
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	err = sqlite.NewGuard(d, nil).Fence(context.Background(), resource(t), fenceOf("lock", 1, "a"))
	if !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("want fence.ErrClosed, got %v", err)
	}
}

// A writer that cannot get the database lock within its busy timeout gets
// ErrConflict, and its fence is not applied.
func TestGuard_BusyDatabase_ErrConflict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	holder, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	g := sqlite.NewGuard(holder, nil)
	ctx := context.Background()
	if err := g.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	r := resource(t)
	if err := g.FenceTx(ctx, tx, r, fenceOf("lock", 1, "a")); err != nil {
		t.Fatal(err)
	}
	impatient, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	err = sqlite.NewGuard(impatient, nil).Fence(ctx, r, fenceOf("lock", 2, "b"))
	if !errors.Is(err, sqlite.ErrConflict) {
		t.Fatalf("want sqlite.ErrConflict, got %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := g.Highest(ctx, r); err != nil || got.Token != 1 {
		t.Fatalf("want the holder's fence 1 to stand, got %v %v", got, err)
	}
}

func TestOpen_BadPath_Invalid(t *testing.T) {
	for _, p := range []string{"", "a?b"} {
		if _, err := sqlite.Open(p); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Open(%q): want fence.ErrInvalid, got %v", p, err)
		}
	}
	if _, err := sqlite.Open(filepath.Join(t.TempDir(), "no", "such", "dir", "x.db")); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Open in a missing directory: want fence.ErrUnavailable, got %v", err)
	}
}

func TestSchema_MatchesGuardDDL(t *testing.T) {
	g := sqlite.NewGuard(&sql.DB{}, nil)
	if g.SchemaSQL() != sqlite.Schema {
		t.Fatalf("default guard DDL differs from Schema:\nwant %s\ngot  %s", sqlite.Schema, g.SchemaSQL())
	}
}
