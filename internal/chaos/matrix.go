package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// ControlNemesis is the nemesis of every store's control cell in a matrix: pauses of
// the lock holder past its TTL act on the workers, which every store has, and with
// fencing off they make stale writes that the checker must find.
const ControlNemesis = NemesisPause

// MatrixConfig configures a chaos matrix: every store against every nemesis that
// applies to it (Applies), one fenced run (a cell) each, plus one control cell per
// store, run one after another.
type MatrixConfig struct {
	// Cell is the configuration of every cell: Binary, Workers, Duration (per cell),
	// TTL, Hold, Interval, MaxFaults, Results, Progress, Resource. Its Store and
	// Nemeses must be empty (the matrix sets them per cell) and its Fencing is set per
	// cell. Cell.Seed is the matrix's seed (0: from the clock); cell i runs with
	// Seed+i, shown in its row, so that one cell can be run again alone.
	Cell Config
	// Stores are the stores to run, a subset of Stores in the order given; empty means
	// all of Stores.
	Stores []string
	// Nemeses are the nemeses to run on each store they apply to, a subset of
	// Nemeses; empty means all of them.
	Nemeses []string
	// ControlHold is the workers' hold between read and write in the control cells;
	// default the larger of Cell.Hold and 100ms. A longer hold widens the window in
	// which a pause catches the holder between its read and its write; a hold near
	// the pause (3 TTLs) would let the paused holder wake up before its successor
	// wrote, and find nothing.
	ControlHold time.Duration
	// ControlDuration is how long the control cells' workers run; default
	// Cell.Duration. A short matrix gives its controls more time, so that they make
	// enough pauses to find violations every time (etcd's pauses last 3 s).
	ControlDuration time.Duration
}

// MatrixCell is one run of a matrix: a store under one nemesis, fenced, or the
// store's control run (fencing off, under ControlNemesis).
type MatrixCell struct {
	Store   string        // one of Stores
	Nemesis string        // one of Nemeses; ControlNemesis in a control cell
	Control bool          // fencing off: the cell must find violations
	Seed    uint64        // the run's Config.Seed
	Summary *Summary      // what the run found; nil if it could not run
	Err     error         // why the run could not be carried out; nil if it ran
	Elapsed time.Duration // how long the cell took, setup and check included
}

// Faults returns how many faults of the cell's nemesis its run injected.
func (c *MatrixCell) Faults() int {
	if c.Summary == nil {
		return 0
	}
	return c.Summary.Faults[c.Nemesis]
}

// Passed reports whether the cell met its goal: a fenced cell ran, injected at least
// one fault of its nemesis and showed no violation; a control cell ran and found
// violations.
func (c *MatrixCell) Passed() bool {
	if c.Err != nil || c.Summary == nil || !c.Summary.Passed() {
		return false
	}
	return c.Control || c.Faults() > 0
}

// Verdict returns the cell's verdict as the matrix table shows it: "PASS", "PASS:
// control run found violations", or "FAIL: " or "ERROR: " and why.
func (c *MatrixCell) Verdict() string {
	switch {
	case c.Err != nil:
		return "ERROR: " + c.Err.Error()
	case c.Summary == nil:
		return "ERROR: not run"
	case !c.Control && c.Summary.Passed() && c.Faults() == 0:
		return "FAIL: no " + c.Nemesis + " fault injected, the cell proved nothing (longer --duration or shorter --interval)"
	}
	return verdict(c.Summary)
}

// name is the cell's name in progress lines and its folder: "redis x link",
// "etcd control".
func (c *MatrixCell) name() string {
	if c.Control {
		return c.Store + " control (" + c.Nemesis + ", fencing off)"
	}
	return c.Store + " x " + c.Nemesis
}

