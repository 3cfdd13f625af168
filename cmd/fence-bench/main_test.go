package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/bench"
)

// The tests run the real command, built once in TestMain.
var benchBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fence-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	benchBin = filepath.Join(dir, "fence-bench")
	build := exec.Command("go", "build", "-o", benchBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building fence-bench:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is a finished run of the command.
type result struct {
	stdout, stderr string
	code           int
}

// runBenchCmd runs the command with args, env added to the test's environment, and
// returns its output and exit status.
func runBenchCmd(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, benchBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running fence-bench %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
}

func wantCode(t *testing.T, what string, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: want exit status %d, got %d\nstdout: %s\nstderr: %s", what, code, r.code, r.stdout, r.stderr)
	}
}

// oneLineStderr returns the one line of r's stderr, which must carry the
// "fence-bench: " prefix once.
func oneLineStderr(t *testing.T, what string, r result) string {
	t.Helper()
	line := strings.TrimSuffix(r.stderr, "\n")
	if line == "" || strings.Contains(line, "\n") || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("%s: want one line on stderr, got %q", what, r.stderr)
	}
	if strings.Count(line, "fence-bench: ") != 1 || strings.Contains(line, "fence: ") {
		t.Fatalf("%s: want the one prefix \"fence-bench: \", got %q", what, line)
	}
	return line
}

// tinyBench is the smallest run of every row: 1 round, short measurements, 2 clients.
var tinyBench = []string{"--rounds", "1", "--duration", "150ms", "--clients", "2"}

// benchCell matches a figure of the text table: "113 us", "8.30 ms", "43.2k".
var benchCell = regexp.MustCompile(`^(\d+(?:\.\d+)?) ?(us|ms|s|k|M)?$`)

// cellValue returns the figure of a table cell, which must be positive.
func cellValue(t *testing.T, cell string) float64 {
	t.Helper()
	m := benchCell.FindStringSubmatch(strings.TrimSpace(cell))
	if m == nil {
		t.Fatalf("cell %q is not a figure", cell)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil || v <= 0 {
		t.Fatalf("cell %q: want a positive figure", cell)
	}
	return v
}

func TestBench_TinyRun_TextTableOfEveryRow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and etcd")
	}
	r := runBenchCmd(t, nil, tinyBench...)
	wantCode(t, "fence-bench", r, exitOK)
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 2+len(bench.Rows) {
		t.Fatalf("stdout:\n%s\nwant a header, a rule and %d rows", r.stdout, len(bench.Rows))
	}
	if want := "| | pair median | handoff median | pairs/s at 2 clients |"; lines[0] != want {
		t.Errorf("header %q, want %q", lines[0], want)
	}
	for i, row := range bench.Rows {
		cells := strings.Split(strings.Trim(lines[2+i], "|"), "|")
		if len(cells) != 4 || strings.TrimSpace(cells[0]) != bench.Label(row) {
			t.Fatalf("line %q: want the row %q and three figures", lines[2+i], bench.Label(row))
		}
		for _, c := range cells[1:] {
			cellValue(t, c)
		}
	}
	// The progress: a line per measurement (stderr is not a terminal here).
	steps := 3 * len(bench.Rows)
	if got := strings.Count(r.stderr, "bench: round 1/1, "); got != steps {
		t.Errorf("stderr has %d progress lines, want %d:\n%s", got, steps, r.stderr)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("(%d/%d)", steps, steps)) {
		t.Errorf("stderr:\n%s\nwant the last step %d/%d", r.stderr, steps, steps)
	}
}

