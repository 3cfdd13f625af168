package main

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The tours in README.md and fencehttp/README.md are run as written, with the built
// binary, against a real `fence serve`: each command a reader types (a line starting
// with "$ " in a ```sh block of the tour's section) is run with bash, and what the
// document shows under it must be what it prints. A tour that no longer works as
// written fails here, not in a new user's terminal.

// docTour is one tour: a markdown file and the heading of its section.
type docTour struct {
	file, heading string
}

var (
	readmeTour   = docTour{"../../README.md", "### 3. From any language: `fence serve`"}
	httpTour     = docTour{"../../fencehttp/README.md", "## Five minutes with curl and the CLI"}
	holdersTour  = docTour{"../../fencehttp/README.md", "## Who holds a lock, and revoking it"}
	electionTour = docTour{"../../README.md", "### Leader election: `fence elect` and `fence leader`"}
	watchTour    = docTour{"../../fencehttp/README.md", "## Watching a lock"}
	kindsTour    = docTour{"../../fencehttp/README.md", "## Semaphores and shared locks"}
)

// name is the tour's file relative to the repository's root.
func (tour docTour) name() string { return strings.TrimPrefix(tour.file, "../../") }

// docStep is one typed command and the output the document shows for it.
type docStep struct {
	line int      // of the command in the file
	cmd  string   // as typed, after "$ "
	want []string // the lines shown under it
}

// parseTour returns the steps of a tour, in order.
func parseTour(t *testing.T, tour docTour) []docStep {
	t.Helper()
	f, err := os.Open(tour.file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		steps          []docStep
		in, inCode     bool
		level          int
		cur            *docStep
		lineNo         int
		sc             = bufio.NewScanner(f)
		headingLevelRE = regexp.MustCompile(`^(#+) `)
	)
	flush := func() {
		if cur != nil {
			steps = append(steps, *cur)
			cur = nil
		}
	}
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if !inCode {
			if m := headingLevelRE.FindStringSubmatch(line); m != nil {
				if strings.HasPrefix(line, tour.heading) {
					in, level = true, len(m[1])
					continue
				}
				if in && len(m[1]) <= level {
					break // the next section
				}
			}
		}
		if !in {
			continue
		}
		if strings.HasPrefix(line, "```") {
			inCode = !inCode && strings.HasPrefix(line, "```sh")
			flush()
			continue
		}
		if !inCode {
			continue
		}
		switch {
		case strings.HasPrefix(line, "$ "):
			flush()
			cur = &docStep{line: lineNo, cmd: strings.TrimPrefix(line, "$ ")}
		case strings.TrimSpace(line) == "":
			flush()
		case cur != nil:
			cur.want = append(cur.want, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(steps) < 3 {
		t.Fatalf("%s: found %d commands under %q; the tour's heading or format changed", tour.file, len(steps), tour.heading)
	}
	return steps
}

var (
	hexIDRE    = regexp.MustCompile(`[0-9a-f]{32}`)
	durationRE = regexp.MustCompile(`\d+(\.\d+)?(µs|ms|s|m)\b`)
	msFieldRE  = regexp.MustCompile(`"(waited_ms|expires_in_ms)":\d+`)
	numberRE   = regexp.MustCompile(`\d+`)
)

// linePattern compiles a shown line into a pattern: "..." stands for anything, lease
// ids, durations and the millisecond fields that vary between runs match any value,
// and runs of spaces match any run of spaces. With anyNumber, every number matches
// any number (a tour run after another on the same data sees other tokens).
func linePattern(shown string, anyNumber bool) *regexp.Regexp {
	const (
		dots = "\x00dots\x00"
		id   = "\x00id\x00"
		dur  = "\x00dur\x00"
		num  = "\x00num\x00"
	)
	s := strings.ReplaceAll(shown, "...", dots)
	s = hexIDRE.ReplaceAllString(s, id)
	s = msFieldRE.ReplaceAllString(s, `"$1":`+num)
	s = durationRE.ReplaceAllString(s, dur)
	if anyNumber {
		s = numberRE.ReplaceAllString(s, num)
	}
	s = regexp.QuoteMeta(strings.Join(strings.Fields(s), " "))
	s = strings.ReplaceAll(s, " ", `\s+`)
	r := strings.NewReplacer(dots, `.*`, id, `[0-9a-f]{32}`, dur, `\d+(\.\d+)?(µs|ms|s|m)`, num, `\d+`)
	return regexp.MustCompile(`^\s*` + r.Replace(s) + `\s*$`)
}

// runTour runs the steps of tour against server (its URL), in dir, and reports every
// difference between what the document shows and what the commands print. A command
// must exit 0: a document that shows a refusal shows it with `; echo "exit $?"`.
func runTour(t *testing.T, tour docTour, server, dir string, anyNumber bool) {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	// The documents use the default address; the test's server is on a free port.
	addr := strings.NewReplacer("127.0.0.1:7420", u.Host, "localhost:7420", u.Host)
	for _, st := range parseTour(t, tour) {
		if strings.Contains(st.cmd, "go build") || strings.Contains(st.cmd, "fence serve") {
			continue // the test built the binary and runs the server
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", addr.Replace(st.cmd))
		cmd.Dir = dir
		cmd.Env = append(cleanEnv(), "FENCE_SERVER="+server)
		out, err := cmd.CombinedOutput()
		cancel()
		where := fmt.Sprintf("%s:%d: $ %s", tour.name(), st.line, st.cmd)
		if err != nil {
			t.Errorf("%s\nfailed: %v\noutput:\n%s", where, err, out)
			continue
		}
		// Each shown line must match a printed line, in order; extra printed lines
		// (another tour's locks in a listing) are allowed.
		got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		i := 0
		for _, want := range st.want {
			re := linePattern(want, anyNumber)
			for i < len(got) && !re.MatchString(got[i]) {
				i++
			}
			if i == len(got) {
				t.Errorf("%s\nthe document shows:\n\t%s\nno line of the output matches it (pattern %s); output:\n%s", where, want, re, out)
				break
			}
			i++
		}
	}
}

// startTourServe makes a working directory for a reader of the tours, with ./fence
// the built binary (the README's tour builds it there), and starts a fence serve
// with its data in DIR/fence-data; the server is stopped at the end of the test.
func startTourServe(t *testing.T) (dir, url string) {
	t.Helper()
	dir = tourDir(t)
	srv, err := startServe(filepath.Join(dir, "fence-data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop() })
	return dir, srv.url
}

// tourDir makes a working directory for a reader of the tours, with ./fence the
// built binary.
func tourDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(cli.bin, filepath.Join(dir, "fence")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDocs_Tours_RunAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tours against a real fence serve")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the tours use curl: install it (apt-get install curl)")
	}
	for _, tour := range []docTour{readmeTour, httpTour, holdersTour, watchTour, kindsTour} {
		t.Run(tour.name()+" "+tour.heading, func(t *testing.T) {
			t.Parallel()
			dir, url := startTourServe(t)
			runTour(t, tour, url, dir, false)
		})
	}
}

// TestDocs_Tours_OneAfterTheOther runs the README's tour and then fencehttp/README's on
// the same server and data, as a reader following both would: the second must not
// fail because the first left a lock held or bound a key to another lock.
func TestDocs_Tours_OneAfterTheOther(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tours against a real fence serve")
	}
	dir, url := startTourServe(t)
	runTour(t, readmeTour, url, dir, true)
	runTour(t, electionTour, url, dir, true)
	runTour(t, httpTour, url, dir, true)
	runTour(t, holdersTour, url, dir, true)
	runTour(t, watchTour, url, dir, true)
	runTour(t, kindsTour, url, dir, true)
}

// TestDocs_ElectionTour_RunsAsWritten runs the README's leader election section
// as a reader would type it, on a server of its own (so the epochs are as shown).
func TestDocs_ElectionTour_RunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tour against a real fence serve")
	}
	dir, url := startTourServe(t)
	runTour(t, electionTour, url, dir, false)
}

