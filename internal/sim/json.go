package sim

import (
	"encoding/json"
	"io"
	"time"

	"github.com/fencelock/fence"
)

// The JSON shape of a report. Times are virtual milliseconds since the start and
// durations integer milliseconds, as everywhere in fence's JSON.

type jsonReport struct {
	Scenario string     `json:"scenario"`
	Seed     uint64     `json:"seed"`
	TickMS   int64      `json:"tick_ms"`
	Runs     []jsonRun  `json:"runs"`
	Table    *jsonTable `json:"table,omitempty"`
}

type jsonRun struct {
	Scenario    string          `json:"scenario"`
	Case        string          `json:"case,omitempty"`
	Title       string          `json:"title"`
	Fencing     bool            `json:"fencing"`
	Protections []string        `json:"protections,omitempty"`
	TTLms       int64           `json:"ttl_ms"`
	EndMS       int64           `json:"end_ms"`
	Workers     []string        `json:"workers"`
	Events      []jsonEvent     `json:"events"`
	Leases      []jsonSpan      `json:"leases"`
	Pauses      []jsonSpan      `json:"pauses"`
	InFlight    []jsonSpan      `json:"in_flight"`
	Writes      []jsonWrite     `json:"writes"`
	Violations  []jsonViolation `json:"violations"`
	Outcome     []string        `json:"outcome"`
}

type jsonEvent struct {
	AtMS     int64       `json:"at_ms"`
	T        string      `json:"t"`
	Worker   string      `json:"worker,omitempty"`
	Kind     Kind        `json:"kind"`
	Lock     string      `json:"lock,omitempty"`
	Resource string      `json:"resource,omitempty"`
	Token    fence.Token `json:"token,omitempty"`
	Lease    string      `json:"lease,omitempty"`
	Value    string      `json:"value,omitempty"`
	Error    string      `json:"error,omitempty"`
	Limit    int         `json:"limit,omitempty"` // a semaphore's permits
	Slot     *int        `json:"slot,omitempty"`  // a semaphore lease's slot (0 is a slot)
	Text     string      `json:"text"`
}

type jsonSpan struct {
	Worker  string      `json:"worker"`
	StartMS int64       `json:"start_ms"`
	EndMS   int64       `json:"end_ms"`
	Label   string      `json:"label"`
	Lease   string      `json:"lease,omitempty"`
	Token   fence.Token `json:"token,omitempty"`
	Limit   int         `json:"limit,omitempty"`
	Slot    *int        `json:"slot,omitempty"`
	Ended   string      `json:"ended,omitempty"`
}

type jsonWrite struct {
	AtMS     int64       `json:"at_ms"`
	Worker   string      `json:"worker"`
	Resource string      `json:"resource"`
	Token    fence.Token `json:"token"`
	Lease    string      `json:"lease"`
	Value    string      `json:"value"`
}

type jsonViolation struct {
	Text  string    `json:"text"`
	Write jsonWrite `json:"write"`
	Prev  jsonWrite `json:"prev"`
}

type jsonTable struct {
	Columns []string       `json:"columns"`
	Rows    []jsonTableRow `json:"rows"`
}

type jsonTableRow struct {
	Case  string     `json:"case"`
	Cells []jsonCell `json:"cells"`
}

type jsonCell struct {
	Protection string `json:"protection"`
	Charges    int    `json:"charges"`
	Payouts    int    `json:"payouts"`
	Duplicate  bool   `json:"duplicate"`
	Text       string `json:"text"`
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// WriteJSON writes r as one indented JSON object: the scenario, seed, tick, each
// run's events, lease and pause intervals (a semaphore's with its limit and slot), accepted writes, violations and
// outcome, and the payments table. It returns the first write error.
func WriteJSON(w io.Writer, r *Report) error {
	out := jsonReport{Scenario: r.Scenario, Seed: r.Seed, TickMS: ms(Tick), Runs: make([]jsonRun, 0, len(r.Runs))}
	for _, run := range r.Runs {
		jr := jsonRun{
			Scenario: run.Scenario, Case: run.Case, Title: run.Title, Fencing: run.Fencing, Protections: run.Protections,
			TTLms: ms(run.TTL), EndMS: ms(run.End), Workers: run.Workers, Outcome: run.Outcome,
			Events: make([]jsonEvent, 0, len(run.Events)), Leases: spansJSON(run.Leases), Pauses: spansJSON(run.Pauses),
			InFlight: spansJSON(run.InFlight), Writes: make([]jsonWrite, 0, len(run.Writes)),
			Violations: make([]jsonViolation, 0, len(run.Violations)),
		}
		for _, e := range run.Events {
			jr.Events = append(jr.Events, jsonEvent{AtMS: ms(e.At), T: stamp(e.At), Worker: e.Worker, Kind: e.Kind, Lock: e.Lock,
				Resource: e.Resource, Token: e.Token, Lease: e.Lease, Value: e.Value, Error: e.Err,
				Limit: e.Limit, Slot: slotJSON(e.Limit, e.Slot), Text: e.Text})
		}
		for _, wr := range run.Writes {
			jr.Writes = append(jr.Writes, writeJSON(wr))
		}
		for _, v := range run.Violations {
			jr.Violations = append(jr.Violations, jsonViolation{Text: v.String(), Write: writeJSON(v.Write), Prev: writeJSON(v.Prev)})
		}
		out.Runs = append(out.Runs, jr)
	}
	if t := r.Table; t != nil {
		jt := &jsonTable{Columns: t.Columns, Rows: make([]jsonTableRow, 0, len(t.Rows))}
		for _, row := range t.Rows {
			jrow := jsonTableRow{Case: row.Case}
			for i, c := range row.Cells {
				col := ""
				if i < len(t.Columns) {
					col = t.Columns[i]
				}
				jrow.Cells = append(jrow.Cells, jsonCell{Protection: col, Charges: c.Charges, Payouts: c.Payouts, Duplicate: c.Duplicate(), Text: c.String()})
			}
			jt.Rows = append(jt.Rows, jrow)
		}
		out.Table = jt
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeJSON(w Write) jsonWrite {
	return jsonWrite{AtMS: ms(w.At), Worker: w.Worker, Resource: w.Resource, Token: w.Token, Lease: w.Lease, Value: w.Value}
}

func spansJSON(spans []Span) []jsonSpan {
	out := make([]jsonSpan, 0, len(spans))
	for _, s := range spans {
		out = append(out, jsonSpan{Worker: s.Worker, StartMS: ms(s.Start), EndMS: ms(s.End), Label: s.Label, Lease: s.Lease, Token: s.Token,
			Limit: s.Limit, Slot: slotJSON(s.Limit, s.Slot), Ended: s.Reason})
	}
	return out
}

// slotJSON is the "slot" of a semaphore's event or lease (limit > 0), and none
// for a lock's, which has no slot.
func slotJSON(limit, slot int) *int {
	if limit == 0 {
		return nil
	}
	return &slot
}
