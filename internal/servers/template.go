package servers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Creating a data directory (initdb, mariadb-install-db) costs seconds of CPU, more on a
// loaded machine; copying one costs a fraction of a second. So the first server of a
// kind initialises a data directory as usual and saves a copy in the user's cache
// directory; later servers, in this process or others, copy it. The cache key covers the
// binaries (path, size, modification time), the init arguments and the user the server
// runs as, so an upgrade or a change of options makes a new template. Any failure of
// the cache falls back to initialising from scratch; set TESTSERV_NOCACHE=1 to bypass it.

// templateCacheEnv disables the template cache when set to a non-empty value.
const templateCacheEnv = "TESTSERV_NOCACHE"

// TemplateKey returns the template cache entry name for kind, derived from the
// binaries (path, size, modification time) and the other parts of the setup that
// shape the data directory; "" (no caching) if a binary cannot be read.
func TemplateKey(kind string, binaries []string, parts ...string) string {
	h := sha256.New()
	for _, b := range binaries {
		st, err := os.Stat(b)
		if err != nil {
			return "" // unknown binary: do not cache
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", b, st.Size(), st.ModTime().UnixNano())
	}
	for _, p := range parts {
		fmt.Fprintf(h, "%s\x00", p)
	}
	return kind + "-" + hex.EncodeToString(h.Sum(nil))[:20]
}

// templateRoot returns the cache directory for templates, or "" if there is none.
func templateRoot() string {
	if os.Getenv(templateCacheEnv) != "" {
		return ""
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "fence-testserv")
}

// initFromTemplate makes dataDir, copying it from the cached template key if there is
// one and running build(dataDir) otherwise (then caching the result). It reports
// whether dataDir came from the cache, so a caller whose server then fails to start can
// rebuild it (rebuildTemplate).
func initFromTemplate(key, dataDir string, build func(dataDir string) error) (cached bool, err error) {
	root := templateRoot()
	if root == "" || key == "" {
		return false, build(dataDir)
	}
	tmpl := filepath.Join(root, key)
	if _, err := os.Stat(filepath.Join(tmpl, "data")); err == nil {
		if copyTree(filepath.Join(tmpl, "data"), dataDir) == nil {
			return true, nil
		}
		os.RemoveAll(dataDir) // a partial copy; build instead
	}
	if err := build(dataDir); err != nil {
		return false, err
	}
	saveTemplate(root, tmpl, dataDir)
	return false, nil
}

// StartFromTemplate makes dataDir from the cached template key (a copy; build makes it
// from scratch when the cache has none, and the result is cached) and starts the
// server on a free port (StartOnFreePort with setPort and start). If the server fails
// to start from a cached data directory for another reason than a port clash, the
// template is rebuilt once and the start tried again. It returns the error of the
// set-up or of the last start.
func StartFromTemplate(key, dataDir string, build func(dataDir string) error, setPort func(port int), start func() error) error {
	cached, err := initFromTemplate(key, dataDir, build)
	if err != nil {
		return err
	}
	var rebuild func() error
	if cached {
		rebuild = func() error { return rebuildTemplate(key, dataDir, build) }
	}
	return StartOnFreePort(setPort, start, rebuild)
}

// saveTemplate copies dataDir to tmpl/data, atomically: a copy under a temporary name,
// renamed into place. If another process saved one first, ours is discarded.
func saveTemplate(root, tmpl, dataDir string) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return
	}
	// Leftovers of processes killed while saving.
	if old, _ := filepath.Glob(filepath.Join(root, ".tmp-*")); len(old) > 0 {
		for _, o := range old {
			if st, err := os.Stat(o); err == nil && time.Since(st.ModTime()) > time.Hour {
				os.RemoveAll(o)
			}
		}
	}
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return
	}
	if copyTree(dataDir, filepath.Join(tmp, "data")) != nil || os.Rename(tmp, tmpl) != nil {
		os.RemoveAll(tmp)
	}
}

// rebuildTemplate is for a server that failed to start from the template key: it
// removes the template and dataDir, runs build(dataDir) and caches the result.
func rebuildTemplate(key, dataDir string, build func(dataDir string) error) error {
	os.RemoveAll(dataDir)
	root := templateRoot()
	if root == "" || key == "" {
		return build(dataDir)
	}
	tmpl := filepath.Join(root, key)
	os.RemoveAll(tmpl)
	if err := build(dataDir); err != nil {
		return err
	}
	saveTemplate(root, tmpl, dataDir)
	return nil
}

// copyTree copies the directory src to dst (which must not exist), keeping owners and
// modes: cp -a does that for every file type, which a Go copy would have to redo.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("servers: cp -a %s %s: %w: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}
