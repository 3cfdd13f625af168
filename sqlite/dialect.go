package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// Dialect is SQLite's SQL as a type: the type argument of the sqlguard types this
// package names (Guard, KV, Row).
type Dialect struct{}

// SQL returns SQLite's sqlguard.Dialect.
func (Dialect) SQL() *sqlguard.Dialect { return dialect }

// dialect is SQLite's SQL. SQLite has one writer at a time, so a read in the
// writing transaction needs no FOR UPDATE, and it counts matched rows, so no
// found-rows check is needed.
var dialect = &sqlguard.Dialect{
	Name:        "sqlite",
	Translate:   translate,
	Schema:      Schema,
	KVSchema:    KVSchema,
	Quote:       `"`,
	IdentRE:     regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`),
	IdentReason: "must be 1 to 64 letters, digits or '_', not starting with a digit",
	Refuser:     "SQLite",
	GuardHint:   "(do the columns compare bytes?)",
	FenceSQL: func(q string) string {
		return "INSERT INTO " + q + " AS f (resource, name, token, lease) VALUES (?, ?, ?, ?)" +
			" ON CONFLICT (resource) DO UPDATE SET lease = excluded.lease, token = excluded.token" +
			" WHERE " + admitCond("f.name", "f.token", "f.lease") + " RETURNING 1"
	},
	FenceArgs: func(resource string, f fence.Fence) []any {
		return []any{resource, f.Name, int64(f.Token), f.LeaseID}
	},
	UpsertSQL: upsertSQL,
	UpsertArgs: func(key any, values []any, f fence.Fence) []any {
		args := make([]any, 0, len(values)+4)
		args = append(args, key)
		args = append(args, values...)
		return append(args, f.Name, int64(f.Token), f.LeaseID)
	},
	Run:       run,
	NameType:  "TEXT",
	TokenType: "INTEGER",
	LeaseType: "TEXT",
}

// run runs an upsert ending in RETURNING 1: a row means inserted or advanced,
// none means the stored fence refused it.
func run(ctx context.Context, q sqlguard.Querier, stmt string, args []any) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, stmt, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// upsertSQL inserts the row, or updates cols and the fence if the stored fence
// (token 0: never fenced) admits the excluded row's.
func upsertSQL(table, key string, cols []string, fn, ft, fl string) string {
	all := append(append([]string{key}, cols...), fn, ft, fl)
	ph := strings.TrimSuffix(strings.Repeat("?, ", len(all)), ", ")
	var set []string
	for _, c := range append(append([]string{}, cols...), fn, fl, ft) {
		set = append(set, c+" = excluded."+c)
	}
	return "INSERT INTO " + table + " AS f (" + strings.Join(all, ", ") + ") VALUES (" + ph + ")" +
		" ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(set, ", ") +
		" WHERE f." + ft + " = 0 OR " + admitCond("f."+fn, "f."+ft, "f."+fl) + " RETURNING 1"
}

// admitCond is fence.Admit's rule over the stored columns and the excluded (new)
// row. A NULL stored column makes it NULL, which refuses the write.
func admitCond(name, token, lease string) string {
	return name + " = excluded." + unqualified(name) + " AND (excluded." + unqualified(token) + " > " + token +
		" OR (excluded." + unqualified(token) + " = " + token + " AND excluded." + unqualified(lease) + " <> '' AND excluded." + unqualified(lease) + " = " + lease + "))"
}

func unqualified(col string) string {
	if i := strings.LastIndexByte(col, '.'); i >= 0 {
		return col[i+1:]
	}
	return col
}
