package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// Dialect is MariaDB's and MySQL's SQL as a type: the type argument of the
// sqlguard types this package names (Guard, KV, Row).
type Dialect struct{}

// SQL returns MariaDB's and MySQL's sqlguard.Dialect.
func (Dialect) SQL() *sqlguard.Dialect { return dialect }

var dialect = &sqlguard.Dialect{
	Name:         "mysql",
	Translate:    translate,
	Schema:       Schema,
	KVSchema:     KVSchema,
	Quote:        "`",
	IdentRE:      regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,63}$`),
	IdentReason:  "must be 1 to 64 letters, digits, '_' or '$', not starting with a digit",
	LockSuffix:   " FOR UPDATE",
	Refuser:      "the database",
	GuardHint:    "(does the table compare bytes?)",
	FoundRowsErr: errNoFoundRows,
	FenceSQL:     fenceSQL,
	FenceArgs:    fenceArgs,
	UpsertSQL:    upsertSQL,
	UpsertArgs:   upsertArgs,
	Run:          run,
	NameType:     "VARBINARY(255)",
	TokenType:    "BIGINT",
	LeaseType:    "VARBINARY(128)",
}

// The markers FenceTx and Row leave in LAST_INSERT_ID. They are far above any
// AUTO_INCREMENT value a table reaches, so an insert into a table with one is not
// mistaken for an update.
const (
	markAcceptedID int64 = 9223372036854775001
	markRejectedID int64 = 9223372036854775002
)

var (
	markAccepted = strconv.FormatInt(markAcceptedID, 10)
	markRejected = strconv.FormatInt(markRejectedID, 10)
)

// fenceSQL is Guard.FenceTx's statement over the quoted table q.
func fenceSQL(q string) string {
	return "INSERT INTO " + q + " (resource, name, token, lease) VALUES (?, ?, ?, ?)" +
		" ON DUPLICATE KEY UPDATE lease = IF(LAST_INSERT_ID(IF(" + sqlguard.AdmitSQL("name", "token", "lease") + ", " + markAccepted + ", " + markRejected + ")) = " + markAccepted + ", ?, lease)," +
		" token = IF(" + sqlguard.AdmitSQL("name", "token", "lease") + ", ?, token)"
}

func fenceArgs(resource string, f fence.Fence) []any {
	tok := int64(f.Token)
	c := sqlguard.AdmitArgs(f)
	args := make([]any, 0, 4+2*len(c)+2)
	args = append(args, resource, f.Name, tok, f.LeaseID)
	args = append(args, c...)
	args = append(args, f.LeaseID)
	args = append(args, c...)
	return append(args, tok)
}

// upsertSQL inserts the row, or updates cols and the fence if the stored fence
// admits the new one. Value columns come first and the token last, so that each
// IF sees the stored token (MariaDB and MySQL evaluate assignments in order; the
// name and lease assignments cannot change the condition's outcome).
func upsertSQL(table, key string, cols []string, fn, ft, fl string) string {
	cond := "(" + ft + " = 0 OR " + sqlguard.AdmitSQL(fn, ft, fl) + ")"
	all := append(append([]string{key}, cols...), fn, ft, fl)
	ph := strings.TrimSuffix(strings.Repeat("?, ", len(all)), ", ")
	targets := append(append([]string{}, cols...), fn, fl, ft)
	var set []string
	for i, c := range targets {
		if i == 0 {
			set = append(set, c+" = IF(LAST_INSERT_ID(IF("+cond+", "+markAccepted+", "+markRejected+")) = "+markAccepted+", ?, "+c+")")
			continue
		}
		set = append(set, c+" = IF("+cond+", ?, "+c+")")
	}
	return "INSERT INTO " + table + " (" + strings.Join(all, ", ") + ") VALUES (" + ph + ") ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
}

// upsertArgs binds upsertSQL: the inserted row, then for each assignment the
// condition's arguments and the new value.
func upsertArgs(key any, values []any, f fence.Fence) []any {
	tok := int64(f.Token)
	c := sqlguard.AdmitArgs(f)
	args := make([]any, 0, 4+len(values)+(len(values)+3)*(len(c)+1))
	args = append(args, key)
	args = append(args, values...)
	args = append(args, f.Name, tok, f.LeaseID)
	for _, v := range append(append([]any{}, values...), f.Name, f.LeaseID, tok) {
		args = append(args, c...)
		args = append(args, v)
	}
	return args
}

// run executes a statement of fenceSQL or upsertSQL and reads its outcome.
func run(ctx context.Context, q sqlguard.Querier, stmt string, args []any) (bool, error) {
	res, err := q.ExecContext(ctx, stmt, args...)
	if err != nil {
		return false, err
	}
	return outcome(res)
}

// outcome reads the marker of an INSERT ... ON DUPLICATE KEY UPDATE whose update
// clause sets LAST_INSERT_ID(IF(admit, markAccepted, markRejected)).
func outcome(res sql.Result) (accepted bool, err error) {
	id, err := res.LastInsertId()
	if err != nil {
		return false, err
	}
	switch id {
	case markAcceptedID:
		return true, nil
	case markRejectedID:
		return false, nil
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n != 1 {
		return false, fmt.Errorf("%w: the upsert affected %d rows without leaving a marker (is the key the only unique key?)", ErrSchema, n)
	}
	return true, nil // inserted: the update clause did not run
}
