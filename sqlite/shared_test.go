package sqlite_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/sqlfence/sqlfencetest"
	"github.com/fencelock/fence/sqlite"
)

// backend runs the tests sqlite shares with mysql, each on a fresh database file.
var backend = sqlfencetest.Backend[sqlite.Querier, *sqlite.Row, *sqlite.Guard]{
	Name: "sqlite",
	DB:   db,
	NewRow: func(table, key string, cols ...string) *sqlite.Row {
		return &sqlite.Row{Table: table, Key: key, Columns: cols}
	},
	NewGuard: func(d *sql.DB, table string) *sqlite.Guard {
		if d == nil {
			return sqlite.NewGuard(nil, &sqlite.GuardOptions{Table: table})
		}
		return sqlite.NewGuard(d, &sqlite.GuardOptions{Table: table})
	},
	NewKV:       func(d *sql.DB) fencetest.Guarded { return sqlite.NewKV(d, nil) },
	ErrSchema:   sqlite.ErrSchema,
	MaxValueLen: sqlite.MaxValueLen,
	Types: strings.NewReplacer("{INT}", "INTEGER", "{NAME}", "TEXT", "{LEASE}", "TEXT",
		"{BLOB}", "BLOB", "{AUTOID}", "INTEGER PRIMARY KEY AUTOINCREMENT"),
	Upsert: func(key string, cols ...string) string {
		set := make([]string, len(cols))
		for i, c := range cols {
			set[i] = c + " = excluded." + c
		}
		return " ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(set, ", ")
	},
}

func TestGuard(t *testing.T)       { sqlfencetest.GuardTests(t, backend) }
func TestRow(t *testing.T)         { sqlfencetest.RowTests(t, backend) }
func TestKV(t *testing.T)          { sqlfencetest.KVTests(t, backend) }
func TestConcurrency(t *testing.T) { sqlfencetest.ConcurrencyTests(t, backend) }
