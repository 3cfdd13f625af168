package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/sqlguardtest"
	"github.com/fencelock/fence/sqlite"
)

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
	sqlguardtest.WantToken(t, g, r, 1)
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
