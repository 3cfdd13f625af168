package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// SVG layout, in pixels.
const (
	svgMinWidth   = 1200
	svgMinLeft    = 175 // the lanes start at least this far right
	svgTextLeft   = 20  // lane names and headings start here
	svgFrame      = 10  // a panel's frame runs from here to the width less this
	svgPad        = 8   // text keeps this far inside a panel's frame
	svgGutterGap  = 20  // from the longest lane name to the lanes; a mark reaches 10 left of its time
	svgRight      = 40
	svgMinPerTick = 6.0
	svgLabelPx    = 11 // font size of labels in the lanes
	svgLanePx     = 13 // font size of lane names
	svgRowH       = 14
	svgBarH       = 14
	svgFont       = "font-family:Helvetica,Arial,sans-serif"
)

// textWidth returns an upper bound of the width, in pixels, of s set at size px in
// svgFont, regular or bold. A viewer picks the font: Helvetica on macOS, Arial on
// Windows, Liberation Sans or, often, DejaVu Sans (the widest) on Linux. So each
// character counts as its widest advance among these, bold, rounded up by class;
// layout that fits this fits whichever of them the viewer has.
func textWidth(s string, size float64) float64 {
	em := 0.0
	for _, r := range s {
		em += charEm(r)
	}
	return em * size
}

// charEm returns an upper bound of the advance of r in em (see textWidth).
func charEm(r rune) float64 {
	switch {
	case r == ' ':
		return 0.36
	case strings.ContainsRune("!'.,:;|/\\ijlI", r):
		return 0.46
	case strings.ContainsRune("frt()[]-\"`*", r):
		return 0.53
	case strings.ContainsRune("mwMW%@", r):
		return 1.11
	case strings.ContainsRune("&<>=+#~^{}", r):
		return 0.88
	case r >= 'A' && r <= 'Z':
		return 0.86
	case r < 0x80:
		return 0.72
	default: // not measured: as wide as the widest
		return 1.11
	}
}

// Colours, chosen to differ in lightness too, so they read in grey; every mark
// also has a distinct shape and a text label.
const (
	colLease    = "#6baed6" // lease bar: mid blue
	colLeaseEdg = "#08519c"
	colAccept   = "#1a9850" // accepted write: green filled circle
	colReject   = "#d73027" // rejected write: red cross
	colStale    = "#b35806" // stale write accepted without fencing: orange ring
	colSystem   = "#7b3294" // failover, clock jump: purple dashed line
	colText     = "#222222"
	colMuted    = "#666666"
)

type svgLabel struct {
	x, w    float64 // text start and estimated width
	markerX float64
	row     int
	text    string
	colour  string
	bold    bool
}

type svgMark struct {
	kind   string // "accept", "reject", "stale", "small", "hollow", "diamond", "square", "send"
	x      float64
	colour string
}

type svgLane struct {
	name   string
	lastX  float64 // x of the last mark, to keep marks at one instant apart
	labels []*svgLabel
	marks  []svgMark
	rows   int
	top    float64 // set at layout
	barTop float64
}

func (l *svgLane) height() float64 { return float64(l.rows)*svgRowH + 12 + svgBarH + 14 }

// place puts a label into the lowest row where it overlaps no other label. A label
// that would end right of right moves left, but not left of left.
func (l *svgLane) place(lb *svgLabel, left, right float64) {
	if lb.x+lb.w > right {
		lb.x = math.Max(right-lb.w, left)
	}
	for row := 0; ; row++ {
		free := true
		for _, o := range l.labels {
			if o.row == row && lb.x < o.x+o.w+8 && o.x < lb.x+lb.w+8 {
				free = false
				break
			}
		}
		if free {
			lb.row = row
			break
		}
	}
	l.labels = append(l.labels, lb)
	l.rows = max(l.rows, lb.row+1)
}

type svgPanel struct {
	run    *Run
	left   float64 // x of T0: the lane names' gutter is left of it
	ppt    float64 // pixels per tick
	ticks  float64
	width  float64
	lanes  []*svgLane
	system *svgLane // lane of events without a worker; nil if none
	top    float64
	height float64
	vlines []svgVLine
}

