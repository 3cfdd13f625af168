package mysql_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/sqlfence/sqlfencetest"
	"github.com/fencelock/fence/mysql"
)

// backend runs the tests mysql shares with sqlite on the package's MariaDB server.
var backend = sqlfencetest.Backend[mysql.Querier, *mysql.Row, *mysql.Guard]{
	Name: "mysql",
	DB:   db,
	NewRow: func(table, key string, cols ...string) *mysql.Row {
		return &mysql.Row{Table: table, Key: key, Columns: cols}
	},
	NewGuard: func(d *sql.DB, table string) *mysql.Guard {
		if d == nil {
			return mysql.NewGuard(nil, &mysql.GuardOptions{Table: table})
		}
		return mysql.NewGuard(d, &mysql.GuardOptions{Table: table})
	},
	NewKV:       func(d *sql.DB) fencetest.Guarded { return mysql.NewKV(d, nil) },
	ErrSchema:   mysql.ErrSchema,
	MaxValueLen: mysql.MaxValueLen,
	Types: strings.NewReplacer("{INT}", "BIGINT", "{NAME}", "VARBINARY(255)", "{LEASE}", "VARBINARY(128)",
		"{BLOB}", "LONGBLOB", "{AUTOID}", "BIGINT AUTO_INCREMENT PRIMARY KEY"),
	Upsert: func(key string, cols ...string) string {
		set := make([]string, len(cols))
		for i, c := range cols {
			set[i] = c + " = VALUES(" + c + ")"
		}
		return " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
	},
}

func TestGuard(t *testing.T)       { sqlfencetest.GuardTests(t, backend) }
func TestRow(t *testing.T)         { sqlfencetest.RowTests(t, backend) }
func TestKV(t *testing.T)          { sqlfencetest.KVTests(t, backend) }
func TestConcurrency(t *testing.T) { sqlfencetest.ConcurrencyTests(t, backend) }
