//go:build unix

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/servers/servertest"
)

// dsn is the database all tests share (every run uses its own batch id, so runs
// never see each other's rows). Empty under -short.
var dsn string

func TestMain(m *testing.M) {
	// The coordinator re-executes its own binary as the instances: in a test, that
	// is this test binary, which then runs one instance instead of the tests.
	if os.Getenv(envInstance) != "" {
		os.Exit(runInstanceFromEnv())
	}
	os.Exit(servertest.RunWithPostgres(m, "payments", &dsn))
}

// testConfig is a small batch with a short TTL, so a run takes about two seconds.
func testConfig(t *testing.T) config {
	t.Helper()
	servertest.SkipIfShort(t)
	cfg := config{DSN: dsn, Instances: 2, Batch: 8, PauseLine: 3, TTL: time.Second, Pause: time.Second}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	return cfg
}

// runMode runs one protection mode and fails the test if the run fails or left a
// line unpaid (no protection may lose a payout).
func runMode(t *testing.T, cfg config, mode string) result {
	t.Helper()
	p, err := parseMode(mode)
	if err != nil {
		t.Fatal(err)
	}
	r, err := run(cfg, p)
	if err != nil {
		t.Fatalf("run %s: %v", mode, err)
	}
	t.Logf("%s: %+v", mode, r)
	if r.Unpaid != 0 {
		t.Errorf("%s: unpaid lines = %d, want 0", mode, r.Unpaid)
	}
	if !r.Overtaken || r.Paused < cfg.Pause {
		t.Errorf("%s: instance 1 paused for %v, lock taken over meanwhile = %v; want a pause of at least %v during which another instance took the lock", mode, r.Paused, r.Overtaken, cfg.Pause)
	}
	return r
}

func TestRun_ProtectAll_NoDuplicatePayouts(t *testing.T) {
	cfg := testConfig(t)
	r := runMode(t, cfg, "all")
	if r.Duplicates != 0 || r.Charges != cfg.Batch {
		t.Errorf("charges = %d with %d duplicates, want %d with 0", r.Charges, r.Duplicates, cfg.Batch)
	}
	if r.LedgerRows != cfg.Batch || r.PaidRows != cfg.Batch {
		t.Errorf("ledger rows = %d (%d paid), want %d all paid", r.LedgerRows, r.PaidRows, cfg.Batch)
	}
	// Instance 1 wakes with its charge of the pause line answered and tries to
	// record it: the guard refuses, and the instance stops.
	if r.Stale != 1 {
		t.Errorf("stale writes refused = %d, want 1 (paused instance's record)", r.Stale)
	}
	// Instance 2 paid the pause line again with the same key: the provider replayed.
	if r.Replayed != 1 {
		t.Errorf("replayed charges = %d, want 1 (the line in flight during the pause)", r.Replayed)
	}
}

func TestRun_ProtectNone_DuplicatePayouts(t *testing.T) {
	cfg := testConfig(t)
	r := runMode(t, cfg, "none")
	// Instance 2 pays all lines; instance 1 resumes and pays the pause line (in
	// flight) and every line after it from its stale snapshot of the batch.
	want := cfg.Batch - cfg.PauseLine + 1
	if r.Duplicates != want {
		t.Errorf("duplicates = %d, want %d (lines %d..%d paid twice)", r.Duplicates, want, cfg.PauseLine, cfg.Batch)
	}
	if r.Charges != cfg.Batch+want {
		t.Errorf("charges = %d, want %d", r.Charges, cfg.Batch+want)
	}
	if r.Stale != 0 {
		t.Errorf("stale writes refused = %d, want 0 without a guard", r.Stale)
	}
}

// Each protection alone, to show what it covers and what it leaves.
func TestRun_SingleProtections(t *testing.T) {
	cfg := testConfig(t)
	t.Run("fencing_leaves_the_in_flight_charge", func(t *testing.T) {
		r := runMode(t, cfg, "fencing")
		// The guard stops instance 1 at its next ledger write, but the charge that
		// was in flight when it paused cannot be fenced: instance 2 charges it again.
		if r.Duplicates != 1 || r.Stale != 1 {
			t.Errorf("duplicates = %d, stale = %d; want 1 and 1", r.Duplicates, r.Stale)
		}
	})
	t.Run("idempotency_keeps_the_provider_clean_not_the_ledger", func(t *testing.T) {
		r := runMode(t, cfg, "idempotency")
		if r.Duplicates != 0 {
			t.Errorf("duplicates = %d, want 0", r.Duplicates)
		}
		wantRows := cfg.Batch + cfg.Batch - cfg.PauseLine + 1
		if r.LedgerRows != wantRows {
			t.Errorf("ledger rows = %d, want %d (instance 1 re-inserts the lines from the pause on)", r.LedgerRows, wantRows)
		}
	})
	t.Run("unique_leaves_the_in_flight_charge", func(t *testing.T) {
		r := runMode(t, cfg, "unique")
		// Instance 2 takes the unpaid claim of the pause line over and charges it;
		// instance 1 finds every later line paid.
		if r.Duplicates != 1 || r.LedgerRows != cfg.Batch {
			t.Errorf("duplicates = %d, ledger rows = %d; want 1 and %d", r.Duplicates, r.LedgerRows, cfg.Batch)
		}
	})
}

func TestRunMain_PrintsTable(t *testing.T) {
	cfg := testConfig(t)
	var out, errOut bytes.Buffer
	code := runMain([]string{"--postgres", cfg.DSN, "--batch", "6", "--ttl", "1s", "--pause", "1500ms", "--protect", "all,none"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, errOut.String())
	}
	t.Logf("output:\n%s", out.String())
	var rows []string
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 7 && (f[0] == "all" || f[0] == "none") {
			rows = append(rows, f[0]+" dup="+f[2])
		}
	}
	// batch 6, pause line 3: none pays lines 3..6 twice.
	want := []string{"all dup=0", "none dup=4"}
	if strings.Join(rows, ",") != strings.Join(want, ",") {
		t.Errorf("table rows = %q, want %q; output:\n%s", rows, want, out.String())
	}
}

func TestRunMain_BadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--postgres", "postgres://x@127.0.0.1/db", "--protect", "fencing,bogus"}, `unknown protection mode "bogus"`},
		{[]string{"--postgres", "postgres://x@127.0.0.1/db", "--instances", "1"}, "--instances 1: want 2 to 32"},
		{[]string{"--postgres", "postgres://x@127.0.0.1/db", "--batch", "5", "--pause-line", "6"}, "--pause-line 6"},
		{[]string{"--postgres", "postgres://x@127.0.0.1/db", "--ttl", "10ms"}, "--ttl 10ms"},
		{[]string{"--postgres", "postgres://x@127.0.0.1/db", "--ttl", "2s", "--pause", "1s"}, "--pause 1s"},
		{[]string{"--postgres", ""}, "no database"},
		{[]string{"--postgres", "postgres://x@127.0.0.1/db", "extra"}, "unexpected arguments"},
	} {
		var out, errOut bytes.Buffer
		code := runMain(tc.args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("runMain(%q) = %d, stderr %q; want 2 and an error containing %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

func TestParseModes_Every(t *testing.T) {
	ps, err := parseModes("every")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Name)
	}
	if strings.Join(got, ",") != strings.Join(modeOrder, ",") {
		t.Errorf("modes = %v, want %v", got, modeOrder)
	}
}
