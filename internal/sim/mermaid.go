package sim

import (
	"fmt"
	"io"
	"strings"
)

// WriteMermaid writes r as one Mermaid sequence diagram (it renders on code hosts
// inside a ```mermaid block): the workers, the lock service and the resources as
// participants, requests and replies as arrows (a cross for a refusal), pauses,
// expiries and failovers as notes, and each run introduced by a note. It returns
// the first write error.
func WriteMermaid(w io.Writer, r *Report) error { return buffered(w, r, writeMermaid) }

func writeMermaid(w io.Writer, r *Report) {
	alias := make(map[string]string) // participant -> alias; lookup only
	var order []string
	add := func(name string) {
		if name == "" {
			return
		}
		if _, ok := alias[name]; !ok {
			alias[name] = fmt.Sprintf("p%d", len(order))
			order = append(order, name)
		}
	}
	for _, run := range r.Runs {
		for _, wk := range run.Workers {
			add(wk)
		}
	}
	var workers = len(order)
	add(lockService)
	for _, run := range r.Runs {
		for _, e := range run.Events {
			add(e.Peer)
		}
	}
	fmt.Fprintln(w, "sequenceDiagram")
	fmt.Fprintf(w, "    title %s\n", mermaidText(mermaidTitle(r)))
	for i, name := range order {
		label := name
		if i < workers {
			label = "worker " + name
		}
		fmt.Fprintf(w, "    participant %s as %s\n", alias[name], mermaidText(label))
	}
	first, last := alias[order[0]], alias[order[len(order)-1]]
	for _, run := range r.Runs {
		fmt.Fprintf(w, "    Note over %s,%s: %s\n", first, last, mermaidText(runHeading(run)+": "+run.Title))
		for _, e := range run.Events {
			writeMermaidEvent(w, e, alias)
		}
		for _, line := range run.Outcome {
			fmt.Fprintf(w, "    Note over %s,%s: %s\n", first, last, mermaidText(strings.TrimSpace(line)))
		}
	}
	if t := r.Table; t != nil {
		for _, row := range t.Rows {
			var cells []string
			for i, c := range row.Cells {
				cells = append(cells, t.Columns[i]+" "+c.String())
			}
			fmt.Fprintf(w, "    Note over %s,%s: %s\n", first, last, mermaidText("table: "+row.Case+": "+strings.Join(cells, " | ")))
		}
	}
}

func mermaidTitle(r *Report) string {
	if len(r.Runs) == 1 {
		return runHeading(r.Runs[0])
	}
	return fmt.Sprintf("%s (seed %d)", r.Scenario, r.Seed)
}

func writeMermaidEvent(w io.Writer, e Event, alias map[string]string) {
	at := stamp(e.At) + " "
	who, peer := alias[e.Worker], alias[e.Peer]
	switch {
	case e.Kind == KindExpire:
		fmt.Fprintf(w, "    Note over %s: %s\n", alias[lockService], mermaidText(at+e.Request))
	case e.Worker == "" && e.Peer == "":
		fmt.Fprintf(w, "    Note over %s: %s\n", alias[lockService], mermaidText(at+e.Request))
	case e.Worker == "":
		fmt.Fprintf(w, "    Note over %s: %s\n", peer, mermaidText(at+e.Request))
	case e.Peer == "":
		fmt.Fprintf(w, "    Note over %s: %s\n", who, mermaidText(at+e.Request))
	case e.Kind == KindSend:
		fmt.Fprintf(w, "    %s-)%s: %s\n", who, peer, mermaidText(at+e.Request))
	default:
		if e.Delayed {
			fmt.Fprintf(w, "    Note over %s: %s\n", peer, mermaidText(at+"delayed "+e.Request+" arrives"))
		} else if e.Request != "" {
			fmt.Fprintf(w, "    %s->>%s: %s\n", who, peer, mermaidText(at+e.Request))
		}
		if e.Reply != "" {
			arrow := "-->>"
			if !e.OK {
				arrow = "--x"
			}
			reply := e.Reply
			if e.Request == "" {
				reply = at + reply
			}
			fmt.Fprintf(w, "    %s%s%s: %s\n", peer, arrow, who, mermaidText(reply))
		}
	}
}

// mermaidText makes s safe as Mermaid message text: no statement separators,
// entity markers or arrows inside a message.
func mermaidText(s string) string {
	r := strings.NewReplacer(";", ",", "#", "no. ", "->", "to", "\n", " ", "%%", "%", "<", "(", ">", ")", "\"", "'")
	return r.Replace(s)
}