// MatrixResult is the outcome of a matrix.
type MatrixResult struct {
	Cells []*MatrixCell // in the order they ran: per store its nemeses, then its control
	// Skipped says, a line per nemesis, what a matrix of all nemeses left out
	// because the binary cannot run it (clock without the fault clock), and how to
	// include it. A nemesis named in MatrixConfig.Nemeses is never skipped: its cells
	// fail to run instead.
	Skipped []string
	Dir     string        // the folder of the cells' run folders
	Elapsed time.Duration // the whole matrix
}

// Passed reports whether every cell passed (MatrixCell.Passed); false for a matrix
// without cells.
func (m *MatrixResult) Passed() bool {
	for _, c := range m.Cells {
		if !c.Passed() {
			return false
		}
	}
	return len(m.Cells) > 0
}

// Failed returns the cells that did not pass, in order.
func (m *MatrixResult) Failed() []*MatrixCell {
	var out []*MatrixCell
	for _, c := range m.Cells {
		if !c.Passed() {
			out = append(out, c)
		}
	}
	return out
}

// Matrix runs every cell of cfg one after another (Run for each) and returns them
// all. It returns an error matching fence.ErrInvalid, before it starts anything, if
// the configuration is bad (an unknown store or nemesis, a selection without a cell,
// a bad cell setting). A cell that could not run (a server binary missing: its error
// names what to install) does not stop the others: its error is in MatrixCell.Err,
// and Matrix returns them all joined, with the result. If ctx ends, Matrix returns
// the cells so far and ctx's error. Whether the cells passed is MatrixResult.Passed.
func Matrix(ctx context.Context, cfg MatrixConfig) (*MatrixResult, error) {
	cells, skipped, err := cfg.cells()
	if err != nil {
		return nil, err
	}
	base := cfg.Cell
	if base.Results == "" {
		d, err := os.MkdirTemp("", "fence-chaos-matrix-")
		if err != nil {
			return nil, fmt.Errorf("chaos: results: %w", err)
		}
		base.Results = d
	}
	res := &MatrixResult{Dir: base.Results, Skipped: skipped}
	began := time.Now()
	defer func() { res.Elapsed = time.Since(began) }()
	var errs cellErrors
	for i, c := range cells {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		run, _ := cfg.cellConfig(c) // checked by cells
		run.Results = filepath.Join(base.Results, fmt.Sprintf("%02d-%s-%s", i+1, c.Store, cellFolder(c)))
		cfg.progressf("matrix %d/%d start: %s, seed %d, %s", i+1, len(cells), c.name(), c.Seed, run.Duration)
		start := time.Now()
		c.Summary, c.Err = Run(ctx, run)
		c.Elapsed = time.Since(start)
		res.Cells = append(res.Cells, c)
		if c.Err != nil {
			c.Summary = nil // a half-made summary is no outcome
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			errs = append(errs, c)
		}
		cfg.progressf("matrix %d/%d end: %s in %.1fs: %s", i+1, len(cells), c.name(), c.Elapsed.Seconds(), cellOutcome(c))
	}
	if len(errs) > 0 {
		return res, errs
	}
	return res, nil
}

// cellErrors are the cells that could not run, as one error: it names them, then
// says each distinct reason once (a missing redis-server stops every redis cell).
// It unwraps to the cells' errors, for errors.Is.
type cellErrors []*MatrixCell

