package sim

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/fencelock/fence"
)

func simulate(t *testing.T, name string, fencing bool, o Options) *Report {
	t.Helper()
	rep, err := Simulate(name, fencing, o)
	if err != nil {
		t.Fatalf("Simulate(%q, fencing %v): %v", name, fencing, err)
	}
	return rep
}

// timeline returns "T31 B acquire token 2" style lines of the events of kinds.
func timeline(run *Run, kinds ...Kind) []string {
	var out []string
	for _, e := range run.Events {
		for _, k := range kinds {
			if e.Kind == k {
				out = append(out, fmt.Sprintf("%s %s %s %d", stamp(e.At), e.Worker, e.Kind, e.Token))
			}
		}
	}
	return out
}

func finalValue(run *Run, resource string) (Write, bool) {
	var last Write
	found := false
	for _, w := range run.Writes {
		if w.Resource == resource {
			last, found = w, true
		}
	}
	return last, found
}

func eventsOf(run *Run, kind Kind) []Event {
	var out []Event
	for _, e := range run.Events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func TestPausePastTTL_FollowsTheSeedTimelineTickForTick(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		run := simulate(t, "pause-past-ttl", fencing, Options{}).Runs[0]
		got := strings.Join(timeline(run, KindAcquire, KindPause, KindExpire, KindResume, KindWrite, KindReject), "\n")
		last := "T32 A write 1"
		if fencing {
			last = "T32 A reject 1"
		}
		want := strings.Join([]string{"T0 A acquire 1", "T10 A pause 0", "T30 A expire 1", "T31 B acquire 2", "T31 B write 2", "T32 A resume 0", last}, "\n")
		if got != want {
			t.Errorf("fencing %v: timeline\nwant:\n%s\ngot:\n%s", fencing, want, got)
		}
	}
}

func TestPausePastTTL_FencingOff_StaleWriteLosesBsData(t *testing.T) {
	run := simulate(t, "pause-past-ttl", false, Options{}).Runs[0]
	w, ok := finalValue(run, "ledger")
	if !ok || w.Value != "A's data" || w.Token != 1 {
		t.Errorf("final ledger write: want \"A's data\" with token 1, got %+v (found %v)", w, ok)
	}
	if len(run.Violations) != 1 || run.Violations[0].Write.Token != 1 || run.Violations[0].Prev.Token != 2 {
		t.Errorf("violations: want one (token 1 after token 2), got %v", run.Violations)
	}
	if !strings.Contains(strings.Join(run.Outcome, "\n"), `LOST: "ledger" = "B's data" (token 2`) {
		t.Errorf("outcome should report B's write lost, got:\n%s", strings.Join(run.Outcome, "\n"))
	}
}

func TestPausePastTTL_FencingOn_GuardRejectsTokenOne(t *testing.T) {
	run := simulate(t, "pause-past-ttl", true, Options{}).Runs[0]
	rejects := eventsOf(run, KindReject)
	if len(rejects) != 1 {
		t.Fatalf("want 1 rejected write, got %d: %+v", len(rejects), rejects)
	}
	want := `fence: stale token 1 for "ledger", highest seen 2`
	if r := rejects[0]; r.Worker != "A" || r.At != T(32) || !strings.Contains(r.Err, want) || !strings.Contains(r.Text, want) {
		t.Errorf("rejection: want A at T32 with %q, got %s %s err=%q text=%q", want, r.Worker, stamp(r.At), r.Err, r.Text)
	}
	if w, _ := finalValue(run, "ledger"); w.Value != "B's data" || w.Token != 2 {
		t.Errorf("final ledger write: want \"B's data\" token 2, got %+v", w)
	}
	if len(run.Violations) != 0 {
		t.Errorf("violations with fencing on: want none, got %v", run.Violations)
	}
}

func TestCheckThenWrite_CheckSaysHeldYetTheWriteIsStale(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		run := simulate(t, "check-then-write", fencing, Options{}).Runs[0]
		checks := eventsOf(run, KindCheck)
		if len(checks) != 1 || !checks[0].OK || checks[0].At != T(27) {
			t.Fatalf("fencing %v: want one successful check at T27, got %+v", fencing, checks)
		}
		var aWrite *Event
		for i, e := range run.Events {
			if e.Worker == "A" && (e.Kind == KindWrite || e.Kind == KindReject) {
				aWrite = &run.Events[i]
			}
		}
		if aWrite == nil || aWrite.At != T(34) {
			t.Fatalf("fencing %v: want A's write at T34 (after its pause), got %+v", fencing, aWrite)
		}
		wantKind := KindWrite
		if fencing {
			wantKind = KindReject
		}
		if aWrite.Kind != wantKind {
			t.Errorf("fencing %v: A's write after a successful check: want %s, got %s", fencing, wantKind, aWrite.Kind)
		}
	}
}

