package fence_test

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The seam between package fence and package driver is plain code that runs one
// way: driver imports fence; fence imports nothing of the module; no package's
// init fills another package's variables; and no exported name of fence or driver
// mentions a type of an internal package, which godoc cannot show. These tests
// hold that shape.

const modulePath = "github.com/fencelock/fence"

// seamDirs are the packages of the seam, relative to the module root (this
// package's directory).
var seamDirs = []string{".", "driver"}

func TestSeam_NoInitSetsAnotherPackagesVariable(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, p := range initWiring(fset, f) {
			t.Errorf("%s: an init sets another package's variable; call that package's code instead", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d non-test files; want the whole module (at least 100)", checked)
	}
}

func TestSeam_NoPackageLevelFunctionVariable(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range seamDirs {
		for _, f := range parseDir(t, fset, dir) {
			for _, p := range funcVars(fset, f) {
				t.Errorf("%s: package-level function variable in the seam; declare a function", p)
			}
		}
	}
}

func TestSeam_RootImportsNothingOfTheModule(t *testing.T) {
	fset := token.NewFileSet()
	for _, f := range parseDir(t, fset, ".") {
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == modulePath || strings.HasPrefix(path, modulePath+"/") {
				t.Errorf("%s: package fence imports %s; it must stay below every package of the module", fset.Position(imp.Pos()), path)
			}
		}
	}
}

func TestSeam_NoInternalTypeInPublicAPI(t *testing.T) {
	fset := token.NewFileSet()
	imp := exportImporter(t, fset)
	for _, dir := range seamDirs {
		files := parseDir(t, fset, dir)
		conf := types.Config{Importer: imp}
		pkg, err := conf.Check(filepath.Join(modulePath, dir), fset, files, nil)
		if err != nil {
			t.Fatalf("type-check %s: %v", dir, err)
		}
		exported := 0
		for _, p := range internalMentions(pkg) {
			t.Errorf("package %s: %s", pkg.Name(), p)
		}
		for _, name := range pkg.Scope().Names() {
			if token.IsExported(name) {
				exported++
			}
		}
		if exported < 10 {
			t.Fatalf("package %s: %d exported names checked; want its whole API", pkg.Name(), exported)
		}
	}
}

