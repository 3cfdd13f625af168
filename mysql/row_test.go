package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/mysql"
)

// Over a connection that counts changed rows, an identical rewrite under the same
// lease matches but changes nothing; Row.Update refuses to guess and names the
// missing DSN setting instead of reporting a stale or missing row.
func TestRow_Update_ChangedRowsDSN_DetectedNotMisreported(t *testing.T) {
	plain, err := sql.Open("mysql", changedRowsConfig(t).FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	table := uniqueTable(t, "CREATE TABLE %s (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0, note TEXT NULL,"+
		" fence_name VARBINARY(255) NOT NULL, fence_token BIGINT NOT NULL CHECK (fence_token > 0), fence_lease VARBINARY(128) NOT NULL)")
	r := &mysql.Row{Table: table, Key: "id", Columns: []string{"balance", "note"}}
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
