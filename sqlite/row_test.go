package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlite"
)

const accountsDDL = "CREATE TABLE %s (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL DEFAULT 0, note TEXT NULL," +
	" fence_name TEXT NOT NULL, fence_token INTEGER NOT NULL CHECK (fence_token > 0), fence_lease TEXT NOT NULL)"

func accounts(t *testing.T, d *sql.DB) *sqlite.Row {
	return &sqlite.Row{Table: uniqueTable(t, d, accountsDDL), Key: "id", Columns: []string{"balance", "note"}}
}

func balance(t *testing.T, d *sql.DB, r *sqlite.Row, id int) (int64, fence.Token) {
	t.Helper()
	var b int64
	var tok fence.Token
	if err := d.QueryRow(fmt.Sprintf("SELECT balance, fence_token FROM `%s` WHERE id = ?", r.Table), id).Scan(&b, &tok); err != nil {
		t.Fatal(err)
	}
	return b, tok
}

func TestRow_Upsert_InsertsThenAdvances_StaleLeavesRowUnchanged(t *testing.T) {
	d := db(t)
	r := accounts(t, d)
	ctx := context.Background()
	if err := r.Upsert(ctx, d, fenceOf("acct", 3, "a"), 1, 100, "first"); err != nil {
		t.Fatalf("insert: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, d, fenceOf("acct", 3, "a"), 1, 150, "same lease"); err != nil {
		t.Fatalf("second write under one lease: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, d, fenceOf("acct", 3, "a"), 1, 150, "same lease"); err != nil {
		t.Fatalf("identical write under one lease: want nil, got %v", err)
	}
	wantStale(t, r.Upsert(ctx, d, fenceOf("acct", 2, "z"), 1, -1, "zombie"), 3, false)
	wantStale(t, r.Upsert(ctx, d, fenceOf("acct", 3, "b"), 1, -1, "zombie"), 3, true)
	if b, tok := balance(t, d, r, 1); b != 150 || tok != 3 {
		t.Fatalf("after stale writes: want balance 150 token 3, got %d %d", b, tok)
	}
	if err := r.Upsert(ctx, d, fenceOf("acct", 8, "c"), 1, 200, "new holder"); err != nil {
		t.Fatalf("higher token: want nil, got %v", err)
	}
	if b, tok := balance(t, d, r, 1); b != 200 || tok != 8 {
		t.Fatalf("want balance 200 token 8, got %d %d", b, tok)
	}
}

func TestRow_Update_MissingRowNotFound_StaleRowStale(t *testing.T) {
	d := db(t)
	r := accounts(t, d)
	ctx := context.Background()
	if err := r.Update(ctx, d, fenceOf("acct", 1, "a"), 42, 1, "x"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("missing row: want fence.ErrNotFound, got %v", err)
	}
	if err := r.Upsert(ctx, d, fenceOf("acct", 5, "a"), 42, 10, "x"); err != nil {
		t.Fatal(err)
	}
	err := r.Update(ctx, d, fenceOf("acct", 4, "b"), 42, 11, "y")
	wantStale(t, err, 5, false)
	if errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("stale must not look like a missing row: %v", err)
	}
	if err := r.Update(ctx, d, fenceOf("acct", 5, "a"), 42, 10, "x"); err != nil {
		t.Fatalf("unchanged write under the same lease: want nil, got %v", err)
	}
	if err := r.Update(ctx, d, fenceOf("acct", 6, "c"), 42, 12, "z"); err != nil {
		t.Fatalf("higher token: want nil, got %v", err)
	}
	if b, tok := balance(t, d, r, 42); b != 12 || tok != 6 {
		t.Fatalf("want balance 12 token 6, got %d %d", b, tok)
	}
	var ns *fence.NamespaceError
	if err := r.Update(ctx, d, fenceOf("other", 100, "d"), 42, 0, ""); !errors.As(err, &ns) {
		t.Fatalf("other lock: want *fence.NamespaceError, got %v", err)
	}
}

// Row.Fence lets a new holder fence a row before its first write; the paused
// predecessor's write is then refused.
func TestRow_Fence_FencesOffZombieBeforeFirstWrite(t *testing.T) {
	d := db(t)
	r := accounts(t, d)
	ctx := context.Background()
	if err := r.Upsert(ctx, d, fenceOf("acct", 1, "old"), 7, 50, "old"); err != nil {
		t.Fatal(err)
	}
	if err := r.Fence(ctx, d, fenceOf("acct", 2, "new"), 7); err != nil {
		t.Fatalf("Fence: want nil, got %v", err)
	}
	wantStale(t, r.Update(ctx, d, fenceOf("acct", 1, "old"), 7, 0, "zombie"), 2, false)
	if b, tok := balance(t, d, r, 7); b != 50 || tok != 2 {
		t.Fatalf("want balance 50 (unchanged) token 2, got %d %d", b, tok)
	}
	// Fencing a missing row inserts it with the value columns' defaults.
	if err := r.Fence(ctx, d, fenceOf("acct", 2, "new"), 8); err != nil {
		t.Fatal(err)
	}
	if b, tok := balance(t, d, r, 8); b != 0 || tok != 2 {
		t.Fatalf("fenced new row: want balance 0 token 2, got %d %d", b, tok)
	}
}

// Upsert on a unique column of a table with an AUTOINCREMENT id.
func TestRow_Upsert_TableWithAutoIncrement(t *testing.T) {
	d := db(t)
	table := uniqueTable(t, d, "CREATE TABLE %s (id INTEGER PRIMARY KEY AUTOINCREMENT, k VARCHAR(20) NOT NULL UNIQUE, v INT NOT NULL,"+
		" fence_name TEXT NOT NULL, fence_token INTEGER NOT NULL, fence_lease TEXT NOT NULL)")
	// id is generated, so the only key an insert can collide on is k.
	r := &sqlite.Row{Table: table, Key: "k", Columns: []string{"v"}}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if err := r.Upsert(ctx, d, fenceOf("l", 1, "a"), fmt.Sprintf("key%d", i), i); err != nil {
			t.Fatalf("insert %d: want nil, got %v", i, err)
		}
	}
	wantStale(t, r.Upsert(ctx, d, fenceOf("l", 1, "b"), "key2", 99), 1, true)
}