func TestBench_TinyRun_JSONOfEveryRow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and etcd")
	}
	r := runBenchCmd(t, nil, append([]string{"-o", "json"}, tinyBench...)...)
	wantCode(t, "fence-bench -o json", r, exitOK)
	var got struct {
		Clients    int   `json:"clients"`
		DurationMS int64 `json:"duration_ms"`
		Rounds     int   `json:"rounds"`
		CPUs       int   `json:"cpus"`
		Rows       []struct {
			Row             string    `json:"row"`
			Label           string    `json:"label"`
			PairMedianUS    float64   `json:"pair_median_us"`
			HandoffMedianUS float64   `json:"handoff_median_us"`
			PairsPerSec     float64   `json:"pairs_per_sec"`
			PairUS          []float64 `json:"pair_us"`
			HandoffUS       []float64 `json:"handoff_us"`
			PairsPerSecs    []float64 `json:"pairs_per_sec_rounds"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	if got.Clients != 2 || got.DurationMS != 150 || got.Rounds != 1 || got.CPUs < 1 || len(got.Rows) != len(bench.Rows) {
		t.Fatalf("report %+v; want 2 clients, 150 ms, 1 round, the CPUs and %d rows", got, len(bench.Rows))
	}
	for i, row := range got.Rows {
		if row.Row != bench.Rows[i] || row.Label != bench.Label(bench.Rows[i]) {
			t.Errorf("row %d is %q (%q), want %q", i, row.Row, row.Label, bench.Rows[i])
		}
		if row.PairMedianUS <= 0 || row.HandoffMedianUS <= 0 || row.PairsPerSec <= 0 {
			t.Errorf("row %s: %+v; want positive medians", row.Row, row)
		}
		if len(row.PairUS) != 1 || len(row.HandoffUS) != 1 || len(row.PairsPerSecs) != 1 {
			t.Errorf("row %s: %+v; want one figure of each per round", row.Row, row)
		}
	}
	if strings.Contains(r.stderr, "fence:") {
		t.Errorf("stderr has an error: %s", r.stderr)
	}
}

// --rows picks rows, in the table's order; the bolt row needs no outside server.
func TestBench_Rows(t *testing.T) {
	r := runBenchCmd(t, nil, "-o", "json", "--rows", "fence-bolt", "--rounds", "2", "--duration", "50ms", "--clients", "3")
	wantCode(t, "fence-bench --rows fence-bolt", r, exitOK)
	var got bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	if len(got.Rows) != 1 || got.Rows[0].Row != bench.RowFenceBolt || len(got.Rows[0].PairUS) != 2 || got.Clients != 3 {
		t.Fatalf("report %+v; want the bolt row only, two rounds, 3 clients", got)
	}
}

// Without redis-server, the Redis rows fail with one line saying what to install.
func TestBench_NoRedisServer_SaysWhatToInstall(t *testing.T) {
	r := runBenchCmd(t, []string{"PATH=" + t.TempDir()}, "--rows", "fence-redis", "--rounds", "1", "--duration", "50ms")
	wantCode(t, "fence-bench without redis-server", r, exitError)
	if line := oneLineStderr(t, "fence-bench without redis-server", r); !strings.Contains(line, "redis-server not found: apt-get install redis-server") {
		t.Fatalf("stderr %q; want it to name apt-get install redis-server", line)
	}
}

func TestBench_UsageErrors_Exit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error line
	}{
		{[]string{"--clients", "0"}, "--clients must be at least 1"},
		{[]string{"--rounds", "0"}, "--rounds must be at least 1"},
		{[]string{"--duration", "0s"}, "--duration must be positive"},
		{[]string{"--duration", "soon"}, "duration"},
		{[]string{"--rows", "fence-mysql"}, `unknown row "fence-mysql"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-o", "yaml"}, "-o must be text or json"},
	} {
		what := fmt.Sprintf("fence-bench %q", tc.args)
		r := runBenchCmd(t, nil, tc.args...)
		wantCode(t, what, r, exitUsage)
		if line := oneLineStderr(t, what, r); !strings.Contains(line, tc.want) {
			t.Errorf("%s: want an error saying %s, got %q", what, tc.want, line)
		}
		if r.stdout != "" {
			t.Errorf("fence-bench %q: stdout %q, want nothing", tc.args, r.stdout)
		}
	}
}

// SIGINT stops a run: exit 130, one line, no table.
func TestBench_Interrupted_Exit130(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, benchBin, "--rows", "fence-bolt", "--rounds", "100", "--duration", "1s")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "bench: round 1/100, ") {
		t.Fatalf("first stderr line %q (%v), want the progress", sc.Text(), sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "bench: round ") {
			rest = append(rest, sc.Text())
		}
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit status %d, want 130", code)
	}
	if len(rest) != 1 || !strings.Contains(rest[0], "fence-bench: interrupted (SIGINT)") {
		t.Errorf("stderr besides the progress %q, want one line saying it was interrupted", rest)
	}
	if out.Len() != 0 {
		t.Errorf("stdout %q, want no table", out.String())
	}
}

// The cluster rows (etcd members: the command re-executed; fence serve and the
// cluster's nodes: the fence binary it builds when --fence is not given) measure
// the four figures, the handoff after an expiry no shorter than its TTL.
func TestBench_ClusterRows_BuildFence_JSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd, fence serve and a three-node cluster")
	}
	rows := bench.ClusterRows
	r := runBenchCmd(t, nil, "-o", "json", "--rows", "cluster-rows", "--rounds", "1", "--duration", "100ms", "--clients", "2")
	wantCode(t, "fence-bench --rows cluster-rows", r, exitOK)
	var got bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	if len(got.Rows) != len(rows) {
		t.Fatalf("report %+v; want the rows %v", got, rows)
	}
	for i, row := range got.Rows {
		if row.Row != rows[i] || row.PairMedianUS <= 0 || row.HandoffMedianUS <= 0 || row.PairsPerSec <= 0 || len(row.ExpiryUS) != 1 {
			t.Errorf("row %d: %+v; want %s with positive figures and one handoff after expiry", i, row, rows[i])
		}
		if ttl := float64(bench.ExpiryTTL / time.Microsecond); row.ExpiryMedianUS < ttl {
			t.Errorf("row %s: handoff after expiry %.0f us; want at least the TTL, %.0f us", row.Row, row.ExpiryMedianUS, ttl)
		}
	}
}

// A fence binary that is not there is a usage error naming it, before any server
// starts.
func TestBench_MissingFenceBinary_Exit2(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "fence-missing")
	r := runBenchCmd(t, nil, "--rows", bench.RowFenceServeEtcd3, "--fence", missing, "--rounds", "1", "--duration", "50ms")
	wantCode(t, "fence-bench --fence "+missing, r, exitUsage)
	if line := oneLineStderr(t, "fence-bench --fence "+missing, r); !strings.Contains(line, missing) {
		t.Errorf("stderr %q; want it to name %s", line, missing)
	}
}
