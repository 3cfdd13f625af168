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

func TestGuard_Fence_HigherAcceptedLowerRejectedWithHighest(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(t)
	if err := g.Fence(ctx, r, fenceOf("lock", 5, "a")); err != nil {
		t.Fatalf("first fence: want nil, got %v", err)
	}
	wantStale(t, g.Fence(ctx, r, fenceOf("lock", 4, "b")), 5, false)
	if err := g.Fence(ctx, r, fenceOf("lock", 9, "c")); err != nil {
		t.Fatalf("higher fence: want nil, got %v", err)
	}
	got, err := g.Highest(ctx, r)
	if err != nil || got != fenceOf("lock", 9, "c") {
		t.Fatalf("Highest: want lock#9 lease c, got %+v, %v", got, err)
	}
}

func TestGuard_Fence_SameLeaseAgainAccepted_EqualTokenOtherLeaseRejected(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(t)
	for i := 0; i < 3; i++ {
		if err := g.Fence(ctx, r, fenceOf("lock", 7, "lease-a")); err != nil {
			t.Fatalf("write %d under one lease: want nil, got %v", i, err)
		}
	}
	wantStale(t, g.Fence(ctx, r, fenceOf("lock", 7, "lease-b")), 7, true)
	wantStale(t, g.Fence(ctx, r, fenceOf("lock", 7, "")), 7, true)
}

func TestGuard_Fence_EmptyLease_EqualTokenRejected(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(t)
	if err := g.Fence(ctx, r, fenceOf("lock", 3, "")); err != nil {
		t.Fatalf("first fence without lease: want nil, got %v", err)
	}
	wantStale(t, g.Fence(ctx, r, fenceOf("lock", 3, "")), 3, true)
	if err := g.Fence(ctx, r, fenceOf("lock", 4, "")); err != nil {
		t.Fatalf("higher fence without lease: want nil, got %v", err)
	}
}

func TestGuard_Fence_OtherNamespaceRejected(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(t)
	if err := g.Fence(ctx, r, fenceOf("payments", 2, "a")); err != nil {
		t.Fatal(err)
	}
	err := g.Fence(ctx, r, fenceOf("reports", 100, "b"))
	var ns *fence.NamespaceError
	if !errors.As(err, &ns) || ns.Want != "payments" || ns.Got != "reports" {
		t.Fatalf("want NamespaceError want=payments got=reports, got %v", err)
	}
	if got, _ := g.Highest(ctx, r); got.Token != 2 || got.Name != "payments" {
		t.Fatalf("fence after a refused namespace: want payments#2, got %v", got)
	}
}

func TestGuard_Highest_NeverFenced_NotFound(t *testing.T) {
	_, err := sqlite.NewGuard(db(t), nil).Highest(context.Background(), resource(t))
	if !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("want fence.ErrNotFound, got %v", err)
	}
}

// A stale FenceTx rolls back the whole transaction: the caller's other writes in it
// are not applied.
func TestGuard_FenceTx_StaleRollsBackCallerWrites(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	data := uniqueTable(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, v TEXT NOT NULL)")
	r := resource(t)

	write := func(f fence.Fence, id int, v string) error {
		tx, err := d.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := g.FenceTx(ctx, tx, r, f); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO `"+data+"` (id, v) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET v = excluded.v", id, v); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := write(fenceOf("lock", 10, "new"), 1, "new holder"); err != nil {
		t.Fatal(err)
	}
	// The zombie tries to overwrite row 1 and insert row 2: a row fence alone could
	// not stop the insert, the resource fence does.
	wantStale(t, write(fenceOf("lock", 9, "zombie"), 1, "zombie"), 10, false)
	wantStale(t, write(fenceOf("lock", 9, "zombie"), 2, "zombie"), 10, false)

	var n int
	var v string
	if err := d.QueryRow("SELECT COUNT(*), MAX(v) FROM `"+data+"`").Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != 1 || v != "new holder" {
		t.Fatalf("want 1 row %q, got %d rows, max %q", "new holder", n, v)
	}
}

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

func TestGuard_BadInput_InvalidAndNothingWritten(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(t)
	cases := []struct {
		name     string
		resource string
		f        fence.Fence
	}{
		{"token 0", r, fenceOf("lock", 0, "a")},
		{"token above 2^53", r, fenceOf("lock", fence.MaxToken+1, "a")},
		{"token above bigint", r, fenceOf("lock", 1<<63, "a")},
		{"empty resource", "", fenceOf("lock", 1, "a")},
		{"empty lock name", r, fenceOf("", 1, "a")},
		{"lease with spaces", r, fenceOf("lock", 1, "a b")},
	}
	for _, c := range cases {
		if err := g.Fence(ctx, c.resource, c.f); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: want fence.ErrInvalid, got %v", c.name, err)
		}
	}
	if err := g.FenceTx(ctx, nil, r, fenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil tx: want fence.ErrInvalid, got %v", err)
	}
	if _, err := g.Highest(ctx, r); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("after only bad input: want no fence (ErrNotFound), got %v", err)
	}
	bad := sqlite.NewGuard(d, &sqlite.GuardOptions{Table: "x`; DROP TABLE y; --"})
	if err := bad.Fence(ctx, r, fenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("bad table name: want fence.ErrInvalid, got %v", err)
	}
	if err := sqlite.NewGuard(nil, nil).Fence(ctx, r, fenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil db: want fence.ErrInvalid, got %v", err)
	}
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

func TestGuard_Do_CommitsOnSuccess_RollsBackOnStaleOrWriteError(t *testing.T) {
	d := db(t)
	g := sqlite.NewGuard(d, nil)
	ctx := context.Background()
	data := uniqueTable(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, v TEXT NOT NULL)")
	r := resource(t)
	insert := func(id int, v string) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO `"+data+"` (id, v) VALUES (?, ?)", id, v)
			return err
		}
	}
	if err := g.Do(ctx, r, fenceOf("lock", 2, "a"), insert(1, "ok")); err != nil {
		t.Fatalf("Do: want nil, got %v", err)
	}
	wantStale(t, g.Do(ctx, r, fenceOf("lock", 1, "z"), insert(2, "zombie")), 2, false)
	boom := errors.New("boom")
	err := g.Do(ctx, r, fenceOf("lock", 3, "b"), func(tx *sql.Tx) error {
		if err := insert(3, "half")(tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failed write: want its error, got %v", err)
	}
	if err := g.Do(ctx, r, fenceOf("lock", 3, "b"), nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("nil write: want fence.ErrInvalid, got %v", err)
	}
	var n int
	if err := d.QueryRow("SELECT COUNT(*) FROM `" + data + "`").Scan(&n); err != nil || n != 1 {
		t.Fatalf("want only the first row (1), got %d rows (%v)", n, err)
	}
	// The failed write's fence rolled back with it.
	if got, err := g.Highest(ctx, r); err != nil || got.Token != 2 {
		t.Fatalf("want the fence of the last committed Do (2), got %v, %v", got, err)
	}
}