type svgVLine struct {
	x     float64
	label string
}

func (p *svgPanel) x(d float64) float64 { return p.left + d*p.ppt }

// WriteSVG writes r as a self-contained SVG timeline: for each run a panel with a
// lane per worker, lease intervals as bars, pauses hatched and labelled, writes as
// markers with text labels ("write accepted token 2", "REJECTED write: stale token
// 1, highest seen 2"), failovers and clock jumps as dashed lines across the lanes,
// and the outcome; for payments, the table; a legend last. Colours also differ in
// lightness and every mark has its own shape and label, so it reads in grey. It
// returns the first write error.
func WriteSVG(w io.Writer, r *Report) error { return buffered(w, r, writeSVG) }

func writeSVG(w io.Writer, r *Report) {
	var panels []*svgPanel
	// The picture is as wide as its widest text needs, measured by textWidth, an
	// upper bound: nothing is cut at the right edge, whichever font the viewer has.
	title := "fence simulate: " + mermaidTitle(r)
	width := math.Max(svgMinWidth, svgTextLeft+textWidth(title, 18)+svgTextLeft)
	left := lanesLeft(r.Runs)
	for _, run := range r.Runs {
		p := layoutPanel(run, left)
		width = math.Max(width, p.width)
		panels = append(panels, p)
	}
	var colX []float64
	if r.Table != nil {
		var tableRight float64
		colX, tableRight = tableColumns(r.Table)
		width = math.Max(width, tableRight+svgTextLeft)
	}
	width = math.Max(width, legendWidth()+svgTextLeft)
	y := 50.0
	for _, p := range panels {
		p.top = y
		y += p.height + 30
	}
	tableTop := y
	if r.Table != nil {
		y += float64(len(r.Table.Rows)+3)*18 + 20
	}
	legendTop := y
	y += 60

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img">`+"\n", width, y, width, y)
	fmt.Fprintf(w, "<title>%s</title>\n", xmlText(mermaidTitle(r)))
	fmt.Fprintln(w, `<defs>`)
	fmt.Fprintln(w, `<pattern id="hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="8" stroke="#444444" stroke-width="2.5"/></pattern>`)
	fmt.Fprintln(w, `<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#444444"/></marker>`)
	fmt.Fprintln(w, `</defs>`)
	fmt.Fprintf(w, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", width, y)
	fmt.Fprintf(w, `<text x="20" y="30" style="%s;font-size:18px;font-weight:bold" fill="%s">%s</text>`+"\n", svgFont, colText, xmlText(title))
	for _, p := range panels {
		writePanel(w, p, width)
	}
	if r.Table != nil {
		writeSVGTable(w, r.Table, colX, tableTop)
	}
	writeLegend(w, legendTop)
	fmt.Fprintln(w, `</svg>`)
}

// laneNames returns the names of run's lanes: one per worker, then the lane of
// events without a worker, if any, named after the peers they concern.
func laneNames(run *Run) (workers []string, system string, hasSystem bool) {
	for _, wk := range run.Workers {
		workers = append(workers, "worker "+wk)
	}
	var sysPeers []string
	for _, e := range run.Events {
		if e.Worker == "" && !contains(sysPeers, e.Peer) && e.Peer != "" {
			sysPeers = append(sysPeers, e.Peer)
		}
		hasSystem = hasSystem || e.Worker == ""
	}
	system = strings.Join(sysPeers, " / ")
	if system == "" {
		system = "network"
	}
	return workers, system, hasSystem
}

// lanesLeft returns the x of T0 for every panel of runs, so that the panels line
// up and no mark enters the gutter of the longest lane name.
func lanesLeft(runs []*Run) float64 {
	left := float64(svgMinLeft)
	for _, run := range runs {
		workers, system, hasSystem := laneNames(run)
		if hasSystem {
			workers = append(workers, system)
		}
		for _, name := range workers {
			left = math.Max(left, svgTextLeft+textWidth(name, svgLanePx)+svgGutterGap)
		}
	}
	return math.Ceil(left)
}

func layoutPanel(run *Run, left float64) *svgPanel {
	ticks := math.Max(float64(run.End/Tick), 1)
	ppt := math.Max((svgMinWidth-left-svgRight)/ticks, svgMinPerTick)
	p := &svgPanel{run: run, left: left, ppt: ppt, ticks: ticks}
	p.width = left + ticks*ppt + svgRight
	// Labels near the right edge move left, to end inside the frame; one wider than
	// the lanes starts at T0 and widens the panel (below).
	right := p.width - svgFrame - svgPad
	lane := make(map[string]*svgLane) // lookup only; p.lanes keeps the order
	workers, system, hasSystem := laneNames(run)
	for i, wk := range run.Workers {
		l := &svgLane{name: workers[i]}
		lane[wk] = l
		p.lanes = append(p.lanes, l)
	}
	if hasSystem {
		p.system = &svgLane{name: system}
		p.lanes = append(p.lanes, p.system)
	}
	at := func(d float64) float64 { return p.x(d) }
	label := func(l *svgLane, x float64, text, colour string, bold bool) {
		l.place(&svgLabel{x: x - 3, w: textWidth(text, svgLabelPx), markerX: x, text: text, colour: colour, bold: bold}, left-3, right)
	}
	// Lease and pause labels first: they sit at the start of their bars.
	for _, sp := range run.Leases {
		l := lane[sp.Worker]
		label(l, at(ticksOf(sp.Start)), sp.Label, colLeaseEdg, false)
	}
	for _, sp := range run.Pauses {
		l := lane[sp.Worker]
		label(l, at(ticksOf(sp.Start)), sp.Label, colText, false)
	}
	stale := make(map[int]bool) // index of accepted write that violates; lookup only
	for _, v := range run.Violations {
		for i, wr := range run.Writes {
			if wr == v.Write {
				stale[i] = true
			}
		}
	}
	writeIdx := 0
	for _, e := range run.Events {
		x := at(ticksOf(e.At))
		if l := laneFor(p, lane, e); l != nil && e.Kind != KindExpire && e.Kind != KindPause && e.Kind != KindResume &&
			e.Kind != KindAcquire && e.Kind != KindRelease && e.Kind != KindNote {
			if len(l.marks) > 0 && x < l.lastX+14 {
				x = l.lastX + 14 // several marks at one instant: side by side, in order
			}
			l.lastX = x
		}
		if e.Worker == "" {
			l := p.system
			l.marks = append(l.marks, svgMark{kind: "square", x: x, colour: colSystem})
			label(l, x, e.Request, colText, strings.Contains(e.Request, "DUPLICATE"))
			if e.Kind == KindFailover || e.Kind == KindClockJump {
				p.vlines = append(p.vlines, svgVLine{x: x, label: e.Request})
			}
			continue
		}
		l := lane[e.Worker]
		switch e.Kind {
		case KindWrite:
			if stale[writeIdx] {
				l.marks = append(l.marks, svgMark{kind: "stale", x: x, colour: colStale})
				label(l, x, fmt.Sprintf("STALE %s ACCEPTED token %d (no fencing)", e.Op, e.Token), colStale, true)
			} else {
				l.marks = append(l.marks, svgMark{kind: "accept", x: x, colour: colAccept})
				label(l, x, fmt.Sprintf("%s accepted token %d", e.Op, e.Token), colAccept, false)
			}
			writeIdx++
		case KindReject:
			l.marks = append(l.marks, svgMark{kind: "reject", x: x, colour: colReject})
			why := strings.TrimPrefix(e.Reply, "REJECTED ")
			text := "REJECTED " + why
			if e.Op != "write" {
				text = fmt.Sprintf("REJECTED %s token %d: %s", e.Op, e.Token, why)
			}
			label(l, x, text, colReject, true)
		case KindSend:
			l.marks = append(l.marks, svgMark{kind: "send", x: x, colour: colText})
			label(l, x, fmt.Sprintf("%s token %d sent, delayed in the network", e.Op, e.Token), colText, false)
		case KindAcquireFailed:
			l.marks = append(l.marks, svgMark{kind: "hollow", x: x, colour: colMuted})
		case KindRenew:
			l.marks = append(l.marks, svgMark{kind: "small", x: x, colour: colLeaseEdg})
			label(l, x, "renew", colMuted, false)
		case KindRenewFailed:
			l.marks = append(l.marks, svgMark{kind: "hollow", x: x, colour: colReject})
			label(l, x, "renew failed: lease gone", colMuted, false)
		case KindCheck:
			l.marks = append(l.marks, svgMark{kind: "diamond", x: x, colour: colText})
			label(l, x, "check: "+e.Request+" "+e.Reply, colText, false)
		case KindRead:
			l.marks = append(l.marks, svgMark{kind: "small", x: x, colour: colText})
			label(l, x, "read: "+e.Reply, colMuted, false)
		case KindCall:
			l.marks = append(l.marks, svgMark{kind: "square", x: x, colour: colText})
			text := e.Request
			if e.Reply != "" {
				text = "provider answers " + e.Reply
			}
			label(l, x, text, colText, false)
		case KindHeal:
			l.marks = append(l.marks, svgMark{kind: "diamond", x: x, colour: colLeaseEdg})
			label(l, x, e.Request+": "+e.Reply, colLeaseEdg, false)
		case KindNote:
			label(l, x, e.Text, colText, false)
		}
	}
	// Lease ends after the markers: "expired" must not push a write label away.
	for _, sp := range run.Leases {
		if sp.Reason == "" || sp.Reason == "still held" {
			continue
		}
		label(lane[sp.Worker], at(ticksOf(sp.End)), sp.Lease+" "+sp.Reason, colMuted, false)
	}
	// The panel is as wide as its marks, labels, heading and outcome need.
	need := svgTextLeft + math.Max(textWidth(runHeading(run), 15), textWidth(panelSubtitle(run), 12))
	need = math.Max(need, p.x(p.ticks)+textWidth(fmt.Sprintf("T%.0f", p.ticks), 10)/2)
	for _, line := range run.Outcome {
		need = math.Max(need, svgOutcomeLeft+textWidth(line, 12))
	}
	for _, l := range p.lanes {
		for _, m := range l.marks {
			need = math.Max(need, m.x+10) // a mark reaches 10 right of its x
		}
		for _, lb := range l.labels {
			need = math.Max(need, lb.x+lb.w)
		}
	}
	p.width = math.Max(p.width, math.Ceil(need+svgPad+svgFrame))
	p.height = 44 // heading and title
	for _, l := range p.lanes {
		l.top = p.height
		l.barTop = l.top + float64(l.rows)*svgRowH + 12
		p.height += l.height()
	}
	p.height += 26                                // axis
	p.height += float64(len(run.Outcome))*15 + 10 // outcome
	return p
}

// laneFor returns the lane an event's mark goes to.
func laneFor(p *svgPanel, lanes map[string]*svgLane, e Event) *svgLane {
	if e.Worker == "" {
		return p.system
	}
	return lanes[e.Worker]
}

func ticksOf(d interface{ Seconds() float64 }) float64 { return d.Seconds() / Tick.Seconds() }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writePanel(w io.Writer, p *svgPanel, width float64) {
	top := p.top
	run := p.run
	fmt.Fprintf(w, `<g id="%s">`+"\n", xmlText(svgID(run)))
	fmt.Fprintf(w, `<rect x="10" y="%.1f" width="%.0f" height="%.1f" fill="none" stroke="#bbbbbb"/>`+"\n", top-6, width-20, p.height+6)
	head := runHeading(run)
	fmt.Fprintf(w, `<text x="20" y="%.1f" style="%s;font-size:15px;font-weight:bold" fill="%s">%s</text>`+"\n", top+14, svgFont, colText, xmlText(head))
	fmt.Fprintf(w, `<text x="20" y="%.1f" style="%s;font-size:12px" fill="%s">%s</text>`+"\n", top+32, svgFont, colMuted, xmlText(panelSubtitle(run)))
	lanesTop := top + p.lanes[0].top
	lanesBottom := top + p.lanes[len(p.lanes)-1].top + p.lanes[len(p.lanes)-1].height()
	// Time grid.
	step := gridStep(p.ppt)
	for t := 0.0; t <= p.ticks; t += step {
		x := p.x(t)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x, lanesTop, x, lanesBottom)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" style="%s;font-size:10px" fill="%s">T%.0f</text>`+"\n", x, lanesBottom+14, svgFont, colMuted, t)
	}
	// Lanes.
	for i, l := range p.lanes {
		ly := top + l.top
		if i > 0 {
			fmt.Fprintf(w, `<line x1="20" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#cccccc" stroke-dasharray="2,3"/>`+"\n", ly, width-20, ly)
		}
		by := top + l.barTop
		fmt.Fprintf(w, `<text class="lane" x="20" y="%.1f" style="%s;font-size:13px;font-weight:bold" fill="%s">%s</text>`+"\n", by+11, svgFont, colText, xmlText(l.name))
		fmt.Fprintf(w, `<line x1="%.0f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999999"/>`+"\n", p.left, by+svgBarH/2, p.x(p.ticks), by+svgBarH/2)
	}
	laneOf := func(worker string) *svgLane {
		for i, wk := range run.Workers {
			if wk == worker {
				return p.lanes[i]
			}
		}
		return nil
	}
	for _, sp := range run.Leases {
		l := laneOf(sp.Worker)
		x1, x2 := p.x(ticksOf(sp.Start)), p.x(ticksOf(sp.End))
		fmt.Fprintf(w, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" stroke="%s"><title>%s</title></rect>`+"\n",
			x1, top+l.barTop, math.Max(x2-x1, 1), svgBarH, colLease, colLeaseEdg, xmlText(sp.Label+", "+sp.Reason))
	}
	for _, sp := range run.Pauses {
		l := laneOf(sp.Worker)
		x1, x2 := p.x(ticksOf(sp.Start)), p.x(ticksOf(sp.End))
		fmt.Fprintf(w, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="url(#hatch)" stroke="#333333"><title>%s</title></rect>`+"\n",
			x1, top+l.barTop-3, math.Max(x2-x1, 1), svgBarH+6, xmlText(sp.Label))
	}
	for _, sp := range run.InFlight {
		l := laneOf(sp.Worker)
		x1, x2 := p.x(ticksOf(sp.Start)), p.x(ticksOf(sp.End))
		y := top + l.barTop + svgBarH + 5
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444444" stroke-width="1.5" stroke-dasharray="5,3" marker-end="url(#arrow)"><title>%s</title></line>`+"\n",
			x1, y, x2, y, xmlText(sp.Label))
	}
	for _, v := range p.vlines {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6,4"><title>%s</title></line>`+"\n",
			v.x, lanesTop, v.x, lanesBottom, colSystem, xmlText(v.label))
	}
	for _, l := range p.lanes {
		cy := top + l.barTop + svgBarH/2
		for _, m := range l.marks {
			writeMark(w, m, cy)
		}
		for _, lb := range l.labels {
			ly := top + l.barTop - 6 - float64(lb.row)*svgRowH
			if lb.row > 0 {
				fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#aaaaaa" stroke-width="0.8"/>`+"\n", lb.markerX, ly+3, lb.markerX, top+l.barTop-2)
			}
			weight := ""
			if lb.bold {
				weight = ";font-weight:bold"
			}
			fmt.Fprintf(w, `<text class="label" x="%.1f" y="%.1f" style="%s;font-size:11px%s" fill="%s">%s</text>`+"\n", lb.x, ly, svgFont, weight, lb.colour, xmlText(lb.text))
		}
	}
	y := lanesBottom + 34
	for _, line := range run.Outcome {
		style := svgFont + ";font-size:12px"
		colour := colText
		if strings.HasPrefix(line, "LOST") || strings.HasPrefix(line, "INVARIANT") || strings.HasPrefix(line, "DUPLICATE") {
			style += ";font-weight:bold"
			colour = colReject
		}
		fmt.Fprintf(w, `<text x="%d" y="%.1f" style="%s" fill="%s">%s</text>`+"\n", svgOutcomeLeft, y, style, colour, xmlText(line))
		y += 15
	}
	fmt.Fprintln(w, `</g>`)
}

