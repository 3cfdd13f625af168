package sim

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// measuredAdvances are the advance widths, in thousandths of an em, of the
// printable ASCII characters (space to ~) in the bold faces a viewer may pick for
// svgFont, measured in Chromium with canvas measureText at 100px. Bold is wider
// than regular in both, so these bound regular text too.
var measuredAdvances = []struct{ font, widths string }{
	{"DejaVu Sans Bold", "348 456 521 838 696 1002 872 306 457 457 523 838 380 415 380 365 696 696 696 696 696 696 696 696 696 696 400 400 838 838 838 580 1000 774 762 734 830 683 683 821 837 372 372 775 637 995 837 850 733 850 770 720 682 812 774 1103 771 724 725 457 365 457 838 500 500 675 716 593 716 678 435 716 712 343 343 665 343 1042 712 687 716 716 493 595 478 712 652 924 645 652 582 712 365 712 838"},
	{"DejaVu Sans", "318 401 460 838 636 950 780 275 390 390 500 838 318 361 318 337 636 636 636 636 636 636 636 636 636 636 337 337 838 838 838 531 1000 684 686 698 770 632 575 775 752 295 295 656 557 863 748 787 603 787 695 635 611 732 684 989 685 611 685 390 337 390 838 500 500 613 635 550 635 615 352 635 634 278 278 579 278 974 634 612 635 635 411 521 392 634 592 818 592 592 525 636 337 636 838"},
	{"Liberation Sans Bold (Arial, Helvetica metrics)", "278 333 474 556 556 889 722 238 333 333 389 584 278 333 278 278 556 556 556 556 556 556 556 556 556 556 333 333 584 584 584 611 975 722 722 722 722 667 611 778 722 278 556 722 611 833 722 778 667 778 722 667 611 722 667 944 667 667 611 333 278 333 584 556 333 556 611 556 611 556 333 611 611 278 278 556 278 889 611 611 611 611 389 556 333 611 556 778 556 556 500 389 280 389 584"},
}

func TestTextWidth_BoundsTheMeasuredAdvanceOfEveryASCIICharacter(t *testing.T) {
	for _, m := range measuredAdvances {
		fields := strings.Fields(m.widths)
		if len(fields) != 127-32 {
			t.Fatalf("%s: want %d widths, got %d", m.font, 127-32, len(fields))
		}
		for i, f := range fields {
			milli, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			r := rune(32 + i)
			if got, min := charEm(r), float64(milli)/1000; got < min {
				t.Errorf("%s: %q is %.3f em wide, charEm says %.3f", m.font, r, min, got)
			}
		}
	}
}

// svgPictures renders what the layout tests check: every scenario with fencing off,
// on, and both in one picture (as fence simulate --format svg prints without
// --fencing), and random with more seeds and worker counts.
func svgPictures(t *testing.T) []svgPicture {
	t.Helper()
	var out []svgPicture
	add := func(name string, rep *Report, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var buf bytes.Buffer
		if err := WriteSVG(&buf, rep); err != nil {
			t.Fatalf("%s: WriteSVG: %v", name, err)
		}
		var root svgNode
		if err := xml.Unmarshal(buf.Bytes(), &root); err != nil {
			t.Fatalf("%s: SVG does not parse: %v", name, err)
		}
		out = append(out, svgPicture{name, &root})
	}
	for _, name := range ScenarioNames() {
		for _, fencing := range []bool{false, true} {
			rep, err := Simulate(name, fencing, Options{Seed: goldenSeed})
			add(fmt.Sprintf("%s fencing %s", name, onOff(fencing)), rep, err)
		}
		rep, err := SimulateBoth(name, Options{Seed: goldenSeed})
		add(name+" fencing off and on", rep, err)
	}
	for _, o := range []Options{{Seed: 2}, {Seed: 3}, {Seed: 7}, {Seed: 5, Workers: 1}, {Seed: 9, Workers: 26}} {
		rep, err := SimulateBoth("random", o)
		add(fmt.Sprintf("random seed %d workers %d", o.Seed, o.Workers), rep, err)
	}
	for _, o := range []Options{{Seed: 4, Workers: 2}, {Seed: 6, Workers: 25}} {
		rep, err := SimulateBoth("semaphore-pause", o)
		add(fmt.Sprintf("semaphore-pause seed %d permits %d", o.Seed, o.Workers), rep, err)
	}
	return out
}

