package sqlguardtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// RowTests runs the row-fence tests against b, one subtest each.
func RowTests[D sqlguard.Dialector](t *testing.T, b Backend[D]) {
	t.Run("Upsert_InsertsThenAdvances_StaleLeavesRowUnchanged", b.rowUpsertInsertsThenAdvances)
	t.Run("Update_MissingRowNotFound_StaleRowStale", b.rowUpdateMissingVsStale)
	t.Run("Fence_FencesOffZombieBeforeFirstWrite", b.rowFenceFencesOffZombie)
	t.Run("Upsert_TableWithAutoIncrement", b.rowUpsertAutoIncrement)
	t.Run("BadInput_Invalid", b.rowBadInput)
	t.Run("NullFenceColumn_ErrSchema", b.rowNullFenceColumn)
	t.Run("MissingColumn_ErrSchema", b.rowMissingColumn)
	t.Run("AddedFenceColumns_UnfencedRowAdmitsFirstFence", b.rowAddedFenceColumns)
}

func balance(t *testing.T, d *sql.DB, table string, id int) (int64, fence.Token) {
	t.Helper()
	var bal int64
	var tok fence.Token
	if err := d.QueryRow(fmt.Sprintf("SELECT balance, fence_token FROM `%s` WHERE id = ?", table), id).Scan(&bal, &tok); err != nil {
		t.Fatal(err)
	}
	return bal, tok
}

