package chaos

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fence"
)

// cellNames returns the cells as "store/nemesis" ("store/control" for a control).
func cellNames(cells []*MatrixCell) []string {
	var out []string
	for _, c := range cells {
		if c.Control {
			out = append(out, c.Store+"/control")
		} else {
			out = append(out, c.Store+"/"+c.Nemesis)
		}
	}
	return out
}

// The cells come from Stores and storeNemeses alone: per store, every nemesis that
// applies to it in the order of Nemeses, then its control; so a store or nemesis
// added to those tables joins the matrix with no change to it.
func TestMatrix_Cells_EveryStoreEveryApplyingNemesisAndAControl(t *testing.T) {
	// "fence" is no binary with the fault clock: the clock cells are left out, and
	// the matrix says so.
	cfg := MatrixConfig{Cell: Config{Binary: "fence", Seed: 40}}
	cells, skipped, err := cfg.cells()
	if err != nil {
		t.Fatalf("cells: %v", err)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "-tags faultclock") {
		t.Errorf("skipped = %q, want one line saying how to build the fault clock in", skipped)
	}
	var want []string
	for _, s := range Stores {
		for _, n := range Nemeses {
			if Applies(s, n) && n != NemesisClock {
				want = append(want, s+"/"+n)
			}
		}
		want = append(want, s+"/control")
	}
	if got := cellNames(cells); !slices.Equal(got, want) {
		t.Errorf("cells = %v, want %v", got, want)
	}
	// Today's rows, spelled out, so that an empty table cannot pass the loop above.
	for _, c := range []string{"bolt/pause", "bolt/kill", "bolt/link", "bolt/disk", "bolt/control", "redis/failover", "redis/control", "etcd/member", "etcd/control",
		"cluster/pause", "cluster/kill", "cluster/link", "cluster/partition", "cluster/control"} {
		if !slices.Contains(cellNames(cells), c) {
			t.Errorf("cells = %v, want %s among them", cellNames(cells), c)
		}
	}
	if slices.Contains(cellNames(cells), "bolt/failover") {
		t.Errorf("cells = %v: failover does not apply to bolt", cellNames(cells))
	}
	for i, c := range cells {
		run, err := cfg.cellConfig(c)
		if err != nil {
			t.Fatalf("cellConfig(%s): %v", cellNames(cells)[i], err)
		}
		if c.Seed != 40+uint64(i) || run.Seed != c.Seed {
			t.Errorf("cell %d seed %d, run seed %d; want %d", i, c.Seed, run.Seed, 40+i)
		}
		if run.Store != c.Store || !slices.Equal(run.Nemeses, []string{c.Nemesis}) || run.Fencing == c.Control {
			t.Errorf("cell %s: run store %q, nemeses %v, fencing %v", cellNames(cells)[i], run.Store, run.Nemeses, run.Fencing)
		}
		if c.Control && (c.Nemesis != ControlNemesis || run.Hold != 100*time.Millisecond || run.Duration != 30*time.Second) {
			t.Errorf("control %s: nemesis %q, hold %v, duration %v; want %q, 100ms, 30s", c.Store, c.Nemesis, run.Hold, run.Duration, ControlNemesis)
		}
		if !c.Control && run.Hold != 20*time.Millisecond {
			t.Errorf("cell %s: hold %v, want the default 20ms", cellNames(cells)[i], run.Hold)
		}
	}
}

// --stores and --nemesis pick among the cells; a store no picked nemesis applies to
// gets no control either.
func TestMatrix_Cells_Selection(t *testing.T) {
	for _, tc := range []struct {
		stores, nemeses string
		want            []string
	}{
		{"redis", "failover,pause", []string{"redis/pause", "redis/failover", "redis/control"}},
		{"", "member", []string{"etcd/member", "etcd/control"}},
		{"etcd,bolt", "kill", []string{"etcd/kill", "etcd/control", "bolt/kill", "bolt/control"}},
	} {
		cfg := MatrixConfig{Cell: Config{Binary: "fence"}}
		if tc.stores != "" {
			cfg.Stores = strings.Split(tc.stores, ",")
		}
		cfg.Nemeses = strings.Split(tc.nemeses, ",")
		cells, _, err := cfg.cells()
		if err != nil || !slices.Equal(cellNames(cells), tc.want) {
			t.Errorf("stores %q nemeses %q: cells %v, err %v; want %v", tc.stores, tc.nemeses, cellNames(cells), err, tc.want)
		}
	}
}