func TestFailover_CounterGoesBackwards_GuardRejects_HealRestoresProgress(t *testing.T) {
	on := simulate(t, "failover", true, Options{}).Runs[0]
	var cTokens []fence.Token
	for _, e := range eventsOf(on, KindAcquire) {
		if e.Worker == "C" {
			cTokens = append(cTokens, e.Token)
		}
	}
	if fmt.Sprint(cTokens) != "[2 4]" {
		t.Errorf("C's grants: want tokens [2 4] (2 re-issued after the failover, 4 after healing), got %v", cTokens)
	}
	heals := eventsOf(on, KindHeal)
	if len(heals) != 1 || heals[0].Token != 3 {
		t.Errorf("heal: want one raising the counter to 3, got %+v", heals)
	}
	if w, _ := finalValue(on, "ledger"); w.Token != 4 || w.Worker != "C" {
		t.Errorf("final ledger write: want C's with token 4, got %+v", w)
	}
	if len(on.Violations) != 0 {
		t.Errorf("fencing on: want no violations, got %v", on.Violations)
	}
	off := simulate(t, "failover", false, Options{}).Runs[0]
	if len(off.Violations) == 0 {
		t.Errorf("fencing off: want the regressed token's write flagged, got no violations")
	}
}

func TestPayments_TableShowsWhichProtectionStopsWhichCase(t *testing.T) {
	rep := simulate(t, "payments", false, Options{})
	var got strings.Builder
	for _, row := range rep.Table.Rows {
		fmt.Fprintf(&got, "%s:", row.Case)
		for _, c := range row.Cells {
			fmt.Fprintf(&got, " %d/%d", c.Charges, c.Payouts)
		}
		got.WriteString("\n")
	}
	// charges/payout rows per column: TTL only, fencing, idempotency, unique, all.
	want := "pause: 2/2 1/1 1/2 2/1 1/1\n" +
		"failover: 2/2 1/1 1/2 2/1 1/1\n" +
		"clock-jump: 2/2 1/1 1/2 2/1 1/1\n" +
		"delayed-write: 2/2 1/1 1/2 2/1 1/1\n" +
		"retry: 2/1 2/1 1/1 2/1 1/1\n"
	if got.String() != want {
		t.Errorf("payments table (charges/rows)\nwant:\n%sgot:\n%s", want, got.String())
	}
	if len(rep.Runs) != len(payCases) {
		t.Fatalf("runs: want %d (one per case), got %d", len(payCases), len(rep.Runs))
	}
	for _, run := range rep.Runs {
		if len(run.Protections) != 0 {
			t.Errorf("fencing off: run %s has protections %v, want none", run.Case, run.Protections)
		}
	}
	for _, run := range simulate(t, "payments", true, Options{}).Runs {
		if len(run.Protections) != 3 {
			t.Errorf("fencing on: run %s has protections %v, want all three", run.Case, run.Protections)
		}
	}
}

func TestRandom_FencingOffFindsViolationsForTypicalSeeds(t *testing.T) {
	const seeds = 40
	found, rejected := 0, 0
	for seed := uint64(1); seed <= seeds; seed++ {
		if len(simulate(t, "random", false, Options{Seed: seed}).Runs[0].Violations) > 0 {
			found++
		}
		on := simulate(t, "random", true, Options{Seed: seed}).Runs[0]
		if len(on.Violations) != 0 {
			t.Errorf("seed %d, fencing on: want no violations, got %v", seed, on.Violations)
		}
		rejected += len(eventsOf(on, KindReject))
	}
	if found < seeds*8/10 {
		t.Errorf("fencing off: want violations for at least 80%% of %d seeds, found them for %d", seeds, found)
	}
	if rejected == 0 {
		t.Errorf("fencing on: want the guard to reject some stale writes over %d seeds, it rejected none", seeds)
	}
}