type svgPicture struct {
	name string
	root *svgNode
}

// svgNode is any SVG element, with its attributes, text and children.
type svgNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Nodes   []svgNode  `xml:",any"`
}

func (n *svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// num returns attribute name as a number; def if it is absent.
func (n *svgNode) num(t *testing.T, name string, def float64) float64 {
	t.Helper()
	s := n.attr(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", n.XMLName.Local, name, s, err)
	}
	return v
}

// walk calls f for n and every element inside it.
func (n *svgNode) walk(f func(*svgNode)) {
	f(n)
	for i := range n.Nodes {
		n.Nodes[i].walk(f)
	}
}

// panels returns the run panels of a picture: the groups at the top level.
func (n *svgNode) panels() []*svgNode {
	var out []*svgNode
	for i := range n.Nodes {
		if c := &n.Nodes[i]; c.XMLName.Local == "g" && c.attr("id") != "" {
			out = append(out, c)
		}
	}
	return out
}

var fontSize = regexp.MustCompile(`font-size:([0-9.]+)px`)

// textBox returns the box a <text> may cover by textWidth: its x extent from x,
// text-anchor and width, and its y extent from the baseline (a font's ascent and
// descent stay within 1em above and 0.3em below).
func textBox(t *testing.T, n *svgNode) (x0, x1, y0, y1 float64) {
	t.Helper()
	m := fontSize.FindStringSubmatch(n.attr("style"))
	if m == nil {
		t.Fatalf("<text> %q has no font-size in its style %q", n.Text, n.attr("style"))
	}
	size, _ := strconv.ParseFloat(m[1], 64)
	w := textWidth(n.Text, size)
	x, y := n.num(t, "x", 0), n.num(t, "y", 0)
	switch n.attr("text-anchor") {
	case "middle":
		x0 = x - w/2
	case "end":
		x0 = x - w
	default:
		x0 = x
	}
	return x0, x0 + w, y - size, y + 0.3*size
}

// left returns the smallest x that shape n (a mark's part, a bar) paints, stroke
// included.
func left(t *testing.T, n *svgNode) float64 {
	t.Helper()
	half := n.num(t, "stroke-width", 1) / 2
	switch n.XMLName.Local {
	case "circle":
		return n.num(t, "cx", 0) - n.num(t, "r", 0) - half
	case "rect":
		return n.num(t, "x", 0) - half
	case "line":
		return math.Min(n.num(t, "x1", 0), n.num(t, "x2", 0)) - half
	case "path":
		return pathMinX(t, n.attr("d")) - half
	case "text":
		x0, _, _, _ := textBox(t, n)
		return x0
	case "g", "title":
		return math.Inf(1)
	}
	t.Fatalf("left: unexpected <%s> in a mark", n.XMLName.Local)
	return 0
}

// pathMinX returns the smallest x of the points of path data made of M, m, L and l
// commands (and z), as the marks use.
func pathMinX(t *testing.T, d string) float64 {
	t.Helper()
	minX, x, y := math.Inf(1), 0.0, 0.0
	cmd := byte(0)
	fields := strings.Fields(strings.NewReplacer(",", " ", "M", " M ", "m", " m ", "L", " L ", "l", " l ", "z", " z ", "Z", " z ").Replace(d))
	for i := 0; i < len(fields); i++ {
		switch f := fields[i]; f {
		case "M", "m", "L", "l":
			cmd = f[0]
			continue
		case "z":
			continue
		}
		if i+1 >= len(fields) {
			t.Fatalf("path %q: odd number of coordinates", d)
		}
		dx, err1 := strconv.ParseFloat(fields[i], 64)
		dy, err2 := strconv.ParseFloat(fields[i+1], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("path %q: only M, m, L, l and z with numbers are understood", d)
		}
		i++
		switch cmd {
		case 'M', 'L':
			x, y = dx, dy
		case 'm', 'l':
			x, y = x+dx, y+dy
		default:
			t.Fatalf("path %q: coordinates before a command", d)
		}
		_ = y
		minX = math.Min(minX, x)
	}
	return minX
}

// TestWriteSVG_EveryTextFitsInsideThePicture checks, for every scenario and mode,
// that each <text>, as wide as textWidth says it may be, lies inside the picture's
// viewBox, and each text of a run's panel inside the panel's frame.
func TestWriteSVG_EveryTextFitsInsideThePicture(t *testing.T) {
	for _, pic := range svgPictures(t) {
		root := pic.root
		var vx, vy, vw, vh float64
		if _, err := fmt.Sscanf(root.attr("viewBox"), "%g %g %g %g", &vx, &vy, &vw, &vh); err != nil || vx != 0 || vy != 0 {
			t.Fatalf("%s: viewBox %q: want 0 0 W H", pic.name, root.attr("viewBox"))
		}
		if w, h := root.num(t, "width", 0), root.num(t, "height", 0); w != vw || h != vh {
			t.Errorf("%s: width x height %gx%g, want the viewBox's %gx%g", pic.name, w, h, vw, vh)
		}
		root.walk(func(n *svgNode) {
			if n.XMLName.Local != "text" {
				return
			}
			x0, x1, y0, y1 := textBox(t, n)
			if x0 < 0 || x1 > vw || y0 < 0 || y1 > vh {
				t.Errorf("%s: text %q covers x %.1f..%.1f, y %.1f..%.1f: outside the picture (%gx%g)", pic.name, n.Text, x0, x1, y0, y1, vw, vh)
			}
		})
		for _, p := range root.panels() {
			frame := &p.Nodes[0]
			if frame.XMLName.Local != "rect" || frame.attr("fill") != "none" {
				t.Fatalf("%s: panel %s: want its frame (a rect without fill) first, got <%s>", pic.name, p.attr("id"), frame.XMLName.Local)
			}
			fx0 := frame.num(t, "x", 0)
			fx1 := fx0 + frame.num(t, "width", 0)
			p.walk(func(n *svgNode) {
				if n.XMLName.Local != "text" {
					return
				}
				if x0, x1, _, _ := textBox(t, n); x0 < fx0 || x1 > fx1 {
					t.Errorf("%s: panel %s: text %q covers x %.1f..%.1f, outside the panel's frame %.1f..%.1f", pic.name, p.attr("id"), n.Text, x0, x1, fx0, fx1)
				}
			})
		}
	}
}

// TestWriteSVG_NoMarkInTheLaneNameGutter checks, for every scenario and mode, that
// the lane names of each panel sit in a gutter on the left that no mark, bar or
// event label enters.
func TestWriteSVG_NoMarkInTheLaneNameGutter(t *testing.T) {
	const gap = 4 // pixels between the longest lane name and anything in the lanes
	for _, pic := range svgPictures(t) {
		for _, p := range pic.root.panels() {
			id := p.attr("id")
			gutter, lanes, marks := 0.0, 0, 0
			p.walk(func(n *svgNode) {
				if n.XMLName.Local == "text" && n.attr("class") == "lane" {
					_, x1, _, _ := textBox(t, n)
					gutter = math.Max(gutter, x1)
					lanes++
				}
			})
			if lanes == 0 {
				t.Fatalf("%s: panel %s: no lane names (text of class lane)", pic.name, id)
			}
			p.walk(func(n *svgNode) {
				switch n.attr("class") {
				case "mark", "bar", "label":
				default:
					return
				}
				marks++
				n.walk(func(part *svgNode) {
					if x := left(t, part); x < gutter+gap {
						what := part.XMLName.Local
						if part.Text != "" && what == "text" {
							what += " " + strconv.Quote(part.Text)
						}
						t.Errorf("%s: panel %s: %s %s starts at x %.1f, inside the lane names' gutter (up to %.1f + %d)", pic.name, id, n.attr("class"), what, x, gutter, gap)
					}
				})
			})
			if marks == 0 {
				t.Errorf("%s: panel %s: no marks, bars or labels found", pic.name, id)
			}
		}
	}
}
