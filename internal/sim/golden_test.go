package sim

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ and docs/")

// goldenSeed is the seed every golden file is rendered with.
const goldenSeed = 1

var formats = []struct {
	ext   string
	write func(io.Writer, *Report) error
}{
	{"txt", WriteText},
	{"json", WriteJSON},
	{"mmd", WriteMermaid},
	{"svg", WriteSVG},
}

func render(t *testing.T, rep *Report, write func(io.Writer, *Report) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf, rep); err != nil {
		t.Fatalf("render: %v", err)
	}
	return buf.Bytes()
}

// checkGolden compares got with the golden file at path, or rewrites it with -update.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test ./sim -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test ./sim -update after checking the change):\n%s", path, firstDiff(want, got))
	}
}

// firstDiff shows the first differing line of want and got.
func firstDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, w, g)
		}
	}
	return "(same lines, different bytes)"
}

// TestGolden_EveryScenarioFencingFormat renders every scenario with fencing off and
// on in every format, twice, and checks the two renders are byte-identical and
// equal to the golden file.
func TestGolden_EveryScenarioFencingFormat(t *testing.T) {
	for _, name := range ScenarioNames() {
		for _, fencing := range []bool{false, true} {
			for _, f := range formats {
				file := fmt.Sprintf("%s-fencing-%s.%s", name, onOff(fencing), f.ext)
				t.Run(file, func(t *testing.T) {
					first, err := Simulate(name, fencing, Options{Seed: goldenSeed})
					if err != nil {
						t.Fatal(err)
					}
					second, err := Simulate(name, fencing, Options{Seed: goldenSeed})
					if err != nil {
						t.Fatal(err)
					}
					a, b := render(t, first, f.write), render(t, second, f.write)
					if !bytes.Equal(a, b) {
						t.Fatalf("two runs with the same seed differ:\n%s", firstDiff(a, b))
					}
					checkGolden(t, filepath.Join("testdata", file), a)
				})
			}
		}
	}
}

// TestGolden_DocsDiagram keeps docs/pause-past-ttl.svg and .mmd (linked from the
// README) equal to what `fence simulate --format svg|mermaid` prints.
func TestGolden_DocsDiagram(t *testing.T) {
	rep, err := SimulateBoth("pause-past-ttl", Options{Seed: goldenSeed})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("..", "..", "docs", "pause-past-ttl.svg"), render(t, rep, WriteSVG))
	checkGolden(t, filepath.Join("..", "..", "docs", "pause-past-ttl.mmd"), render(t, rep, WriteMermaid))
}