// TestSeam_ChecksCatchTheOldSeam shows that the checks above fail on the shape
// this seam used to have: an internal package's function variables filled by
// fence's init, and a public option type naming an internal struct.
func TestSeam_ChecksCatchTheOldSeam(t *testing.T) {
	fset := token.NewFileSet()
	src := `package fence

import "github.com/fencelock/fence/internal/core"

var hook func() error

var other = func() {}

func init() {
	core.ValidateName = validateName
	local = 1
}
`
	f, err := parser.ParseFile(fset, "old.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if got := initWiring(fset, f); len(got) != 1 || !strings.Contains(got[0], "core.ValidateName") {
		t.Errorf("initWiring(old seam) = %q; want the one assignment to core.ValidateName", got)
	}
	if got := funcVars(fset, f); len(got) != 2 {
		t.Errorf("funcVars(old seam) = %q; want hook and other", got)
	}

	core := types.NewPackage(modulePath+"/internal/core", "core")
	opts := types.NewNamed(types.NewTypeName(token.NoPos, core, "AcquireOptions", nil), types.NewStruct(nil, nil), nil)
	core.Scope().Insert(opts.Obj())
	core.MarkComplete()
	conf := types.Config{Importer: importerFunc(func(path string) (*types.Package, error) {
		if path == core.Path() {
			return core, nil
		}
		return nil, fmt.Errorf("unexpected import %s", path)
	})}
	pub, err := parser.ParseFile(fset, "option.go", `package fence

import "github.com/fencelock/fence/internal/core"

type AcquireOption func(*core.AcquireOptions)

type ok func(*core.AcquireOptions) // unexported: not part of the API
`, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := conf.Check(modulePath, fset, []*ast.File{pub}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := internalMentions(pkg); len(got) != 1 || !strings.Contains(got[0], "AcquireOption") {
		t.Errorf("internalMentions(old option) = %q; want AcquireOption", got)
	}
}

// exportImporter returns an importer that reads the compiler's export data of the
// seam's dependencies, as `go list -export` reports it (type-checking the standard
// library from source instead takes seconds, more under the race detector).
func exportImporter(t *testing.T, fset *token.FileSet) types.Importer {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	for _, dir := range seamDirs {
		args = append(args, "./"+dir)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	export := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok && file != "" {
			export[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// initWiring returns the assignments, in f's init functions, to a selector on an
// imported package of the module: one package filling in another's variables.
func initWiring(fset *token.FileSet, f *ast.File) []string {
	imported := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if path != modulePath && !strings.HasPrefix(path, modulePath+"/") {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imported[name] = true
	}
	var out []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != "init" || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok {
				return true
			}
			for _, lhs := range as.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && imported[id.Name] {
						out = append(out, fset.Position(lhs.Pos()).String()+": "+id.Name+"."+sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
	return out
}

// funcVars returns f's package-level variables of a function type, declared with
// that type or with a function literal.
func funcVars(fset *token.FileSet, f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			_, typed := vs.Type.(*ast.FuncType)
			for i, name := range vs.Names {
				lit := false
				if i < len(vs.Values) {
					_, lit = vs.Values[i].(*ast.FuncLit)
				}
				if typed || lit {
					out = append(out, fset.Position(name.Pos()).String()+": "+name.Name)
				}
			}
		}
	}
	return out
}

// internalMentions returns the exported names of pkg whose declaration shows a
// type of an internal package: in an alias, a signature, an exported field or
// method, a variable's or constant's type.
func internalMentions(pkg *types.Package) []string {
	var out []string
	for _, name := range pkg.Scope().Names() {
		obj := pkg.Scope().Lookup(name)
		if !obj.Exported() {
			continue
		}
		var found []string
		if tn, ok := obj.(*types.TypeName); ok && !tn.IsAlias() {
			found = publicParts(tn.Type().Underlying(), nil)
			if n, ok := tn.Type().(*types.Named); ok {
				for m := range n.Methods() {
					if m.Exported() {
						found = publicParts(m.Type(), found)
					}
				}
			}
		} else {
			found = publicParts(obj.Type(), nil)
		}
		if len(found) > 0 {
			slices.Sort(found)
			out = append(out, name+" mentions "+strings.Join(slices.Compact(found), ", "))
		}
	}
	return out
}

// publicParts appends to found the internal named types that t shows a user.
func publicParts(t types.Type, found []string) []string {
	switch t := t.(type) {
	case *types.Alias:
		return publicParts(types.Unalias(t), named(t.Obj(), found))
	case *types.Named:
		found = named(t.Obj(), found)
		for a := range t.TypeArgs().Types() {
			found = publicParts(a, found)
		}
		return found
	case *types.Pointer:
		return publicParts(t.Elem(), found)
	case *types.Slice:
		return publicParts(t.Elem(), found)
	case *types.Array:
		return publicParts(t.Elem(), found)
	case *types.Chan:
		return publicParts(t.Elem(), found)
	case *types.Map:
		return publicParts(t.Elem(), publicParts(t.Key(), found))
	case *types.Signature:
		for v := range t.Params().Variables() {
			found = publicParts(v.Type(), found)
		}
		for v := range t.Results().Variables() {
			found = publicParts(v.Type(), found)
		}
		return found
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() {
				found = publicParts(f.Type(), found)
			}
		}
		return found
	case *types.Interface:
		for m := range t.Methods() {
			if m.Exported() {
				found = publicParts(m.Type(), found)
			}
		}
		for e := range t.EmbeddedTypes() {
			found = publicParts(e, found)
		}
		return found
	}
	return found
}

func named(obj *types.TypeName, found []string) []string {
	if obj.Pkg() == nil {
		return found
	}
	path := obj.Pkg().Path()
	if strings.HasPrefix(path, "internal/") || strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
		found = append(found, path+"."+obj.Name())
	}
	return found
}
