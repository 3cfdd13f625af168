package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/mysql"
)

func TestGuard_Fence_HigherAcceptedLowerRejectedWithHighest(t *testing.T) {
	g := mysql.NewGuard(db(t), nil)
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
	g := mysql.NewGuard(db(t), nil)
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
	g := mysql.NewGuard(db(t), nil)
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
	g := mysql.NewGuard(db(t), nil)
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
	_, err := mysql.NewGuard(db(t), nil).Highest(context.Background(), resource(t))
	if !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("want fence.ErrNotFound, got %v", err)
	}
}

// A stale FenceTx rolls back the whole transaction: the caller's other writes in it
// are not applied.
func TestGuard_FenceTx_StaleRollsBackCallerWrites(t *testing.T) {
	d := db(t)
	g := mysql.NewGuard(d, nil)
	ctx := context.Background()
	data := uniqueTable(t, "CREATE TABLE %s (id INT PRIMARY KEY, v TEXT NOT NULL)")
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
		if _, err := tx.ExecContext(ctx, "INSERT INTO `"+data+"` (id, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)", id, v); err != nil {
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

// The fence row lock serialises writers: a second FenceTx on the same resource waits
// for the first transaction, then sees its fence.
func TestGuard_FenceTx_RowLockSerialisesWriters(t *testing.T) {
	d := db(t)
	g := mysql.NewGuard(d, nil)
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
		tx2, err := d.BeginTx(ctx, nil)
		if err != nil {
			done <- err
			return
		}
		defer tx2.Rollback()
		close(started)
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
	g := mysql.NewGuard(db(t), nil)
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
	bad := mysql.NewGuard(testDB, &mysql.GuardOptions{Table: "x`; DROP TABLE y; --"})
	if err := bad.Fence(ctx, r, fenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("bad table name: want fence.ErrInvalid, got %v", err)
	}
	if err := mysql.NewGuard(nil, nil).Fence(ctx, r, fenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil db: want fence.ErrInvalid, got %v", err)
	}
}

func TestGuard_MissingTable_ErrSchema(t *testing.T) {
	g := mysql.NewGuard(db(t), &mysql.GuardOptions{Table: "no_such_fences"})
	err := g.Fence(context.Background(), resource(t), fenceOf("lock", 1, "a"))
	if !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("want mysql.ErrSchema, got %v", err)
	}
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1146 {
		t.Fatalf("want the driver error 1146 in the chain, got %v", err)
	}
}

func TestGuard_WrongSchema_MissingLeaseColumn_ErrSchema(t *testing.T) {
	table := uniqueTable(t, "CREATE TABLE %s (resource VARBINARY(255) PRIMARY KEY, name VARBINARY(255) NOT NULL, token BIGINT NOT NULL)")
	g := mysql.NewGuard(db(t), &mysql.GuardOptions{Table: table})
	if err := g.Fence(context.Background(), resource(t), fenceOf("lock", 1, "a")); !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("want mysql.ErrSchema, got %v", err)
	}
	if err := g.Check(context.Background()); !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("Check: want mysql.ErrSchema, got %v", err)
	}
}

func TestGuard_NullFence_ErrSchemaAndRowUnchanged(t *testing.T) {
	table := uniqueTable(t, "CREATE TABLE %s (resource VARBINARY(255) PRIMARY KEY, name VARBINARY(255) NULL, token BIGINT NULL, lease VARBINARY(128) NULL)")
	d := db(t)
	r := resource(t)
	if _, err := d.Exec("INSERT INTO `"+table+"` VALUES (?, 'lock', NULL, 'x')", r); err != nil {
		t.Fatal(err)
	}
	g := mysql.NewGuard(d, &mysql.GuardOptions{Table: table})
	err := g.Fence(context.Background(), r, fenceOf("lock", 5, "a"))
	if !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("want mysql.ErrSchema for a NULL token, got %v", err)
	}
	var tok sql.NullInt64
	var lease string
	if err := d.QueryRow("SELECT token, lease FROM `"+table+"`").Scan(&tok, &lease); err != nil {
		t.Fatal(err)
	}
	if tok.Valid || lease != "x" {
		t.Fatalf("want the row unchanged (NULL, x), got (%v, %q)", tok, lease)
	}
}

func TestGuard_ClosedDB_ErrClosed(t *testing.T) {
	db(t)
	d, err := mysql.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	err = mysql.NewGuard(d, nil).Fence(context.Background(), t.Name(), fenceOf("lock", 1, "a"))
	if !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("want fence.ErrClosed, got %v", err)
	}
}

func TestGuard_Check_ChangedRowsDSN_Refused(t *testing.T) {
	db(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = false
	plain := cfg.FormatDSN()
	if err := mysql.CheckDSN(plain); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("CheckDSN without clientFoundRows: want fence.ErrInvalid, got %v", err)
	}
	d, err := sql.Open("mysql", plain)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := mysql.NewGuard(d, nil).Check(context.Background()); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Check over a changed-rows connection: want fence.ErrInvalid, got %v", err)
	}
	if err := mysql.NewGuard(testDB, nil).Check(context.Background()); err != nil {
		t.Fatalf("Check over mysql.Open's connection: want nil, got %v", err)
	}
	cfg.ClientFoundRows = true
	if err := mysql.CheckDSN(cfg.FormatDSN()); err != nil {
		t.Fatalf("CheckDSN with clientFoundRows=true: want nil, got %v", err)
	}
}

func TestSchema_MatchesGuardDDL(t *testing.T) {
	g := mysql.NewGuard(&sql.DB{}, nil)
	if g.SchemaSQL() != mysql.Schema {
		t.Fatalf("default guard DDL differs from Schema:\nwant %s\ngot  %s", mysql.Schema, g.SchemaSQL())
	}
	if got := mysql.NewGuard(&sql.DB{}, &mysql.GuardOptions{Table: "app.fences"}).Table(); got != "`app`.`fences`" {
		t.Fatalf("qualified table: want `app`.`fences`, got %s", got)
	}
}

// A writer that waits too long for the fence row's lock gets ErrConflict; the
// holder's transaction is unaffected.
func TestGuard_LockWaitTimeout_ErrConflict(t *testing.T) {
	d := db(t)
	g := mysql.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(t)
	holder, err := d.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if err := g.FenceTx(ctx, holder, r, fenceOf("lock", 5, "a")); err != nil {
		t.Fatal(err)
	}
	conn, err := d.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = g.FenceTx(ctx, tx, r, fenceOf("lock", 6, "b"))
	_ = tx.Rollback()
	if !errors.Is(err, mysql.ErrConflict) {
		t.Fatalf("want mysql.ErrConflict, got %v", err)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := g.Highest(ctx, r); err != nil || got.Token != 5 {
		t.Fatalf("want the holder's fence 5, got %v %v", got, err)
	}
}

func TestGuard_Do_CommitsOnSuccess_RollsBackOnStaleOrWriteError(t *testing.T) {
	d := db(t)
	g := mysql.NewGuard(d, nil)
	ctx := context.Background()
	data := uniqueTable(t, "CREATE TABLE %s (id INT PRIMARY KEY, v TEXT NOT NULL)")
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