func TestRow_BadInput_Invalid(t *testing.T) {
	d := db(t)
	ctx := context.Background()
	good := accounts(t, d)
	cases := []struct {
		name string
		run  func() error
	}{
		{"wrong value count", func() error { return good.Upsert(ctx, d, fenceOf("a", 1, "x"), 1, 5) }},
		{"nil key", func() error { return good.Update(ctx, d, fenceOf("a", 1, "x"), nil, 5, "") }},
		{"token 0", func() error { return good.Upsert(ctx, d, fenceOf("a", 0, "x"), 1, 5, "") }},
		{"token above bigint", func() error { return good.Update(ctx, d, fenceOf("a", 1<<63, "x"), 1, 5, "") }},
		{"nil querier", func() error { return good.Update(ctx, nil, fenceOf("a", 1, "x"), 1, 5, "") }},
		{"bad table", func() error {
			return (&sqlite.Row{Table: "a b", Key: "id"}).Fence(ctx, d, fenceOf("a", 1, "x"), 1)
		}},
		{"bad column", func() error {
			return (&sqlite.Row{Table: good.Table, Key: "id", Columns: []string{"v`--"}}).Upsert(ctx, d, fenceOf("a", 1, "x"), 1, 5)
		}},
		{"duplicate column", func() error {
			return (&sqlite.Row{Table: good.Table, Key: "id", Columns: []string{"id"}}).Upsert(ctx, d, fenceOf("a", 1, "x"), 1, 5)
		}},
	}
	for _, c := range cases {
		if err := c.run(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: want fence.ErrInvalid, got %v", c.name, err)
		}
	}
	var n int
	if err := d.QueryRow("SELECT COUNT(*) FROM `" + good.Table + "`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after only bad input: want 0 rows, got %d (%v)", n, err)
	}
}

