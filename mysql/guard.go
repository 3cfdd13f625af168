package mysql

import (
	"database/sql"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// Defaults of the guard's tables (the same for every dialect, see sqlguard).
const (
	// DefaultTable is the fences table a Guard uses when GuardOptions.Table is empty.
	DefaultTable = sqlguard.DefaultTable
	// DefaultKVTable is the table a KV uses when KVOptions.Table is empty.
	DefaultKVTable = sqlguard.DefaultKVTable
	// MaxValueLen is the largest value KV.Put accepts, in bytes. It stays well
	// below the server's default max_allowed_packet (16 MiB on MariaDB 10.11).
	MaxValueLen = sqlguard.MaxValueLen
)

// Default fence column names of a Row.
const (
	DefaultFenceName  = sqlguard.DefaultFenceName
	DefaultFenceToken = sqlguard.DefaultFenceToken
	DefaultFenceLease = sqlguard.DefaultFenceLease
)

// Schema is the DDL of the default fences table, as CreateSchema runs it. The
// primary key on resource is the only index the guard needs: every statement looks
// a fence up by resource. The text columns are VARBINARY so that resources, lock
// names and lease ids compare byte for byte (no collation folds case or pads spaces).
const Schema = "CREATE TABLE IF NOT EXISTS `fence_resources` (\n" +
	"  resource VARBINARY(255) NOT NULL PRIMARY KEY,\n" +
	"  name     VARBINARY(255) NOT NULL,\n" +
	"  token    BIGINT NOT NULL CHECK (token > 0),\n" +
	"  lease    VARBINARY(128) NOT NULL\n" +
	") ENGINE=InnoDB"

// KVSchema is the DDL of the default KV table. A NULL v marks a key that holds no
// value: only fenced (KV.Fence), or deleted (KV.Delete).
const KVSchema = "CREATE TABLE IF NOT EXISTS `fence_kv` (\n" +
	"  k           VARBINARY(255) NOT NULL PRIMARY KEY,\n" +
	"  v           LONGBLOB NULL,\n" +
	"  fence_name  VARBINARY(255) NOT NULL,\n" +
	"  fence_token BIGINT NOT NULL CHECK (fence_token > 0),\n" +
	"  fence_lease VARBINARY(128) NOT NULL\n" +
	") ENGINE=InnoDB"

// The guard's types for MariaDB and MySQL: sqlguard's, over this package's
// Dialect. Their methods and errors are documented there; the SQL they run is in
// the package documentation.
type (
	// Guard is the resource fence (see sqlguard.Guard). It implements fence.Guard.
	Guard = sqlguard.Guard[Dialect]
	// KV is a fenced key-value table (see sqlguard.KV). It implements fence.KV
	// (Delete included), fence.Guard and fence.Purger. It grants no locks, so it
	// does not check that a fence's token was issued (P9).
	KV = sqlguard.KV[Dialect]
	// Row is the row fence over a table of the caller's (see sqlguard.Row): set
	// its fields, then use it. Its statements need a DSN with clientFoundRows=true.
	Row = sqlguard.Row[Dialect]
	// GuardOptions configure a Guard; the zero value (or nil) uses DefaultTable.
	// Table may be qualified by a database ("app.fence_resources"); letters,
	// digits, '_' and '$' only.
	GuardOptions = sqlguard.GuardOptions
	// KVOptions configure a KV; the zero value (or nil) uses DefaultKVTable.
	KVOptions = sqlguard.KVOptions
	// Querier runs statements: a *sql.Tx, *sql.DB or *sql.Conn.
	Querier = sqlguard.Querier
	// DB is what a Guard needs of the database: a *sql.DB opened with the
	// go-sql-driver/mysql driver and a DSN that sets clientFoundRows=true (see Open).
	DB = sqlguard.DB
)

var (
	_ fence.Guard = (*Guard)(nil)
	_ fence.KV    = (*KV)(nil)
	_ fence.Guard = (*KV)(nil)

	_ fence.Purger = (*KV)(nil)
)

// NewGuard returns a Guard over db with the fences table of opts. A bad table name
// or a nil db is reported by every method as an error matching fence.ErrInvalid.
func NewGuard(db DB, opts *GuardOptions) *Guard { return sqlguard.NewGuard[Dialect](db, opts) }

// NewKV returns a KV over db with the table of opts. A bad table name or a nil db
// is reported by every method as an error matching fence.ErrInvalid.
func NewKV(db DB, opts *KVOptions) *KV { return sqlguard.NewKV[Dialect](db, opts) }

// Open opens a *sql.DB for a Guard: it parses dsn (go-sql-driver/mysql form, e.g.
// "user@tcp(127.0.0.1:3306)/app") and sets clientFoundRows=true, which the guard's
// conditional UPDATE needs to tell an unchanged write from a stale one. It returns
// an error matching fence.ErrInvalid for a malformed DSN.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: open: %w: %w", fence.ErrInvalid, err)
	}
	cfg.ClientFoundRows = true
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: open: %w: %w", fence.ErrInvalid, err)
	}
	return sql.OpenDB(conn), nil
}

// CheckDSN returns an error matching fence.ErrInvalid unless dsn parses and sets
// clientFoundRows=true.
func CheckDSN(dsn string) error {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("mysql: check dsn: %w: %w", fence.ErrInvalid, err)
	}
	if !cfg.ClientFoundRows {
		return fmt.Errorf("mysql: check dsn: %w", errNoFoundRows)
	}
	return nil
}

var errNoFoundRows = &fence.InvalidError{Field: "dsn", Value: "clientFoundRows", Reason: "must be true: the connection counts changed rows, so an unchanged fenced write looks stale (use mysql.Open or add clientFoundRows=true)"}