// svgOutcomeLeft is the x of a panel's outcome lines.
const svgOutcomeLeft = 30

// panelSubtitle is the line under a panel's heading.
func panelSubtitle(run *Run) string {
	return fmt.Sprintf("%s (ttl %v, 1 tick = %v)", run.Title, run.TTL, Tick)
}

// writeMark draws m as one group of class "mark", so the marks of a picture can be
// told from its lanes, bars and labels.
func writeMark(w io.Writer, m svgMark, cy float64) {
	x := m.x
	fmt.Fprintln(w, `<g class="mark">`)
	defer fmt.Fprintln(w, `</g>`)
	switch m.kind {
	case "accept":
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="7" fill="%s" stroke="#ffffff" stroke-width="1.5"/>`+"\n", x, cy, m.colour)
		fmt.Fprintf(w, `<path d="M%.1f,%.1f l3,3 l5,-6" fill="none" stroke="#ffffff" stroke-width="2"/>`+"\n", x-4, cy)
	case "stale":
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="8" fill="#ffffff" stroke="%s" stroke-width="3"/>`+"\n", x, cy, m.colour)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" style="%s;font-size:11px;font-weight:bold" fill="%s">!</text>`+"\n", x, cy+4, svgFont, m.colour)
	case "reject":
		fmt.Fprintf(w, `<path d="M%.1f,%.1f l12,12 m0,-12 l-12,12" stroke="%s" stroke-width="3.5"/>`+"\n", x-6, cy-6, m.colour)
	case "hollow":
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="4" fill="#ffffff" stroke="%s" stroke-width="1.5"/>`+"\n", x, cy, m.colour)
	case "small":
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x, cy-7, x, cy+7, m.colour)
	case "diamond":
		fmt.Fprintf(w, `<path d="M%.1f,%.1f l6,6 l-6,6 l-6,-6 z" fill="#ffffff" stroke="%s" stroke-width="2"/>`+"\n", x, cy-6, m.colour)
	case "square":
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/>`+"\n", x-5, cy-5, m.colour)
	case "send":
		fmt.Fprintf(w, `<path d="M%.1f,%.1f l10,6 l-10,6 z" fill="%s"/>`+"\n", x-2, cy-6, m.colour)
	}
}

