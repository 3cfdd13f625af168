package fence_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layer order of the module, lowest first: a package may import (outside its
// _test.go files) only packages of the module in strictly lower layers. It is
// DESIGN's order (root, driver, backends and the suites, then fencehttp and the
// libraries over a Locker, then the commands), with each internal helper placed
// just below the packages that import it. Packages in one layer never import each
// other: the backends, above all. Tests may import upward (a backend's tests run
// fencetest, which sits above the backends), so test imports are not checked.
//
// Every package of the module is in exactly one layer; a new package fails
// TestLayers until it is placed here.
var layers = []layerSpec{
	{"helpers: standard library and outside modules only", []string{
		"internal/gate", "internal/httpbuf", "fencehttp/ui",
		"internal/servers", // the one package that starts throwaway servers, for tools and tests; never imports testing
	}},
	{"server starters over internal/servers, apart for their heavy dependencies", []string{
		"internal/servers/mariadb",    // the MySQL driver
		"internal/servers/etcdmember", // the embedded etcd server
	}},
	{"root: the domain users call", []string{""}},
	{"driver, and the helpers that need only the domain", []string{
		"driver",
		"internal/faultclock/offset", // the fault clock's file format, shared by the product and the chaos harness
		"internal/watchtest",         // follows a fence.Watcher for the backends' tests
	}},
	{"recipes and guards over any Locker", []string{"election", "sqlguard"}},
	{"backends: one package each, never importing each other; sqlguard's dialects", []string{
		"inmem", "bolt", "redis", "etcd", "postgres", "zookeeper",
		"mysql", "sqlite",
		"internal/faultclock", // the product's clock under -tags faultclock, over driver's
	}},
	{"conformance suites and the test wrappers of the server starters", []string{
		"fencetest", "internal/fencedtest", "internal/diskfulltest", "internal/servers/servertest",
	}},
	{"test helpers over the suites and wrappers", []string{
		"internal/sqlguardtest",                // sqlguard's dialect suites over fencetest and the SQL servers
		"internal/servers/servertest/etcdtest", // etcd's test wrapper over servertest's
	}},
	{"the lock service's rules, under every wire", []string{
		"internal/service", // fair queues, scopes, P9's checks, request ids, drain, metrics, error codes; no wire
	}},
	{"the HTTP API and the libraries over a Locker", []string{"fencehttp", "idempotency"}},
	{"adapters over those", []string{"fencegrpc", "idempotency/boltstore", "idempotency/pgstore",
		"internal/cluster", // cluster mode's node: an embedded etcd member, offering fencehttp.Cluster; only cmd/fence imports it
	}},
	{"the engines of the tools, each imported by one command", []string{
		"internal/chaos", "internal/sim", "internal/demo", // cmd/fence's chaos, simulate and demo
		"internal/bench", // cmd/fence-bench's table
	}},
	{"commands, examples, and packages that are tests only", []string{
		"cmd/...", "examples/...",
		"fencehttp/bench", "packaging",
	}},
}

// backends are the packages DESIGN names as one backend each: only cmd/ and
// examples/ wire more than one of them together, apart from multiBackend's
// exceptions.
var backends = []string{"inmem", "bolt", "redis", "etcd", "postgres", "zookeeper"}

// multiBackend are the packages outside cmd/ and examples/ allowed to import more
// than one backend, each with its reason. Each is an exception to "only cmd/ wires
// backends together", kept explicit so that a new one is a decision.
var multiBackend = map[string]string{
	"internal/bench":      "the benchmark's fence rows run the bolt, etcd and redis Lockers in process; only cmd/fence-bench imports it",
	"internal/cluster":    "fence serve --node runs etcd's store; fence cluster migrate reads the single node's bolt store and writes its KV through etcd's; only cmd/fence imports it",
	"internal/chaos":      "the harness's workers lock through redis.Locker on the Redis store and write through postgres.Guard; only cmd/fence imports it",
	"internal/fencedtest": "the resource-side middlewares' tests run over the real guards of inmem and bolt; tests only",
}

const module = "github.com/fencelock/fence"

// layerOf returns the indexes in table of the layers holding pkg (relative to the
// module): one for a package placed right.
func layerOf(table []layerSpec, pkg string) []int {
	var found []int
	for i, l := range table {
		for _, p := range l.pkgs {
			dir, tree := strings.CutSuffix(p, "/...")
			if pkg == dir || tree && strings.HasPrefix(pkg, dir+"/") {
				found = append(found, i)
			}
		}
	}
	return found
}

// layerSpec is one layer: its name, and its packages by import path relative to
// the module ("" is the root; "dir/..." is dir and every package below it).
type layerSpec struct {
	name string
	pkgs []string
}

// moduleImports returns the module's packages (relative to the module) and, for
// each, its non-test imports of the module's packages.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Skip("go command not found: cannot list the module's imports")
	}
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, out)
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return "", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, _ := rel(f[0])
		imports[pkg] = nil
		for _, imp := range f[1:] {
			if r, ok := rel(imp); ok {
				imports[pkg] = append(imports[pkg], r)
			}
		}
	}
	return imports
}