func (e cellErrors) Error() string {
	var names, reasons []string
	for _, c := range e {
		names = append(names, c.name())
		if r := c.Err.Error(); !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	return fmt.Sprintf("chaos: %d cell(s) could not run (%s): %s", len(e), strings.Join(names, ", "), strings.Join(reasons, "; "))
}

func (e cellErrors) Unwrap() []error {
	out := make([]error, len(e))
	for i, c := range e {
		out[i] = c.Err
	}
	return out
}

// cellFolder is the last part of a cell's folder name: its nemesis, or "control".
func cellFolder(c *MatrixCell) string {
	if c.Control {
		return "control"
	}
	return c.Nemesis
}

// cellOutcome is a cell's end in its progress line: the verdict, and for a cell that
// ran its key figures.
func cellOutcome(c *MatrixCell) string {
	if c.Summary == nil {
		return c.Verdict()
	}
	r := c.Summary.Report
	return fmt.Sprintf("%s (faults %d, stale accepted %d, lost %d, linearizable %s)", c.Verdict(), c.Faults(), r.StaleAccepted, r.Lost, r.Linearizable)
}

// progressf writes one progress line to cfg.Cell.Progress, if any.
func (cfg *MatrixConfig) progressf(format string, args ...any) {
	if cfg.Cell.Progress != nil {
		fmt.Fprintf(cfg.Cell.Progress, format+"\n", args...)
	}
}

// cellConfig returns the Config of cell c's run, its defaults filled, or an error
// matching fence.ErrInvalid.
func (cfg *MatrixConfig) cellConfig(c *MatrixCell) (Config, error) {
	run := cfg.Cell
	run.Store, run.Nemeses, run.Fencing, run.Seed = c.Store, []string{c.Nemesis}, !c.Control, c.Seed
	if err := run.defaults(); err != nil {
		return run, err
	}
	if c.Control {
		run.Hold = max(run.Hold, 100*time.Millisecond)
		if cfg.ControlHold > 0 {
			run.Hold = cfg.ControlHold
		}
		if cfg.ControlDuration > 0 {
			run.Duration = cfg.ControlDuration
		}
	}
	return run, nil
}

// cells returns the matrix's cells in the order they run, every Config among them
// checked, or an error matching fence.ErrInvalid. It fills the defaults of cfg
// (the seed, ControlHold).
func (cfg *MatrixConfig) cells() ([]*MatrixCell, []string, error) {
	if cfg.Cell.Store != "" || len(cfg.Cell.Nemeses) > 0 {
		return nil, nil, fmt.Errorf("chaos: %w: a matrix sets each cell's store and nemesis: use MatrixConfig.Stores and Nemeses", fence.ErrInvalid)
	}
	stores := cfg.Stores
	if len(stores) == 0 {
		stores = Stores
	}
	if err := checkNames("store", stores, Stores); err != nil {
		return nil, nil, err
	}
	if err := checkNames("nemesis", cfg.Nemeses, Nemeses); err != nil {
		return nil, nil, err
	}
	if cfg.Cell.Seed == 0 {
		cfg.Cell.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.ControlHold < 0 || cfg.ControlDuration < 0 {
		return nil, nil, fmt.Errorf("chaos: %w: the control cells' hold and duration must be positive", fence.ErrInvalid)
	}
	// A matrix of every nemesis leaves out what this binary cannot run, and says so;
	// one that names a nemesis runs it, and its cells fail if they cannot.
	var skipped []string
	var unavailable []string
	if len(cfg.Nemeses) == 0 {
		if err := checkFaultClock(cfg.Cell.Binary); err != nil {
			unavailable = append(unavailable, NemesisClock)
			skipped = append(skipped, fmt.Sprintf("%s: not run: this fence binary has no fault clock (go build -tags %s ./cmd/fence, then --nemesis %s or the whole matrix)", NemesisClock, FaultClockTag, NemesisClock))
		}
	}
	var cells []*MatrixCell
	for _, s := range stores {
		fenced := 0
		for _, n := range Nemeses {
			if Applies(s, n) && !slices.Contains(unavailable, n) && (len(cfg.Nemeses) == 0 || slices.Contains(cfg.Nemeses, n)) {
				cells = append(cells, &MatrixCell{Store: s, Nemesis: n})
				fenced++
			}
		}
		if fenced == 0 {
			continue // no fenced cell on s, so no control either: it would back nothing
		}
		if !Applies(s, ControlNemesis) {
			return nil, nil, fmt.Errorf("chaos: %w: the control nemesis %q does not apply to store %q", fence.ErrInvalid, ControlNemesis, s)
		}
		cells = append(cells, &MatrixCell{Store: s, Nemesis: ControlNemesis, Control: true})
	}
	if len(cells) == 0 {
		return nil, nil, fmt.Errorf("chaos: %w: none of the nemeses %s applies to the stores %s", fence.ErrInvalid, strings.Join(cfg.Nemeses, ","), strings.Join(stores, ","))
	}
	for i, c := range cells {
		c.Seed = cfg.Cell.Seed + uint64(i)
		if _, err := cfg.cellConfig(c); err != nil {
			return nil, nil, err
		}
	}
	return cells, skipped, nil
}

// checkNames returns an error matching fence.ErrInvalid if names has a name that is
// not in known, or one twice; what is "store" or "nemesis".
func checkNames(what string, names, known []string) error {
	for i, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("chaos: %w: unknown %s %q (have %s)", fence.ErrInvalid, what, n, strings.Join(known, ", "))
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("chaos: %w: %s %q given twice", fence.ErrInvalid, what, n)
		}
	}
	return nil
}

