package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/mysql"
)

const accountsDDL = "CREATE TABLE %s (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0, note TEXT NULL," +
	" fence_name VARBINARY(255) NOT NULL, fence_token BIGINT NOT NULL CHECK (fence_token > 0), fence_lease VARBINARY(128) NOT NULL)"

func accounts(t *testing.T) *mysql.Row {
	return &mysql.Row{Table: uniqueTable(t, accountsDDL), Key: "id", Columns: []string{"balance", "note"}}
}

func balance(t *testing.T, r *mysql.Row, id int) (int64, fence.Token) {
	t.Helper()
	var b int64
	var tok fence.Token
	if err := testDB.QueryRow(fmt.Sprintf("SELECT balance, fence_token FROM `%s` WHERE id = ?", r.Table), id).Scan(&b, &tok); err != nil {
		t.Fatal(err)
	}
	return b, tok
}

func TestRow_Upsert_InsertsThenAdvances_StaleLeavesRowUnchanged(t *testing.T) {
	db(t)
	r := accounts(t)
	ctx := context.Background()
	if err := r.Upsert(ctx, testDB, fenceOf("acct", 3, "a"), 1, 100, "first"); err != nil {
		t.Fatalf("insert: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, testDB, fenceOf("acct", 3, "a"), 1, 150, "same lease"); err != nil {
		t.Fatalf("second write under one lease: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, testDB, fenceOf("acct", 3, "a"), 1, 150, "same lease"); err != nil {
		t.Fatalf("identical write under one lease: want nil, got %v", err)
	}
	wantStale(t, r.Upsert(ctx, testDB, fenceOf("acct", 2, "z"), 1, -1, "zombie"), 3, false)
	wantStale(t, r.Upsert(ctx, testDB, fenceOf("acct", 3, "b"), 1, -1, "zombie"), 3, true)
	if b, tok := balance(t, r, 1); b != 150 || tok != 3 {
		t.Fatalf("after stale writes: want balance 150 token 3, got %d %d", b, tok)
	}
	if err := r.Upsert(ctx, testDB, fenceOf("acct", 8, "c"), 1, 200, "new holder"); err != nil {
		t.Fatalf("higher token: want nil, got %v", err)
	}
	if b, tok := balance(t, r, 1); b != 200 || tok != 8 {
		t.Fatalf("want balance 200 token 8, got %d %d", b, tok)
	}
}

func TestRow_Update_MissingRowNotFound_StaleRowStale(t *testing.T) {
	db(t)
	r := accounts(t)
	ctx := context.Background()
	if err := r.Update(ctx, testDB, fenceOf("acct", 1, "a"), 42, 1, "x"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("missing row: want fence.ErrNotFound, got %v", err)
	}
	if err := r.Upsert(ctx, testDB, fenceOf("acct", 5, "a"), 42, 10, "x"); err != nil {
		t.Fatal(err)
	}
	err := r.Update(ctx, testDB, fenceOf("acct", 4, "b"), 42, 11, "y")
	wantStale(t, err, 5, false)
	if errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("stale must not look like a missing row: %v", err)
	}
	if err := r.Update(ctx, testDB, fenceOf("acct", 5, "a"), 42, 10, "x"); err != nil {
		t.Fatalf("unchanged write under the same lease: want nil, got %v", err)
	}
	if err := r.Update(ctx, testDB, fenceOf("acct", 6, "c"), 42, 12, "z"); err != nil {
		t.Fatalf("higher token: want nil, got %v", err)
	}
	if b, tok := balance(t, r, 42); b != 12 || tok != 6 {
		t.Fatalf("want balance 12 token 6, got %d %d", b, tok)
	}
	var ns *fence.NamespaceError
	if err := r.Update(ctx, testDB, fenceOf("other", 100, "d"), 42, 0, ""); !errors.As(err, &ns) {
		t.Fatalf("other lock: want *fence.NamespaceError, got %v", err)
	}
}

// Row.Fence lets a new holder fence a row before its first write; the paused
// predecessor's write is then refused.
func TestRow_Fence_FencesOffZombieBeforeFirstWrite(t *testing.T) {
	db(t)
	r := accounts(t)
	ctx := context.Background()
	if err := r.Upsert(ctx, testDB, fenceOf("acct", 1, "old"), 7, 50, "old"); err != nil {
		t.Fatal(err)
	}
	if err := r.Fence(ctx, testDB, fenceOf("acct", 2, "new"), 7); err != nil {
		t.Fatalf("Fence: want nil, got %v", err)
	}
	wantStale(t, r.Update(ctx, testDB, fenceOf("acct", 1, "old"), 7, 0, "zombie"), 2, false)
	if b, tok := balance(t, r, 7); b != 50 || tok != 2 {
		t.Fatalf("want balance 50 (unchanged) token 2, got %d %d", b, tok)
	}
	// Fencing a missing row inserts it with the value columns' defaults.
	if err := r.Fence(ctx, testDB, fenceOf("acct", 2, "new"), 8); err != nil {
		t.Fatal(err)
	}
	if b, tok := balance(t, r, 8); b != 0 || tok != 2 {
		t.Fatalf("fenced new row: want balance 0 token 2, got %d %d", b, tok)
	}
}

// The LAST_INSERT_ID marker is not confused by an AUTO_INCREMENT column.
func TestRow_Upsert_TableWithAutoIncrement(t *testing.T) {
	db(t)
	table := uniqueTable(t, "CREATE TABLE %s (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(20) NOT NULL UNIQUE, v INT NOT NULL,"+
		" fence_name VARBINARY(255) NOT NULL, fence_token BIGINT NOT NULL, fence_lease VARBINARY(128) NOT NULL)")
	// id is generated, so the only key an insert can collide on is k.
	r := &mysql.Row{Table: table, Key: "k", Columns: []string{"v"}}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if err := r.Upsert(ctx, testDB, fenceOf("l", 1, "a"), fmt.Sprintf("key%d", i), i); err != nil {
			t.Fatalf("insert %d: want nil, got %v", i, err)
		}
	}
	wantStale(t, r.Upsert(ctx, testDB, fenceOf("l", 1, "b"), "key2", 99), 1, true)
}

