package servers

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// useTempCache points the template cache at a fresh directory for this test.
func useTempCache(t *testing.T) string {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(templateCacheEnv, "")
	return filepath.Join(cache, "fence-testserv")
}

func TestInitFromTemplate_BuildsOnceThenCopies(t *testing.T) {
	useTempCache(t)
	builds := 0
	build := func(dataDir string) error {
		builds++
		if err := os.MkdirAll(filepath.Join(dataDir, "sub"), 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dataDir, "sub", "f"), []byte("made"), 0o600)
	}
	for i, wantCached := range []bool{false, true, true} {
		dataDir := filepath.Join(t.TempDir(), "data")
		cached, err := initFromTemplate("kind-key", dataDir, build)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if cached != wantCached {
			t.Fatalf("start %d: cached = %v, want %v", i, cached, wantCached)
		}
		b, err := os.ReadFile(filepath.Join(dataDir, "sub", "f"))
		if err != nil || string(b) != "made" {
			t.Fatalf("start %d: data file = %q, %v; want %q", i, b, err, "made")
		}
		st, err := os.Stat(filepath.Join(dataDir, "sub", "f"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("start %d: data file mode = %v, %v; want 0600 kept", i, st.Mode().Perm(), err)
		}
	}
	if builds != 1 {
		t.Fatalf("builds = %d, want 1", builds)
	}
}

func TestInitFromTemplate_NoCacheEnvAlwaysBuilds(t *testing.T) {
	root := useTempCache(t)
	t.Setenv(templateCacheEnv, "1")
	builds := 0
	build := func(dataDir string) error { builds++; return os.MkdirAll(dataDir, 0o700) }
	for i := 0; i < 2; i++ {
		if cached, err := initFromTemplate("kind-key", filepath.Join(t.TempDir(), "data"), build); err != nil || cached {
			t.Fatalf("start %d: cached, err = %v, %v; want false, nil", i, cached, err)
		}
	}
	if builds != 2 {
		t.Fatalf("builds = %d, want 2", builds)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("cache dir %s: Stat error = %v, want none made", root, err)
	}
}

// A broken template (a cluster with no pg_control) makes the server fail to start; the
// template is then rebuilt and the server starts; the next one uses the new template.
func TestStartPostgres_BrokenTemplate_Rebuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	root := useTempCache(t)
	initdb, err := FindBinary("initdb", "postgresql")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := postgresNextTo(initdb)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := serverCredential("postgres")
	if err != nil {
		t.Fatal(err)
	}
	key := postgresTemplateKey(initdb, bin, cred)
	broken := filepath.Join(root, key, "data")
	if err := os.MkdirAll(broken, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "PG_VERSION"), []byte("not a cluster\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := chownTo(broken, cred); err != nil {
		t.Fatal(err)
	}

	srv, err := StartPostgres(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatalf("connect to the server started despite a broken template: %v", err)
	}
	conn.Close(ctx)
	if _, err := os.Stat(filepath.Join(broken, "global", "pg_control")); err != nil {
		t.Fatalf("template after rebuild: %v, want a real cluster", err)
	}
}