const svgTableTitle = "payments: which protection stops which case"

// tableColumns returns the x of each column of t (the case, then one per
// protection set), spaced by the widest text in each, and the right end of the
// table.
func tableColumns(t *Table) (colX []float64, right float64) {
	widths := make([]float64, len(t.Columns)+1)
	widths[0] = textWidth("case", 12)
	for i, c := range t.Columns {
		widths[i+1] = textWidth(c, 12)
	}
	for _, row := range t.Rows {
		widths[0] = math.Max(widths[0], textWidth(row.Case, 12))
		for i, c := range row.Cells {
			if i+1 < len(widths) {
				widths[i+1] = math.Max(widths[i+1], textWidth(c.String(), 12))
			}
		}
	}
	x := 30.0
	for _, w := range widths {
		colX = append(colX, math.Ceil(x))
		right = x + w
		x += w + 24
	}
	return colX, math.Max(right, svgTextLeft+textWidth(svgTableTitle, 15))
}

func writeSVGTable(w io.Writer, t *Table, colX []float64, top float64) {
	fmt.Fprintf(w, `<text x="20" y="%.1f" style="%s;font-size:15px;font-weight:bold" fill="%s">%s</text>`+"\n", top+14, svgFont, colText, xmlText(svgTableTitle))
	y := top + 40
	head := append([]string{"case"}, t.Columns...)
	for i, h := range head {
		fmt.Fprintf(w, `<text x="%.0f" y="%.1f" style="%s;font-size:12px;font-weight:bold" fill="%s">%s</text>`+"\n", colX[i], y, svgFont, colText, xmlText(h))
	}
	for _, row := range t.Rows {
		y += 18
		fmt.Fprintf(w, `<text x="%.0f" y="%.1f" style="%s;font-size:12px" fill="%s">%s</text>`+"\n", colX[0], y, svgFont, colText, xmlText(row.Case))
		for i, c := range row.Cells {
			if i+1 >= len(colX) {
				break
			}
			colour, weight := colAccept, ""
			if c.Duplicate() {
				colour, weight = colReject, ";font-weight:bold"
			}
			fmt.Fprintf(w, `<text x="%.0f" y="%.1f" style="%s;font-size:12px%s" fill="%s">%s</text>`+"\n", colX[i+1], y, svgFont, weight, colour, xmlText(c.String()))
		}
	}
}