func TestRow_BadInput_Invalid(t *testing.T) {
	db(t)
	ctx := context.Background()
	good := accounts(t)
	cases := []struct {
		name string
		run  func() error
	}{
		{"wrong value count", func() error { return good.Upsert(ctx, testDB, fenceOf("a", 1, "x"), 1, 5) }},
		{"nil key", func() error { return good.Update(ctx, testDB, fenceOf("a", 1, "x"), nil, 5, "") }},
		{"token 0", func() error { return good.Upsert(ctx, testDB, fenceOf("a", 0, "x"), 1, 5, "") }},
		{"token above bigint", func() error { return good.Update(ctx, testDB, fenceOf("a", 1<<63, "x"), 1, 5, "") }},
		{"nil querier", func() error { return good.Update(ctx, nil, fenceOf("a", 1, "x"), 1, 5, "") }},
		{"bad table", func() error {
			return (&mysql.Row{Table: "a b", Key: "id"}).Fence(ctx, testDB, fenceOf("a", 1, "x"), 1)
		}},
		{"bad column", func() error {
			return (&mysql.Row{Table: good.Table, Key: "id", Columns: []string{"v`--"}}).Upsert(ctx, testDB, fenceOf("a", 1, "x"), 1, 5)
		}},
		{"duplicate column", func() error {
			return (&mysql.Row{Table: good.Table, Key: "id", Columns: []string{"id"}}).Upsert(ctx, testDB, fenceOf("a", 1, "x"), 1, 5)
		}},
	}
	for _, c := range cases {
		if err := c.run(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: want fence.ErrInvalid, got %v", c.name, err)
		}
	}
	var n int
	if err := testDB.QueryRow("SELECT COUNT(*) FROM `" + good.Table + "`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after only bad input: want 0 rows, got %d (%v)", n, err)
	}
}