// layerViolations returns what is wrong with imports under table: packages placed
// in no layer or in several, and imports that do not point to a strictly lower
// layer ("FROM -> TO (layer X imports layer Y)").
func layerViolations(table []layerSpec, imports map[string][]string) []string {
	var bad []string
	name := func(p string) string {
		if p == "" {
			return "fence (root)"
		}
		return p
	}
	pkgs := make([]string, 0, len(imports))
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		if n := len(layerOf(table, p)); n != 1 {
			bad = append(bad, fmt.Sprintf("%s is in %d layers, want 1", name(p), n))
		}
	}
	for _, p := range pkgs {
		from := layerOf(table, p)
		if len(from) != 1 {
			continue
		}
		for _, imp := range imports[p] {
			to := layerOf(table, imp)
			if len(to) == 1 && to[0] >= from[0] {
				bad = append(bad, fmt.Sprintf("%s -> %s (layer %q imports layer %q)", name(p), name(imp), table[from[0]].name, table[to[0]].name))
			}
		}
	}
	// A stale entry (a package that is gone) hides nothing, but misleads a reader.
	for _, l := range table {
		for _, entry := range l.pkgs {
			used := false
			for _, p := range pkgs {
				if len(layerOf([]layerSpec{{pkgs: []string{entry}}}, p)) > 0 {
					used = true
				}
			}
			if !used {
				bad = append(bad, fmt.Sprintf("layer %q names %q: no such package", l.name, entry))
			}
		}
	}
	return bad
}

// TestLayers fails when a package imports one in its own or a higher layer, or when
// a package is not placed in exactly one layer.
func TestLayers(t *testing.T) {
	for _, v := range layerViolations(layers, moduleImports(t)) {
		t.Error(v)
	}
}

// TestLayers_OnlyCommandsWireBackendsTogether: outside cmd/ and examples/, a package
// imports at most one backend, unless multiBackend says why.
func TestLayers_OnlyCommandsWireBackendsTogether(t *testing.T) {
	imports := moduleImports(t)
	used := map[string]bool{}
	for p, imps := range imports {
		if strings.HasPrefix(p, "cmd/") || strings.HasPrefix(p, "examples/") {
			continue
		}
		var bs []string
		for _, imp := range imps {
			if slices.Contains(backends, imp) {
				bs = append(bs, imp)
			}
		}
		if len(bs) < 2 {
			continue
		}
		if _, ok := multiBackend[p]; ok {
			used[p] = true
			continue
		}
		t.Errorf("%s imports the backends %v: only cmd/ wires backends together (or add it to multiBackend with the reason)", p, bs)
	}
	for p := range multiBackend {
		if !used[p] {
			t.Errorf("multiBackend names %s, which no longer imports several backends: remove it", p)
		}
	}
}

// The check can fail: on tables that are deliberately wrong, it names the imports
// that run up and the packages that are not placed.
func TestLayers_SelfCheck_WrongTablesFail(t *testing.T) {
	imports := moduleImports(t)
	good := layers

	// The root and the driver swapped: driver imports the root, now above it.
	swapped := slices.Clone(good)
	root, driver := -1, -1
	for i, l := range swapped {
		if slices.Contains(l.pkgs, "") {
			root = i
		}
		if slices.Contains(l.pkgs, "driver") {
			driver = i
		}
	}
	if root < 0 || driver < 0 {
		t.Fatal("the table has no root or no driver layer")
	}
	swapped[root], swapped[driver] = swapped[driver], swapped[root]
	if v := layerViolations(swapped, imports); !slices.ContainsFunc(v, func(s string) bool { return strings.HasPrefix(s, "driver -> fence (root) ") }) {
		t.Errorf("with the root above the driver, violations %q; want driver -> fence (root)", v)
	}

	// Two backends in one layer may not import each other: a table that puts the
	// root in the backends' layer makes every backend's import of it a violation.
	merged := slices.Clone(good)
	for i, l := range merged {
		switch {
		case slices.Contains(l.pkgs, ""):
			merged[i] = layerSpec{l.name, nil}
		case slices.Contains(l.pkgs, "bolt"):
			merged[i] = layerSpec{l.name, append(slices.Clone(l.pkgs), "")}
		}
	}
	if v := layerViolations(merged, imports); !slices.Contains(v, `bolt -> fence (root) (layer "backends: one package each, never importing each other; sqlguard's dialects" imports layer "backends: one package each, never importing each other; sqlguard's dialects")`) {
		t.Errorf("with the root among the backends, violations %q; want bolt -> fence (root) within one layer", v)
	}

	// A package left out of the table, and one placed twice.
	dropped := slices.Clone(good)
	dropped[0] = layerSpec{dropped[0].name, slices.DeleteFunc(slices.Clone(dropped[0].pkgs), func(p string) bool { return p == "internal/gate" })}
	dropped[1] = layerSpec{dropped[1].name, append(slices.Clone(dropped[1].pkgs), "fencehttp/ui")}
	v := layerViolations(dropped, imports)
	for _, want := range []string{"internal/gate is in 0 layers, want 1", "fencehttp/ui is in 2 layers, want 1"} {
		if !slices.Contains(v, want) {
			t.Errorf("violations %q; want %q", v, want)
		}
	}

	// A stale entry.
	stale := append(slices.Clone(good), layerSpec{"top", []string{"no/such/package"}})
	if v := layerViolations(stale, imports); !slices.Contains(v, `layer "top" names "no/such/package": no such package`) {
		t.Errorf("violations %q; want the stale entry named", v)
	}
}