func (b *Backend[D]) rowUpsertInsertsThenAdvances(t *testing.T) {
	d := b.DB(t)
	q := d
	table, r := b.Accounts(t, d, "balance", "note")
	ctx := context.Background()
	if err := r.Upsert(ctx, q, FenceOf("acct", 3, "a"), 1, 100, "first"); err != nil {
		t.Fatalf("insert: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, q, FenceOf("acct", 3, "a"), 1, 150, "same lease"); err != nil {
		t.Fatalf("second write under one lease: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, q, FenceOf("acct", 3, "a"), 1, 150, "same lease"); err != nil {
		t.Fatalf("identical write under one lease: want nil, got %v", err)
	}
	WantStale(t, r.Upsert(ctx, q, FenceOf("acct", 2, "z"), 1, -1, "zombie"), 3, false)
	WantStale(t, r.Upsert(ctx, q, FenceOf("acct", 3, "b"), 1, -1, "zombie"), 3, true)
	if bal, tok := balance(t, d, table, 1); bal != 150 || tok != 3 {
		t.Fatalf("after stale writes: want balance 150 token 3, got %d %d", bal, tok)
	}
	if err := r.Upsert(ctx, q, FenceOf("acct", 8, "c"), 1, 200, "new holder"); err != nil {
		t.Fatalf("higher token: want nil, got %v", err)
	}
	if bal, tok := balance(t, d, table, 1); bal != 200 || tok != 8 {
		t.Fatalf("want balance 200 token 8, got %d %d", bal, tok)
	}
}

func (b *Backend[D]) rowUpdateMissingVsStale(t *testing.T) {
	d := b.DB(t)
	q := d
	table, r := b.Accounts(t, d, "balance", "note")
	ctx := context.Background()
	if err := r.Update(ctx, q, FenceOf("acct", 1, "a"), 42, 1, "x"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("missing row: want fence.ErrNotFound, got %v", err)
	}
	if err := r.Upsert(ctx, q, FenceOf("acct", 5, "a"), 42, 10, "x"); err != nil {
		t.Fatal(err)
	}
	err := r.Update(ctx, q, FenceOf("acct", 4, "b"), 42, 11, "y")
	WantStale(t, err, 5, false)
	if errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("stale must not look like a missing row: %v", err)
	}
	if err := r.Update(ctx, q, FenceOf("acct", 5, "a"), 42, 10, "x"); err != nil {
		t.Fatalf("unchanged write under the same lease: want nil, got %v", err)
	}
	if err := r.Update(ctx, q, FenceOf("acct", 6, "c"), 42, 12, "z"); err != nil {
		t.Fatalf("higher token: want nil, got %v", err)
	}
	if bal, tok := balance(t, d, table, 42); bal != 12 || tok != 6 {
		t.Fatalf("want balance 12 token 6, got %d %d", bal, tok)
	}
	var ns *fence.NamespaceError
	if err := r.Update(ctx, q, FenceOf("other", 100, "d"), 42, 0, ""); !errors.As(err, &ns) {
		t.Fatalf("other lock: want *fence.NamespaceError, got %v", err)
	}
}

// Row.Fence lets a new holder fence a row before its first write; the paused
// predecessor's write is then refused.
func (b *Backend[D]) rowFenceFencesOffZombie(t *testing.T) {
	d := b.DB(t)
	q := d
	table, r := b.Accounts(t, d, "balance", "note")
	ctx := context.Background()
	if err := r.Upsert(ctx, q, FenceOf("acct", 1, "old"), 7, 50, "old"); err != nil {
		t.Fatal(err)
	}
	if err := r.Fence(ctx, q, FenceOf("acct", 2, "new"), 7); err != nil {
		t.Fatalf("Fence: want nil, got %v", err)
	}
	WantStale(t, r.Update(ctx, q, FenceOf("acct", 1, "old"), 7, 0, "zombie"), 2, false)
	if bal, tok := balance(t, d, table, 7); bal != 50 || tok != 2 {
		t.Fatalf("want balance 50 (unchanged) token 2, got %d %d", bal, tok)
	}
	// Fencing a missing row inserts it with the value columns' defaults.
	if err := r.Fence(ctx, q, FenceOf("acct", 2, "new"), 8); err != nil {
		t.Fatal(err)
	}
	if bal, tok := balance(t, d, table, 8); bal != 0 || tok != 2 {
		t.Fatalf("fenced new row: want balance 0 token 2, got %d %d", bal, tok)
	}
}

// Upsert on a unique column of a table with an auto-increment id: MariaDB's
// LAST_INSERT_ID marker is not confused by the AUTO_INCREMENT column.
func (b *Backend[D]) rowUpsertAutoIncrement(t *testing.T) {
	d := b.DB(t)
	q := d
	table := b.table(t, d, "CREATE TABLE %s (id {AUTOID}, k VARCHAR(20) NOT NULL UNIQUE, v INT NOT NULL,"+
		" fence_name {NAME} NOT NULL, fence_token {INT} NOT NULL, fence_lease {LEASE} NOT NULL)")
	// id is generated, so the only key an insert can collide on is k.
	r := b.NewRow(table, "k", "v")
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if err := r.Upsert(ctx, q, FenceOf("l", 1, "a"), fmt.Sprintf("key%d", i), i); err != nil {
			t.Fatalf("insert %d: want nil, got %v", i, err)
		}
	}
	WantStale(t, r.Upsert(ctx, q, FenceOf("l", 1, "b"), "key2", 99), 1, true)
}

func (b *Backend[D]) rowBadInput(t *testing.T) {
	d := b.DB(t)
	q := d
	var nilQ sqlguard.Querier
	ctx := context.Background()
	table, good := b.Accounts(t, d, "balance", "note")
	cases := []struct {
		name string
		run  func() error
	}{
		{"wrong value count", func() error { return good.Upsert(ctx, q, FenceOf("a", 1, "x"), 1, 5) }},
		{"nil key", func() error { return good.Update(ctx, q, FenceOf("a", 1, "x"), nil, 5, "") }},
		{"token 0", func() error { return good.Upsert(ctx, q, FenceOf("a", 0, "x"), 1, 5, "") }},
		{"token above bigint", func() error { return good.Update(ctx, q, FenceOf("a", 1<<63, "x"), 1, 5, "") }},
		{"nil querier", func() error { return good.Update(ctx, nilQ, FenceOf("a", 1, "x"), 1, 5, "") }},
		{"bad table", func() error { return b.NewRow("a b", "id").Fence(ctx, q, FenceOf("a", 1, "x"), 1) }},
		{"bad column", func() error { return b.NewRow(table, "id", "v`--").Upsert(ctx, q, FenceOf("a", 1, "x"), 1, 5) }},
		{"duplicate column", func() error { return b.NewRow(table, "id", "id").Upsert(ctx, q, FenceOf("a", 1, "x"), 1, 5) }},
	}
	for _, c := range cases {
		if err := c.run(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: want fence.ErrInvalid, got %v", c.name, err)
		}
	}
	var n int
	if err := d.QueryRow("SELECT COUNT(*) FROM `" + table + "`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after only bad input: want 0 rows, got %d (%v)", n, err)
	}
}