func TestRandom_SameSeedSameRun_OtherSeedOtherRun(t *testing.T) {
	text := func(seed uint64) string {
		var buf bytes.Buffer
		if err := WriteText(&buf, simulate(t, "random", false, Options{Seed: seed, Workers: 5})); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	a, b, c := text(7), text(7), text(8)
	if a != b {
		t.Errorf("seed 7 twice: outputs differ:\n%s", firstDiff([]byte(a), []byte(b)))
	}
	if a == c {
		t.Errorf("seeds 7 and 8 gave the same run; the seed is not used")
	}
	if ws := simulate(t, "random", false, Options{Seed: 7, Workers: 5}).Runs[0].Workers; fmt.Sprint(ws) != "[A B C D E]" {
		t.Errorf("5 workers: want [A B C D E], got %v", ws)
	}
}

func TestSimulate_BadInput(t *testing.T) {
	if _, err := Simulate("no-such", false, Options{}); !errors.Is(err, ErrUnknownScenario) || !strings.Contains(err.Error(), "pause-past-ttl") {
		t.Errorf("unknown scenario: want ErrUnknownScenario listing the known ones, got %v", err)
	}
	for _, o := range []Options{{Workers: -1}, {Workers: 27}, {Horizon: -1}, {Horizon: T(100001)}} {
		if _, err := Simulate("random", false, o); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("options %+v: want fence.ErrInvalid, got %v", o, err)
		}
	}
}

func TestCheckWrites(t *testing.T) {
	w := func(res string, tok fence.Token, lease string) Write {
		return Write{Resource: res, Token: tok, Lease: lease}
	}
	cases := []struct {
		name   string
		writes []Write
		want   int
	}{
		{"increasing tokens", []Write{w("r", 1, "A1"), w("r", 2, "B1"), w("r", 5, "C1")}, 0},
		{"same token within one lease", []Write{w("r", 2, "B1"), w("r", 2, "B1")}, 0},
		{"lower token after higher", []Write{w("r", 2, "B1"), w("r", 1, "A1")}, 1},
		{"same token from another lease", []Write{w("r", 2, "B1"), w("r", 2, "C1")}, 1},
		{"resources are independent", []Write{w("r", 5, "A1"), w("s", 1, "B1")}, 0},
		{"every stale write counts", []Write{w("r", 3, "C1"), w("r", 1, "A1"), w("r", 2, "B1"), w("r", 4, "D1")}, 2},
	}
	for _, c := range cases {
		if got := CheckWrites(c.writes); len(got) != c.want {
			t.Errorf("%s: want %d violations, got %d: %v", c.name, c.want, len(got), got)
		}
	}
}

func TestWriters_OutputIsWellFormed(t *testing.T) {
	for _, name := range ScenarioNames() {
		rep, err := SimulateBoth(name, Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		var js bytes.Buffer
		if err := WriteJSON(&js, rep); err != nil {
			t.Fatal(err)
		}
		var decoded struct {
			Runs []struct {
				Events []map[string]any `json:"events"`
			} `json:"runs"`
		}
		if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
			t.Fatalf("%s: JSON does not parse: %v", name, err)
		}
		if len(decoded.Runs) != len(rep.Runs) || len(decoded.Runs[0].Events) != len(rep.Runs[0].Events) {
			t.Errorf("%s: JSON has %d runs, want %d (or events differ)", name, len(decoded.Runs), len(rep.Runs))
		}
		var svg bytes.Buffer
		if err := WriteSVG(&svg, rep); err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(&svg)
		for {
			if _, err := dec.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: SVG is not well-formed XML: %v", name, err)
			}
		}
		var mm bytes.Buffer
		if err := WriteMermaid(&mm, rep); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(mm.String()), "\n")
		if lines[0] != "sequenceDiagram" {
			t.Errorf("%s: mermaid starts with %q, want sequenceDiagram", name, lines[0])
		}
		for _, l := range lines[1:] {
			if strings.ContainsAny(l, ";#") || !strings.HasPrefix(l, "    ") {
				t.Errorf("%s: mermaid line %q: want indented, without ; or #", name, l)
			}
		}
	}
}

func TestWriteText_NeverShowsLeaseIDs(t *testing.T) {
	rep, err := SimulateBoth("failover", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	// Lease ids are 32 hex digits; labels like A1 are all that may appear.
	for _, f := range strings.FieldsFunc(buf.String(), func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) }) {
		if len(f) >= 32 {
			t.Fatalf("output contains what looks like a lease id: %s", f)
		}
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriters_ReturnWriteErrors(t *testing.T) {
	rep := simulate(t, "pause-past-ttl", true, Options{})
	for _, f := range formats {
		if err := f.write(failWriter{}, rep); err == nil {
			t.Errorf("%s: want the writer's error, got nil", f.ext)
		}
	}
}

// BenchmarkSimulate_Random measures one random run (4 workers, 400 ticks) through
// the real inmem Locker and Guard, rendered as text.
func BenchmarkSimulate_Random(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		rep, err := Simulate("random", true, Options{Seed: uint64(i)})
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteText(io.Discard, rep); err != nil {
			b.Fatal(err)
		}
	}
}
