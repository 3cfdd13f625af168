package chaos

import (
	"fmt"
	"io"
	"strings"
)

// faultCounts is "pause 3, kill 2": the faults injected by each of the nemeses, in
// their order; "none" for none.
func faultCounts(nemeses []string, faults map[string]int) string {
	var parts []string
	for _, n := range nemeses {
		if n != "" && n != "none" {
			parts = append(parts, fmt.Sprintf("%s %d", n, faults[n]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// FormatTable writes the final table of one or more runs, one row per run, and a
// legend of its columns.
func FormatTable(w io.Writer, runs []*Summary) {
	defer fmt.Fprint(w, tableLegend)
	fmt.Fprintf(w, "%-26s %-7s %7s %6s %-28s %8s %8s %6s %8s %7s %s\n",
		"backend", "fencing", "ops", "acq", "faults injected", "rejected", "accepted", "lost", "overlaps", "linear", "verdict")
	for _, s := range runs {
		r := s.Report
		fencing := "on"
		if !s.Fencing {
			fencing = "off"
		}
		fmt.Fprintf(w, "%-26s %-7s %7d %6d %-28s %8d %8d %6d %8d %7s %s\n",
			s.Backend, fencing, r.Operations, r.Acquisitions, faultCounts(strings.Split(s.Nemeses, ","), s.Faults),
			r.StaleRejected, r.StaleAccepted, r.Lost, r.Overlaps, r.Linearizable, verdict(s))
	}
}

// verdict is a run's verdict in a table: PASS, or FAIL and why.
func verdict(s *Summary) string {
	switch {
	case s.Fencing && !s.Passed():
		return "FAIL: violations with fencing on"
	case !s.Fencing && s.Passed():
		return "PASS: control run found violations"
	case !s.Fencing:
		return "FAIL: control run found no violation, the checker proved nothing"
	}
	return "PASS"
}

// tableLegend explains FormatTable's columns, overlaps above all: they are expected
// under pauses, and what fencing makes harmless.
const tableLegend = `columns:
  ops        operations the workers recorded (acquire, read, write, fence, release)
  acq        leases granted
  faults injected
             faults injected by each nemesis of the run: "pause 3, kill 2"
  rejected   stale writes and fences the resource refused: fencing at work
  accepted   stale writes or fences the resource accepted anyway: must be 0 with fencing on
  lost       acknowledged writes missing from the final value: must be 0 with fencing on
  overlaps   how often two workers believed they held the lock at once (pairs of
             leases), each by its own clock: a holder paused past its TTL woke up
             still "holding" it while the next holder had it. Expected under pauses, and harmless with fencing on:
             the resource rejected the stale holder's writes (see rejected). With
             fencing off they are where accepted stale writes and lost writes come from.
  linear     whether the history of the fenced key is linearizable (porcupine): Ok,
             Illegal, or Unknown when the check ran out of time
`