// FormatMatrix writes the table of a matrix, one row per cell in the order they ran
// (a store's nemeses, then its control row), a line with the overall verdict, and a
// legend of the columns.
func FormatMatrix(w io.Writer, m *MatrixResult) {
	const row = "%-9s %-9s %-7s %20s %7s %6s %6s %8s %8s %6s %7s %6s %s\n"
	fmt.Fprintf(w, row, "store", "nemesis", "fencing", "seed", "ops", "acq", "faults", "rejected", "accepted", "lost", "linear", "secs", "verdict")
	for _, c := range m.Cells {
		fencing := "on"
		if c.Control {
			fencing = "off"
		}
		secs := fmt.Sprintf("%.0f", c.Elapsed.Seconds())
		if c.Summary == nil {
			fmt.Fprintf(w, row, c.Store, c.Nemesis, fencing, strconv.FormatUint(c.Seed, 10), "-", "-", "-", "-", "-", "-", "-", secs, c.Verdict())
			continue
		}
		r := c.Summary.Report
		fmt.Fprintf(w, row, c.Store, c.Nemesis, fencing, strconv.FormatUint(c.Seed, 10), strconv.Itoa(r.Operations), strconv.Itoa(r.Acquisitions),
			strconv.Itoa(c.Faults()), strconv.Itoa(r.StaleRejected), strconv.Itoa(r.StaleAccepted), strconv.Itoa(r.Lost), string(r.Linearizable), secs, c.Verdict())
	}
	for _, line := range m.Skipped {
		fmt.Fprintln(w, line)
	}
	failed := len(m.Failed())
	switch {
	case len(m.Cells) == 0:
		fmt.Fprintln(w, "matrix: FAIL: no cell ran")
	case failed == 0:
		fmt.Fprintf(w, "matrix: PASS: %d cells in %.0fs, every fenced cell without violation, every control with violations\n", len(m.Cells), m.Elapsed.Seconds())
	default:
		fmt.Fprintf(w, "matrix: FAIL: %d of %d cells failed, in %.0fs\n", failed, len(m.Cells), m.Elapsed.Seconds())
	}
	fmt.Fprint(w, matrixLegend)
}

// matrixLegend explains FormatMatrix's columns.
const matrixLegend = `columns:
  store      what granted the locks (see fence chaos --help)
  nemesis    the fault of the cell; fencing off is the store's control run, which
             must find violations or the fenced cells above it prove nothing
  seed       the cell's seed: fence chaos --store S --nemesis N --seed X runs it again
             (a control cell: add --fencing off --hold 100ms)
  ops        operations the workers recorded (acquire, read, write, fence, release)
  acq        leases granted
  faults     faults the cell's nemesis injected: a fenced cell needs at least one
  rejected   stale writes and fences the resource refused: fencing at work
  accepted   stale writes or fences the resource accepted anyway: must be 0 with fencing on
  lost       acknowledged writes missing from the final value: must be 0 with fencing on
  linear     whether the history of the fenced key is linearizable (porcupine): Ok,
             Illegal, or Unknown when the check ran out of time
  secs       the cell's time, servers' start and the check included
`