func TestRow_NullFenceColumn_ErrSchema(t *testing.T) {
	db(t)
	table := uniqueTable(t, "CREATE TABLE %s (id INT PRIMARY KEY, v INT, fence_name VARBINARY(255) NULL, fence_token BIGINT NULL, fence_lease VARBINARY(128) NULL)")
	if _, err := testDB.Exec("INSERT INTO `" + table + "` (id, v) VALUES (1, 10)"); err != nil {
		t.Fatal(err)
	}
	r := &mysql.Row{Table: table, Key: "id", Columns: []string{"v"}}
	ctx := context.Background()
	if err := r.Update(ctx, testDB, fenceOf("l", 1, "a"), 1, 20); !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("Update over a NULL fence: want mysql.ErrSchema, got %v", err)
	}
	if err := r.Upsert(ctx, testDB, fenceOf("l", 1, "a"), 1, 20); !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("Upsert over a NULL fence: want mysql.ErrSchema, got %v", err)
	}
	var v int
	if err := testDB.QueryRow("SELECT v FROM `" + table + "` WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("want v unchanged (10), got %d (%v)", v, err)
	}
}

func TestRow_MissingColumn_ErrSchema(t *testing.T) {
	db(t)
	table := uniqueTable(t, "CREATE TABLE %s (id INT PRIMARY KEY, v INT)")
	r := &mysql.Row{Table: table, Key: "id", Columns: []string{"v"}}
	if err := r.Upsert(context.Background(), testDB, fenceOf("l", 1, "a"), 1, 20); !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("want mysql.ErrSchema, got %v", err)
	}
}

// Fence columns added to a table with rows: the defaults mark them never fenced,
// the first fenced write is admitted, and later ones follow the rule.
func TestRow_AddedFenceColumns_UnfencedRowAdmitsFirstFence(t *testing.T) {
	db(t)
	table := uniqueTable(t, "CREATE TABLE %s (id INT PRIMARY KEY, balance BIGINT NOT NULL)")
	r := &mysql.Row{Table: table, Key: "id", Columns: []string{"balance"}}
	ddl, err := r.FenceColumnsDDL()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testDB.Exec("INSERT INTO `" + table + "` VALUES (1, 10), (2, 20)"); err != nil {
		t.Fatal(err)
	}
	if _, err := testDB.Exec("ALTER TABLE `" + table + "` ADD COLUMN (" + ddl + ")"); err != nil {
		t.Fatalf("ALTER TABLE ADD COLUMN (%s): %v", ddl, err)
	}
	ctx := context.Background()
	if got, err := r.Highest(ctx, testDB, 1); err != nil || got != (fence.Fence{}) {
		t.Fatalf("Highest of an unfenced row: want the zero fence, got %+v, %v", got, err)
	}
	if err := r.Update(ctx, testDB, fenceOf("acct", 5, "a"), 1, 11); err != nil {
		t.Fatalf("first fenced Update of an unfenced row: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, testDB, fenceOf("acct", 3, "b"), 2, 21); err != nil {
		t.Fatalf("first fenced Upsert of an unfenced row: want nil, got %v", err)
	}
	wantStale(t, r.Update(ctx, testDB, fenceOf("acct", 4, "c"), 1, 0), 5, false)
	if got, err := r.Highest(ctx, testDB, 1); err != nil || got != fenceOf("acct", 5, "a") {
		t.Fatalf("Highest: want acct#5 lease a, got %+v, %v", got, err)
	}
	if _, err := r.Highest(ctx, testDB, 99); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Highest of a missing row: want fence.ErrNotFound, got %v", err)
	}
}

// Over a connection that counts changed rows, an identical rewrite under the same
// lease matches but changes nothing; Row.Update refuses to guess and names the
// missing DSN setting instead of reporting a stale or missing row.
func TestRow_Update_ChangedRowsDSN_DetectedNotMisreported(t *testing.T) {
	db(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = false
	plain, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	r := accounts(t)
	ctx := context.Background()
	f := fenceOf("acct", 4, "a")
	if err := r.Upsert(ctx, plain, f, 1, 10, "x"); err != nil {
		t.Fatal(err)
	}
	err = r.Update(ctx, plain, f, 1, 10, "x")
	if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "clientFoundRows") {
		t.Fatalf("want fence.ErrInvalid naming clientFoundRows, got %v", err)
	}
	if err := r.Update(ctx, testDB, f, 1, 10, "x"); err != nil {
		t.Fatalf("the same write with clientFoundRows=true: want nil, got %v", err)
	}
}
