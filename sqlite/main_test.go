package sqlite_test

import "github.com/fencelock/fence/internal/sqlguardtest"

// The helpers the package's tests share with sqlguard's suite (see sqlguardtest);
// that suite runs the guard, row and KV tests over SQLite.
var (
	resource = sqlguardtest.Resource
	fenceOf  = sqlguardtest.FenceOf
)
