package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/sqlguardtest"
	"github.com/fencelock/fence/mysql"
)

// The suite in sqlguard checks ErrSchema; the driver's error stays in the chain.
func TestGuard_MissingTable_DriverErrorInChain(t *testing.T) {
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

func TestGuard_Check_ChangedRowsDSN_Refused(t *testing.T) {
	cfg := changedRowsConfig(t)
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

func TestGuard_QualifiedTable_Quoted(t *testing.T) {
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
	sqlguardtest.WantToken(t, g, r, 5)
}