// A bad matrix is refused before anything starts.
func TestMatrix_BadConfig_Invalid(t *testing.T) {
	for name, cfg := range map[string]MatrixConfig{
		"no binary":         {},
		"unknown store":     {Cell: Config{Binary: "fence"}, Stores: []string{"mongo"}},
		"store twice":       {Cell: Config{Binary: "fence"}, Stores: []string{"bolt", "bolt"}},
		"unknown nemesis":   {Cell: Config{Binary: "fence"}, Nemeses: []string{"flood"}},
		"applies to none":   {Cell: Config{Binary: "fence"}, Stores: []string{StoreBolt}, Nemeses: []string{NemesisFailover}},
		"cell store set":    {Cell: Config{Binary: "fence", Store: StoreBolt}},
		"cell nemeses set":  {Cell: Config{Binary: "fence", Nemeses: []string{NemesisPause}}},
		"one worker":        {Cell: Config{Binary: "fence", Workers: 1}},
		"negative interval": {Cell: Config{Binary: "fence", Interval: -time.Second}},
		"negative hold":     {Cell: Config{Binary: "fence"}, ControlHold: -time.Second},
		"negative control":  {Cell: Config{Binary: "fence"}, ControlDuration: -time.Second},
	} {
		res, err := Matrix(context.Background(), cfg)
		if !errors.Is(err, fence.ErrInvalid) || res != nil {
			t.Errorf("%s: Matrix = %v, %v; want nil, fence.ErrInvalid", name, res, err)
		}
	}
}

// The table has a row per cell with its verdict, and says which failed: a cell that
// could not run, a fenced cell without a fault of its nemesis, a control without a
// violation.
func TestFormatMatrix_RowsAndVerdicts(t *testing.T) {
	ok := &Report{Operations: 100, Acquisitions: 20, Writes: 20, Linearizable: porcupine.Ok}
	found := &Report{Operations: 50, Acquisitions: 10, StaleAccepted: 2, Lost: 1, Linearizable: porcupine.Illegal, Violations: []string{"stale write accepted"}}
	m := &MatrixResult{Cells: []*MatrixCell{
		{Store: StoreBolt, Nemesis: NemesisKill, Seed: 7, Summary: &Summary{Fencing: true, Faults: map[string]int{NemesisKill: 3}, Report: ok}},
		{Store: StoreBolt, Nemesis: NemesisLink, Seed: 8, Summary: &Summary{Fencing: true, Faults: map[string]int{}, Report: ok}},
		{Store: StoreBolt, Nemesis: NemesisPause, Control: true, Seed: 9, Summary: &Summary{Faults: map[string]int{NemesisPause: 2}, Report: found}},
		{Store: StoreRedis, Nemesis: NemesisPause, Seed: 10, Err: errors.New("chaos: redis primary: servers: redis-server not found: apt-get install redis-server")},
		{Store: StoreEtcd, Nemesis: NemesisPause, Control: true, Seed: 11, Summary: &Summary{Faults: map[string]int{NemesisPause: 1}, Report: ok}},
	}}
	var b bytes.Buffer
	FormatMatrix(&b, m)
	out := b.String()
	for _, want := range []string{
		"store ", "nemesis", "accepted",
		"bolt      kill      on                         7     100     20      3        0        0      0      Ok      0 PASS\n",
		"FAIL: no link fault injected",
		"bolt      pause     off                        9      50     10      2        0        2      1 Illegal      0 PASS: control run found violations\n",
		"redis     pause     on                        10       -", "ERROR: chaos: redis primary: servers: redis-server not found: apt-get install redis-server",
		"etcd      pause     off", "FAIL: control run found no violation",
		"matrix: FAIL: 3 of 5 cells failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if m.Passed() || len(m.Failed()) != 3 {
		t.Errorf("Passed() = %v, %d failed; want false, 3", m.Passed(), len(m.Failed()))
	}
	m.Cells = []*MatrixCell{m.Cells[0], m.Cells[2]}
	if !m.Passed() || (&MatrixResult{}).Passed() {
		t.Errorf("Passed() of two passing cells / of none = %v / %v, want true / false", m.Passed(), (&MatrixResult{}).Passed())
	}
}

