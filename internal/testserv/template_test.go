package testserv_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencelock/fence/internal/testserv"
)

// The first server saves its initialised data directory as a template; the next starts
// from a copy of it; a broken template is dropped and the server initialised afresh.
func TestPostgres_TemplateCache_ReusedAndBrokenOneReplaced(t *testing.T) {
	testserv.SkipIfShort(t)
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("TESTSERV_NOCACHE", "")

	first := testserv.Postgres(t)
	templates, _ := filepath.Glob(filepath.Join(cache, "fence-testserv", "pg-*", "data", "PG_VERSION"))
	if len(templates) != 1 {
		t.Fatalf("templates after first start = %q, want exactly one", templates)
	}
	first.Close()

	second := testserv.Postgres(t)
	if err := pgConnect0(second.DSN("postgres")); err != nil {
		t.Fatalf("server started from the template: %v", err)
	}
	second.Close()

	dataDir := filepath.Dir(templates[0])
	if err := os.Remove(filepath.Join(dataDir, "global", "pg_control")); err != nil {
		t.Fatal(err)
	}
	third := testserv.Postgres(t)
	if err := pgConnect0(third.DSN("postgres")); err != nil {
		t.Fatalf("server started despite a broken template: %v", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("broken template %s: Stat error = %v, want it removed", dataDir, err)
	}
}
