package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is a run's results in the shape of `fence bench -o json`.
type Report struct {
	Clients    int         `json:"clients"`
	DurationMS int64       `json:"duration_ms"` // of each measurement
	Rounds     int         `json:"rounds"`
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
}

// NewReport returns the Report of results, measured with clients, duration and
// rounds.
func NewReport(results []Result, clients int, duration time.Duration, rounds int) Report {
	r := Report{Clients: clients, DurationMS: duration.Milliseconds(), Rounds: rounds, Rows: []ReportRow{}}
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
		r.Rows = append(r.Rows, row)
	}
	return r
}

// us returns d in (fractional) microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// FormatTable writes results as a Markdown table (a column of medians over
// rounds for each figure), then a line saying how they were measured. It returns
// the writer's error.
func FormatTable(w io.Writer, results []Result, clients int, duration time.Duration, rounds int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| | pair median | handoff median | pairs/s at %d clients |\n", clients)
	b.WriteString("|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", Label(r.Row), FormatDuration(r.PairMedian()),
			FormatDuration(r.HandoffMedian()), FormatRate(r.PairsPerSecMedian()))
	}
	fmt.Fprintf(&b, "\nmedians over %d round(s) of %v per measurement, rows interleaved in a shuffled order;\n", rounds, duration)
	fmt.Fprintf(&b, "pair: acquire+release on one client; handoff: release called until the waiter holds the lock;\n")
	fmt.Fprintf(&b, "pairs/s: %d clients on distinct names\n", clients)
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