// The CI matrix: every store available today against every nemesis that applies to
// it, short cells. Every fenced cell injects at least one fault of its nemesis and
// leaves no stale write accepted, no acknowledged write lost, no rejected value read
// and a linearizable history, with the workers making progress; every store's
// control (fencing off, pauses) finds violations and saves the failing history.
//
// Its controls stand in for the two single control runs it made redundant (the same
// assertions: violations found, stale accepted or lost, failing history saved): the
// etcd control (pauses and member kills, fencing off) and the redis control (pauses
// and failovers, fencing off); in both, the pauses made the violations. The disk
// cell is also checked for refusals that reached fence serve, as the disk-full run
// is; that run stays, for its stronger bounds (two faults, ten writes).
func TestMatrix_AllStores_FencedCellsPassControlsFindViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("the matrix starts real processes and servers; skipped under -short")
	}
	var progress bytes.Buffer
	began := time.Now()
	res, err := Matrix(context.Background(), MatrixConfig{Cell: Config{Binary: fenceBin, Workers: 4, Duration: 5 * time.Second,
		Interval: 1200 * time.Millisecond, MaxFaults: 3, Seed: 1, Results: t.TempDir(), Progress: &progress}, ControlDuration: 10 * time.Second})
	if res == nil {
		t.Fatalf("Matrix: %v", err)
	}
	t.Logf("matrix of %d cells in %v", len(res.Cells), time.Since(began).Round(time.Second))
	var table bytes.Buffer
	FormatMatrix(&table, res)
	t.Logf("\n%s", table.String())
	if err != nil {
		t.Fatalf("Matrix: %v", err)
	}
	want, skipped, _ := (&MatrixConfig{Cell: Config{Binary: fenceBin}}).cells()
	if len(skipped) > 0 {
		t.Errorf("skipped = %q with the tagged test binary, want none", skipped)
	}
	if got := cellNames(res.Cells); !slices.Equal(got, cellNames(want)) {
		t.Fatalf("cells run = %v, want %v", got, cellNames(want))
	}
	for _, c := range res.Cells {
		name := c.Store + "/" + c.Nemesis
		r := c.Summary.Report
		if c.Control {
			if !r.Found() || r.StaleAccepted+r.Lost == 0 {
				t.Errorf("%s control: Found() = %v, stale accepted %d, lost %d; want violations", c.Store, r.Found(), r.StaleAccepted, r.Lost)
			}
			if len(c.Summary.Saved) == 0 {
				t.Errorf("%s control: no failing history saved", c.Store)
			}
			for _, p := range c.Summary.Saved {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s control: saved file: %v", c.Store, err)
				}
			}
		} else {
			if r.StaleAccepted != 0 || r.Lost != 0 || r.RejectedSeen != 0 || r.Linearizable != porcupine.Ok {
				t.Errorf("%s: stale accepted, lost, rejected seen, linearizable = %d, %d, %d, %v; want 0, 0, 0, Ok; violations %q; history in %v",
					name, r.StaleAccepted, r.Lost, r.RejectedSeen, r.Linearizable, r.Violations, c.Summary.Saved)
			}
			if c.Faults() < 1 {
				t.Errorf("%s: faults injected = %v, want at least one %s", name, c.Summary.Faults, c.Nemesis)
			}
			// At least a few: a loaded machine slows the etcd cells most (33 ops, 6
			// acquisitions were measured for etcd x kill at a load of 20 on 2 cores).
			if r.Writes < 3 {
				t.Errorf("%s: accepted writes = %d, want at least 3 (workers made no progress?)", name, r.Writes)
			}
			if c.Nemesis == NemesisDisk {
				if n := diskFullRefusals(t, c.Summary.Dir); n < 1 {
					t.Errorf("%s: operations refused with \"disk full\" = %d, want at least 1 (the fault never reached fence serve?)", name, n)
				}
			}
		}
		if !c.Passed() {
			t.Errorf("%s: Passed() = false: %s", name, c.Verdict())
		}
		if !strings.Contains(progress.String(), "start: "+c.name()) || !strings.Contains(progress.String(), "end: "+c.name()) {
			t.Errorf("%s: no start and end progress lines", name)
		}
	}
	if !res.Passed() {
		t.Errorf("Passed() = false; failed: %v", cellNames(res.Failed()))
	}
}

// The cells that could not run are one error that names them and says each reason
// once, and unwraps to the cells' errors.
func TestMatrix_CellErrors_OneLineEachReasonOnce(t *testing.T) {
	missing := errors.New("servers: redis-server not found: apt-get install redis-server")
	err := error(cellErrors{
		{Store: StoreRedis, Nemesis: NemesisKill, Err: missing},
		{Store: StoreRedis, Nemesis: NemesisPause, Control: true, Err: missing},
	})
	msg := err.Error()
	if strings.Count(msg, "apt-get install redis-server") != 1 || !strings.Contains(msg, "2 cell(s) could not run (redis x kill, redis control") || strings.Contains(msg, "\n") {
		t.Errorf("error = %q, want one line naming both cells and the package once", msg)
	}
	if !errors.Is(err, missing) {
		t.Errorf("errors.Is(%v, the cells' error) = false, want true", err)
	}
}
