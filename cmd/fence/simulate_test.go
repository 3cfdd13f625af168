package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// result is one in-process run of the command line.
type simResult struct {
	stdout, stderr string
	code           int
}

// simulateCLI runs the command line in this process through run (so exit statuses
// and the one-line errors are the binary's), with stdout and stderr captured.
// Tests using it must not run in parallel: it swaps os.Stdout and os.Stderr.
func simulateCLI(t *testing.T, args ...string) simResult {
	t.Helper()
	dir := t.TempDir()
	outF, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outF, errF
	code := run(args)
	os.Stdout, os.Stderr = oldOut, oldErr
	outF.Close()
	errF.Close()
	stdout, _ := os.ReadFile(outF.Name())
	stderr, _ := os.ReadFile(errF.Name())
	return simResult{stdout: string(stdout), stderr: string(stderr), code: code}
}

func wantStatus(t *testing.T, what string, r simResult, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: want exit status %d, got %d\nstdout: %.300s\nstderr: %s", what, code, r.code, r.stdout, r.stderr)
	}
}

// golden reads a file rendered by the sim package's golden tests.
func golden(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, path...)...))
	if err != nil {
		t.Fatalf("read golden file: %v", err)
	}
	return string(b)
}

func TestSimulate_NoFlags_PrintsTheSeedScenarioFencingOffThenOn(t *testing.T) {
	r := simulateCLI(t, "simulate")
	wantStatus(t, "fence simulate", r, 0)
	want := golden(t, "internal", "sim", "testdata", "pause-past-ttl-fencing-off.txt") + "\n" + golden(t, "internal", "sim", "testdata", "pause-past-ttl-fencing-on.txt")
	if r.stdout != want {
		t.Errorf("fence simulate: want the pause-past-ttl timeline fencing off then on\nwant:\n%s\ngot:\n%s", want, r.stdout)
	}
	for _, s := range []string{`accepted (no fencing), overwriting "B's data" written with token 2`, `REJECTED: fence: stale token 1 for "ledger", highest seen 2`} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("fence simulate: want %q in the output, got:\n%s", s, r.stdout)
		}
	}
}

func TestSimulate_EachFormat_ByteIdenticalToTheGoldenFile(t *testing.T) {
	for _, f := range []struct{ format, ext string }{{"text", "txt"}, {"json", "json"}, {"mermaid", "mmd"}, {"svg", "svg"}} {
		args := []string{"simulate", "--scenario", "payments", "--fencing", "on", "--seed", "1", "--format", f.format}
		first := simulateCLI(t, args...)
		wantStatus(t, strings.Join(args, " "), first, 0)
		second := simulateCLI(t, args...)
		if first.stdout != second.stdout {
			t.Errorf("--format %s: two runs with the same flags differ", f.format)
		}
		if want := golden(t, "internal", "sim", "testdata", "payments-fencing-on."+f.ext); first.stdout != want {
			t.Errorf("--format %s: output differs from internal/sim/testdata/payments-fencing-on.%s", f.format, f.ext)
		}
	}
}

func TestSimulate_SVGWithoutFencingFlag_IsTheDocsDiagram(t *testing.T) {
	for _, f := range []struct{ format, file string }{{"svg", "pause-past-ttl.svg"}, {"mermaid", "pause-past-ttl.mmd"}} {
		r := simulateCLI(t, "simulate", "--format", f.format)
		wantStatus(t, "fence simulate --format "+f.format, r, 0)
		if want := golden(t, "docs", f.file); r.stdout != want {
			t.Errorf("fence simulate --format %s differs from docs/%s (regenerate with go test ./sim -update)", f.format, f.file)
		}
	}
}

func TestSimulate_GlobalJSONOutputMeansFormatJSON(t *testing.T) {
	a := simulateCLI(t, "-o", "json", "simulate", "--fencing", "off")
	b := simulateCLI(t, "simulate", "--fencing", "off", "--format", "json")
	wantStatus(t, "-o json simulate", a, 0)
	wantStatus(t, "simulate --format json", b, 0)
	if a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "{") {
		t.Errorf("-o json and --format json: want the same JSON, got\n%.200s\nand\n%.200s", a.stdout, b.stdout)
	}
}

func TestSimulate_RandomSeedChangesTheRun(t *testing.T) {
	a := simulateCLI(t, "simulate", "--scenario", "random", "--fencing", "off", "--seed", "5")
	b := simulateCLI(t, "simulate", "--scenario", "random", "--fencing", "off", "--seed", "6")
	wantStatus(t, "simulate random seed 5", a, 0)
	wantStatus(t, "simulate random seed 6", b, 0)
	if a.stdout == b.stdout {
		t.Errorf("random with seeds 5 and 6: want different timelines, got the same")
	}
}

func TestSimulate_BadFlags_ExitTwoWithOneLine(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--scenario", "nope"}, `unknown scenario "nope"`},
		{[]string{"simulate", "--fencing", "maybe"}, "--fencing must be on or off"},
		{[]string{"simulate", "--format", "png"}, "--format must be one of"},
		{[]string{"-o", "json", "simulate", "--format", "svg"}, "conflicts with --format svg"},
		{[]string{"simulate", "--scenario", "random", "--workers", "30"}, "workers must be 1 to 26"},
		{[]string{"simulate", "extra"}, `unexpected argument "extra"`},
	}
	for _, c := range cases {
		r := simulateCLI(t, c.args...)
		wantStatus(t, strings.Join(c.args, " "), r, 2)
		if !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || r.stdout != "" {
			t.Errorf("%v: want one stderr line containing %q and no stdout, got stderr %q stdout %q", c.args, c.want, r.stderr, r.stdout)
		}
	}
}