func (b *Backend[D]) rowNullFenceColumn(t *testing.T) {
	d := b.DB(t)
	q := d
	table := b.tableWithRows(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, v INT, fence_name {NAME} NULL, fence_token {INT} NULL, fence_lease {LEASE} NULL)",
		"(id, v) VALUES (1, 10)")
	r := b.NewRow(table, "id", "v")
	ctx := context.Background()
	if err := r.Update(ctx, q, FenceOf("l", 1, "a"), 1, 20); !errors.Is(err, sqlguard.ErrSchema) {
		t.Fatalf("Update over a NULL fence: want %s.ErrSchema, got %v", b.Name, err)
	}
	if err := r.Upsert(ctx, q, FenceOf("l", 1, "a"), 1, 20); !errors.Is(err, sqlguard.ErrSchema) {
		t.Fatalf("Upsert over a NULL fence: want %s.ErrSchema, got %v", b.Name, err)
	}
	var v int
	if err := d.QueryRow("SELECT v FROM `" + table + "` WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("want v unchanged (10), got %d (%v)", v, err)
	}
}

func (b *Backend[D]) rowMissingColumn(t *testing.T) {
	d := b.DB(t)
	table := b.table(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, v INT)")
	r := b.NewRow(table, "id", "v")
	if err := r.Upsert(context.Background(), d, FenceOf("l", 1, "a"), 1, 20); !errors.Is(err, sqlguard.ErrSchema) {
		t.Fatalf("want %s.ErrSchema, got %v", b.Name, err)
	}
}

// Fence columns added to a table with rows: the defaults mark them never fenced,
// the first fenced write is admitted, and later ones follow the rule. The columns
// are added one ALTER each, which SQLite requires and MariaDB accepts.
func (b *Backend[D]) rowAddedFenceColumns(t *testing.T) {
	d := b.DB(t)
	q := d
	table := b.tableWithRows(t, d, "CREATE TABLE %s (id {INT} PRIMARY KEY, balance {INT} NOT NULL)", "VALUES (1, 10), (2, 20)")
	r := b.NewRow(table, "id", "balance")
	ddl, err := r.FenceColumnsDDL()
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range strings.Split(ddl, ",\n") {
		if _, err := d.Exec("ALTER TABLE `" + table + "` ADD COLUMN " + col); err != nil {
			t.Fatalf("ALTER TABLE ADD COLUMN %s: %v", col, err)
		}
	}
	ctx := context.Background()
	if got, err := r.Highest(ctx, q, 1); err != nil || got != (fence.Fence{}) {
		t.Fatalf("Highest of an unfenced row: want the zero fence, got %+v, %v", got, err)
	}
	if err := r.Update(ctx, q, FenceOf("acct", 5, "a"), 1, 11); err != nil {
		t.Fatalf("first fenced Update of an unfenced row: want nil, got %v", err)
	}
	if err := r.Upsert(ctx, q, FenceOf("acct", 3, "b"), 2, 21); err != nil {
		t.Fatalf("first fenced Upsert of an unfenced row: want nil, got %v", err)
	}
	WantStale(t, r.Update(ctx, q, FenceOf("acct", 4, "c"), 1, 0), 5, false)
	if got, err := r.Highest(ctx, q, 1); err != nil || got != FenceOf("acct", 5, "a") {
		t.Fatalf("Highest: want acct#5 lease a, got %+v, %v", got, err)
	}
	if _, err := r.Highest(ctx, q, 99); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Highest of a missing row: want fence.ErrNotFound, got %v", err)
	}
}