// legendItem is a sample of a mark and what it means.
type legendItem struct {
	text string
	draw func(w io.Writer, x, cy float64)
}

// legendRows are the legend's items, row by row.
var legendRows = [][]legendItem{
	{
		{"lease held at the lock service", func(w io.Writer, x, cy float64) {
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="12" height="10" fill="%s" stroke="%s"/>`+"\n", x, cy-5, colLease, colLeaseEdg)
		}},
		{"worker paused", func(w io.Writer, x, cy float64) {
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="url(#hatch)" stroke="#333333"/>`+"\n", x, cy-6)
		}},
		{"write accepted", func(w io.Writer, x, cy float64) {
			writeMark(w, svgMark{kind: "accept", x: x + 6, colour: colAccept}, cy)
		}},
		{"write REJECTED by the guard", func(w io.Writer, x, cy float64) {
			writeMark(w, svgMark{kind: "reject", x: x + 6, colour: colReject}, cy)
		}},
		{"stale write accepted (no fencing)", func(w io.Writer, x, cy float64) {
			writeMark(w, svgMark{kind: "stale", x: x + 6, colour: colStale}, cy)
		}},
	},
	{
		{"write delayed in the network", func(w io.Writer, x, cy float64) {
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444444" stroke-width="1.5" stroke-dasharray="5,3" marker-end="url(#arrow)"/>`+"\n", x, cy, x+12, cy)
		}},
		{"acquire refused (held)", func(w io.Writer, x, cy float64) {
			writeMark(w, svgMark{kind: "hollow", x: x + 6, colour: colMuted}, cy)
		}},
		{"failover or clock jump", func(w io.Writer, x, cy float64) {
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6,4"/>`+"\n", x+6, cy-8, x+6, cy+8, colSystem)
		}},
	},
}

