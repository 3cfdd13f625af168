package bench

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Setup is how a run was measured, and on what, for its report.
type Setup struct {
	Clients  int
	Shared   bool          // Config.Shared: the pairs/s clients are one client
	Duration time.Duration // of each measurement
	Rounds   int
	CPUs     int     // runtime.NumCPU
	LoadFrom float64 // the machine's 1-minute load average at the start (LoadAverage), 0 if unknown
	LoadTo   float64 // and at the end
}

// Report is a run's results in the shape of `fence-bench -o json`.
type Report struct {
	Clients    int         `json:"clients"`
	Shared     bool        `json:"shared_client"` // the pairs/s clients were one client
	DurationMS int64       `json:"duration_ms"`   // of each measurement
	Rounds     int         `json:"rounds"`
	CPUs       int         `json:"cpus"`
	LoadFrom   float64     `json:"load_average_start"` // 0 if unknown
	LoadTo     float64     `json:"load_average_end"`
	Rows       []ReportRow `json:"rows"`
}

// ReportRow is one row of a Report: the medians over rounds, then each round's
// figure.
type ReportRow struct {
	Row             string    `json:"row"`
	Label           string    `json:"label"`
	PairMedianUS    float64   `json:"pair_median_us"`
	HandoffMedianUS float64   `json:"handoff_median_us"`
	PairsPerSec     float64   `json:"pairs_per_sec"`
	PairUS          []float64 `json:"pair_us"`
	HandoffUS       []float64 `json:"handoff_us"`
	PairsPerSecs    []float64 `json:"pairs_per_sec_rounds"`
	// The handoff after an expiry of a holder with ExpiryTTL, on the rows that
	// measure it (ClusterRows); absent on the others.
	ExpiryMedianUS float64   `json:"expiry_handoff_median_us,omitempty"`
	ExpiryUS       []float64 `json:"expiry_handoff_us,omitempty"`
}

// NewReport returns the Report of results, measured as setup says.
func NewReport(results []Result, setup Setup) Report {
	r := Report{Clients: setup.Clients, Shared: setup.Shared, DurationMS: setup.Duration.Milliseconds(), Rounds: setup.Rounds,
		CPUs: setup.CPUs, LoadFrom: setup.LoadFrom, LoadTo: setup.LoadTo, Rows: []ReportRow{}}
	for _, res := range results {
		row := ReportRow{
			Row: res.Row, Label: Label(res.Row),
			PairMedianUS: us(res.PairMedian()), HandoffMedianUS: us(res.HandoffMedian()), PairsPerSec: res.PairsPerSecMedian(),
			PairUS: []float64{}, HandoffUS: []float64{}, PairsPerSecs: append([]float64{}, res.PairsPerSec...),
		}
		for _, d := range res.Pair {
			row.PairUS = append(row.PairUS, us(d))
		}
		for _, d := range res.Handoff {
			row.HandoffUS = append(row.HandoffUS, us(d))
		}
		if len(res.Expiry) > 0 {
			row.ExpiryMedianUS = us(res.ExpiryMedian())
			for _, d := range res.Expiry {
				row.ExpiryUS = append(row.ExpiryUS, us(d))
			}
		}
		r.Rows = append(r.Rows, row)
	}
	return r
}

// LoadAverage returns the machine's 1-minute load average (/proc/loadavg), or 0
// where it cannot be read: figures measured on a loaded machine are read with it.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return v
}

// us returns d in (fractional) microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// FormatTable writes results as a Markdown table (a column of medians over
// rounds for each figure; the handoff after an expiry only if a row measured it,
// "-" on the others), then lines saying how and on what they were measured.
// It returns the writer's error.
func FormatTable(w io.Writer, results []Result, setup Setup) error {
	clients, duration, rounds := setup.Clients, setup.Duration, setup.Rounds
	expiry := false
	for _, r := range results {
		expiry = expiry || len(r.Expiry) > 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| | pair median | handoff median | pairs/s at %d clients |", clients)
	if expiry {
		fmt.Fprintf(&b, " handoff after expiry (TTL %v) |", ExpiryTTL)
	}
	b.WriteString("\n|---|---|---|---|")
	if expiry {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |", Label(r.Row), FormatDuration(r.PairMedian()),
			FormatDuration(r.HandoffMedian()), FormatRate(r.PairsPerSecMedian()))
		if expiry {
			e := "-"
			if len(r.Expiry) > 0 {
				e = FormatDuration(r.ExpiryMedian())
			}
			fmt.Fprintf(&b, " %s |", e)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\nmedians over %d round(s) of %v per measurement, rows interleaved in a shuffled order;\n", rounds, duration)
	fmt.Fprintf(&b, "pair: acquire+release on one client; handoff: release called until the waiter holds the lock;\n")
	if expiry {
		fmt.Fprintf(&b, "handoff after expiry: a holder with TTL %v stops without releasing; its acquire call until the waiter holds the lock;\n", ExpiryTTL)
	}
	fmt.Fprintf(&b, "pairs/s: %d clients on distinct names", clients)
	if setup.Shared {
		b.WriteString(", goroutines sharing one client (--shared-client)")
	} else {
		b.WriteString(", each with its own connections")
	}
	if setup.CPUs > 0 {
		fmt.Fprintf(&b, "; %d CPUs", setup.CPUs)
	}
	if setup.LoadFrom > 0 || setup.LoadTo > 0 {
		fmt.Fprintf(&b, ", load average %.1f at the start, %.1f at the end", setup.LoadFrom, setup.LoadTo)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatDuration returns d with three significant digits in us below a
// millisecond, in ms from there, in s from a second: "113 us", "0.95 us", "8.30 ms".
func FormatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return sig3(us(d)) + " us"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + " ms"
	default:
		return sig3(d.Seconds()) + " s"
	}
}

// FormatRate returns a rate per second with three significant digits, in k or M
// from a thousand: "850", "43.2k", "1.21M".
func FormatRate(perSec float64) string {
	switch {
	case perSec < 1e3:
		return sig3(perSec)
	case perSec < 1e6:
		return sig3(perSec/1e3) + "k"
	default:
		return sig3(perSec/1e6) + "M"
	}
}

// sig3 formats v, below 1000 rounded to nearest, with three significant digits
// and never an exponent.
func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