func TestRow_NullFenceColumn_ErrSchema(t *testing.T) {
	d := db(t)
	table := uniqueTable(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, v INT, fence_name TEXT NULL, fence_token INTEGER NULL, fence_lease TEXT NULL)")
	if _, err := d.Exec("INSERT INTO `" + table + "` (id, v) VALUES (1, 10)"); err != nil {
		t.Fatal(err)
	}
	r := &sqlite.Row{Table: table, Key: "id", Columns: []string{"v"}}
	ctx := context.Background()
	if err := r.Update(ctx, d, fenceOf("l", 1, "a"), 1, 20); !errors.Is(err, sqlite.ErrSchema) {
		t.Fatalf("Update over a NULL fence: want sqlite.ErrSchema, got %v", err)
	}
	if err := r.Upsert(ctx, d, fenceOf("l", 1, "a"), 1, 20); !errors.Is(err, sqlite.ErrSchema) {
		t.Fatalf("Upsert over a NULL fence: want sqlite.ErrSchema, got %v", err)
	}
	var v int
	if err := d.QueryRow("SELECT v FROM `" + table + "` WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("want v unchanged (10), got %d (%v)", v, err)
	}
}

func TestRow_MissingColumn_ErrSchema(t *testing.T) {
	d := db(t)
	table := uniqueTable(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, v INT)")
	r := &sqlite.Row{Table: table, Key: "id", Columns: []string{"v"}}
	if err := r.Upsert(context.Background(), d, fenceOf("l", 1, "a"), 1, 20); !errors.Is(err, sqlite.ErrSchema) {
		t.Fatalf("want sqlite.ErrSchema, got %v", err)
	}
}

// Fence columns added to a table with rows: the defaults mark them never fenced,
// the first fenced write is admitted, and later ones follow the rule.
func TestRow_AddedFenceColumns_UnfencedRowAdmitsFirstFence(t *testing.T) {
	d := db(t)
	table := uniqueTable(t, d, "CREATE TABLE %s (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)")
	r := &sqlite.Row{Table: table, Key: "id", Columns: []string{"balance"}}
	ddl, err := r.FenceColumnsDDL()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO "` + table + `" VALUES (1, 10), (2, 20)`); err != nil {
		t.Fatal(err)
	}
	for _, col := range strings.Split(ddl, ",\n") {
		if _, err := d.Exec(`ALTER TABLE "` + table + `" ADD COLUMN ` + col); err != nil {
			t.Fatalf("ALTER TABLE ADD COLUMN %s: %v", col, err)
		}
	}
	ctx := context.Background()
	if got, err := r.Highest(ctx, d, 1); err != nil || got != (fence.Fence{}) {
		t.Fatalf("Highest of an unfenced row: want the zero fence, got %+v, %v", got, err)
	}
	if err := r.Update(ctx, d, fenceOf("acct", 5, "a"), 1, 11); err != nil {
		t.Fatalf("first fenced Update of an unfenced row: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, d, fenceOf("acct", 3, "b"), 2, 21); err != nil {
		t.Fatalf("first fenced Upsert of an unfenced row: want nil, got %v", err)
	}
	wantStale(t, r.Update(ctx, d, fenceOf("acct", 4, "c"), 1, 0), 5, false)
	if got, err := r.Highest(ctx, d, 1); err != nil || got != fenceOf("acct", 5, "a") {
		t.Fatalf("Highest: want acct#5 lease a, got %+v, %v", got, err)
	}
	if _, err := r.Highest(ctx, d, 99); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Highest of a missing row: want fence.ErrNotFound, got %v", err)
	}
}