// Legend layout: items start at legendLeft; each is a sample, a gap, its text.
const (
	legendLeft   = 80
	legendSample = 20 // from an item's start to its text
	legendGap    = 24 // from an item's text to the next item
)

// legendWidth returns the right end of the legend's widest row.
func legendWidth() float64 {
	right := 0.0
	for _, row := range legendRows {
		x := float64(legendLeft)
		for _, it := range row {
			right = math.Max(right, x+legendSample+textWidth(it.text, svgLabelPx))
			x += legendSample + textWidth(it.text, svgLabelPx) + legendGap
		}
	}
	return right
}

func writeLegend(w io.Writer, top float64) {
	y := top + 20
	fmt.Fprintf(w, `<text x="20" y="%.1f" style="%s;font-size:12px;font-weight:bold" fill="%s">legend</text>`+"\n", y, svgFont, colText)
	for _, row := range legendRows {
		x, cy := float64(legendLeft), y-4
		for _, it := range row {
			it.draw(w, x, cy)
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" style="%s;font-size:11px" fill="%s">%s</text>`+"\n", x+legendSample, y, svgFont, colText, xmlText(it.text))
			x += legendSample + textWidth(it.text, svgLabelPx) + legendGap
		}
		y += 22
	}
}

// gridStep returns the distance between time labels, in ticks.
func gridStep(ppt float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000} {
		if s*ppt >= 36 {
			return s
		}
	}
	return 20000
}

func svgID(run *Run) string {
	id := run.Scenario
	if run.Case != "" {
		id += "-" + run.Case
	}
	if run.Fencing {
		id += "-fencing-on"
	} else {
		id += "-fencing-off"
	}
	if len(run.Protections) > 0 {
		id += "-" + strings.ReplaceAll(strings.Join(run.Protections, "-"), " ", "-")
	}
	return id
}

// xmlText escapes s for XML text and attribute values.
func xmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;").Replace(s)
}
