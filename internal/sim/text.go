package sim

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// WriteText writes r as a timeline for the terminal: for each run a header, one
// line per event ("T31  B  acquire ..."), and the outcome; for payments, the table
// last. It returns the first write error.
func WriteText(w io.Writer, r *Report) error { return buffered(w, r, writeText) }

func writeText(w io.Writer, r *Report) {
	for i, run := range r.Runs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		writeRunText(w, run)
	}
	if r.Table != nil {
		if len(r.Runs) > 0 {
			fmt.Fprintln(w)
		}
		writeTableText(w, r.Table)
	}
}

// buffered renders r to w through a buffer, so that a rendering's many small
// writes reach w in few, and returns the first write error.
func buffered(w io.Writer, r *Report, render func(io.Writer, *Report)) error {
	bw := bufio.NewWriter(w)
	render(bw, r)
	return bw.Flush()
}

// runHeading names a run: "pause-past-ttl, fencing off" or "payments: pause,
// protections: none".
func runHeading(run *Run) string {
	if run.Case != "" {
		prot := "none (TTL lock only)"
		if len(run.Protections) > 0 {
			prot = strings.Join(run.Protections, ", ")
		}
		return fmt.Sprintf("%s: %s, protections: %s", run.Scenario, run.Case, prot)
	}
	return fmt.Sprintf("%s, fencing %s", run.Scenario, onOff(run.Fencing))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func writeRunText(w io.Writer, run *Run) {
	fmt.Fprintf(w, "=== %s ===\n", runHeading(run))
	fmt.Fprintf(w, "%s\n", run.Title)
	fmt.Fprintf(w, "(ttl %v, 1 tick = %v, seed %d)\n\n", run.TTL, Tick, run.Seed)
	stampW, nameW := 3, 1
	for _, e := range run.Events {
		stampW = max(stampW, len(stamp(e.At)))
		nameW = max(nameW, len(e.Worker))
	}
	for _, e := range run.Events {
		who := e.Worker
		if who == "" {
			who = "-"
		}
		fmt.Fprintf(w, "  %-*s  %-*s  %s\n", stampW, stamp(e.At), nameW, who, e.Text)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "outcome:")
	for _, line := range run.Outcome {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

func writeTableText(w io.Writer, t *Table) {
	fmt.Fprintln(w, "=== payments: which protection stops which case ===")
	fmt.Fprintln(w, "(each cell: ok, or the duplicate charges at the provider and payout rows in the ledger)")
	fmt.Fprintln(w)
	rows := [][]string{append([]string{"case"}, t.Columns...)}
	for _, r := range t.Rows {
		row := []string{r.Case}
		for _, c := range r.Cells {
			row = append(row, c.String())
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		b.WriteString(" ")
		for i, c := range row {
			b.WriteString(" ")
			if i == len(row)-1 {
				b.WriteString(c)
			} else {
				fmt.Fprintf(&b, "%-*s ", widths[i], c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}