// codeBlock returns the first fenced block of language lang in file after the line
// starting with heading.
func codeBlock(t *testing.T, file, heading, lang string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\n"+heading)
	if i < 0 {
		t.Fatalf("%s: no heading %q", file, heading)
	}
	text = text[i:]
	start := strings.Index(text, "\n```"+lang+"\n")
	if start < 0 {
		t.Fatalf("%s: no ```%s block under %q", file, lang, heading)
	}
	text = text[start+len("\n```"+lang+"\n"):]
	end := strings.Index(text, "\n```")
	if end < 0 {
		t.Fatalf("%s: the ```%s block under %q is not closed", file, lang, heading)
	}
	return text[:end+1]
}

// TestDocs_ClientExamples_AfterTheTours runs every shell tour, then the TypeScript
// and Python clients' README examples, on one server, as a new user following the
// documents one after another would: an example that reused another tour's key under
// another lock, or wrote with a token the server never issued, fails here (the
// TypeScript example did, with a WrongLockError, after the README's tour).
func TestDocs_ClientExamples_AfterTheTours(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tours and the clients' examples against a real fence serve")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("the Python client's example needs python3 (scripts/install-deps.sh installs it)")
	}
	dir, url := startTourServe(t)
	for _, tour := range []docTour{readmeTour, electionTour, httpTour, holdersTour, watchTour, kindsTour} {
		runTour(t, tour, url, dir, true)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	env := append(cleanEnv(), "FENCE_SERVER="+url)
	run := func(what string, cmd *exec.Cmd, lastLine string) {
		t.Helper()
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s, after the tours on the same server: %v\n%s", what, err, out)
			return
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if got := lines[len(lines)-1]; got != lastLine {
			t.Errorf("%s: want its last line %q, got %q; output:\n%s", what, lastLine, got, out)
		}
	}

	// The TypeScript example runs inside the package, so that "@fencelock/fence"
	// resolves to it (the committed dist/), with a Node.js of at least 20.3 that
	// scripts/node.sh finds or installs.
	ts := filepath.Join(root, "clients", "typescript", "test", fmt.Sprintf(".readme-example-go-%d.mjs", os.Getpid()))
	if err := os.WriteFile(ts, []byte(codeBlock(t, "../../clients/typescript/README.md", "## Example", "js")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(ts) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run("clients/typescript/README.md's example",
		exec.CommandContext(ctx, "bash", "-c", `. "$1/scripts/node.sh" >&2 && exec node "$2"`, "example", root, ts), "total=120")

	py := filepath.Join(t.TempDir(), "example.py")
	if err := os.WriteFile(py, []byte(codeBlock(t, "../../clients/python/README.md", "## A runnable example", "python")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, python, py)
	env = append(env, "PYTHONPATH="+filepath.Join(root, "clients", "python", "src"), "PYTHONDONTWRITEBYTECODE=1")
	run("clients/python/README.md's example", cmd, `b"B's value"`)
}

// TestDocs_README_SaysTheGoVersion checks that the README names the Go version that
// builds the project: go.mod's go line.
func TestDocs_README_SaysTheGoVersion(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("builds with Go %s or later", m[1]); !strings.Contains(string(readme), want) {
		t.Errorf("README.md: want it to say %q (go.mod's go line)", want)
	}
}
