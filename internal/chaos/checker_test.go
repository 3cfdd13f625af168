package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fence"
)

// h builds hand-made histories: one lock "L", one key "k".
func op(w int, kind Kind, tok uint64, lease string, value string, res Result, call, ret int64) Op {
	return Op{Worker: w, Kind: kind, Key: "k", Lock: "L", Token: fenceToken(tok), Lease: lease, Value: value, Result: res, Call: call, Return: ret}
}

// holder appends one fenced critical section: acquire, fence, read, write, release.
func holder(w int, tok uint64, lease, read, wrote string, t int64) []Op {
	return []Op{
		op(w, KindAcquire, tok, lease, "", ResultOK, t, t+1),
		op(w, KindFence, tok, lease, "", ResultOK, t+2, t+3),
		op(w, KindRead, tok, lease, read, ResultOK, t+4, t+5),
		op(w, KindWrite, tok, lease, wrote, ResultOK, t+6, t+7),
		op(w, KindRelease, tok, lease, "", ResultOK, t+8, t+9),
	}
}

func finalRead(value string, t int64) Op {
	return Op{Worker: -1, Kind: KindRead, Key: "k", Lock: "L", Value: value, Result: ResultOK, Call: t, Return: t + 1}
}

func mustCheck(t *testing.T, ops []Op) *Report {
	t.Helper()
	r, err := Check(ops, CheckOptions{})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return r
}

func TestCheck_SequentialFencedHistory_Passes(t *testing.T) {
	var ops []Op
	ops = append(ops, holder(0, 1, "a", "", "1:w0:1", 0)...)
	ops = append(ops, holder(1, 2, "b", "1:w0:1", "2:w1:1", 10)...)
	ops = append(ops, holder(0, 3, "c", "2:w1:1", "3:w0:2", 20)...)
	ops = append(ops, finalRead("3:w0:2", 30))
	r := mustCheck(t, ops)
	if !r.OK() {
		t.Fatalf("OK() = false, want true; linearizable %v, violations %q", r.Linearizable, r.Violations)
	}
	if r.Acquisitions != 3 || r.Writes != 3 || r.Overlaps != 0 {
		t.Errorf("acquisitions, writes, overlaps = %d, %d, %d; want 3, 3, 0", r.Acquisitions, r.Writes, r.Overlaps)
	}
}

// The pause-past-TTL timeline with fencing: worker 0 reads, pauses, worker 1 takes
// over and fences the key; worker 0's late write is rejected. Legal, and counted.
func TestCheck_PausedHolderRejected_PassesAndCountsOverlap(t *testing.T) {
	ops := []Op{
		op(0, KindAcquire, 1, "a", "", ResultOK, 0, 1),
		op(0, KindFence, 1, "a", "", ResultOK, 2, 3),
		op(0, KindRead, 1, "a", "", ResultOK, 4, 5),
	}
	ops = append(ops, holder(1, 2, "b", "", "1:w1:1", 10)...)
	ops = append(ops,
		op(0, KindWrite, 1, "a", "1:w0:1", ResultRejected, 6, 30),
		op(0, KindRelease, 1, "a", "", ResultFailed, 31, 32),
		finalRead("1:w1:1", 40))
	r := mustCheck(t, ops)
	if !r.OK() {
		t.Fatalf("OK() = false, want true; linearizable %v, violations %q", r.Linearizable, r.Violations)
	}
	if r.StaleRejected != 1 || r.Overlaps != 1 {
		t.Errorf("stale rejected, overlaps = %d, %d; want 1, 1", r.StaleRejected, r.Overlaps)
	}
}

// The same timeline without fencing: the late write is accepted and overwrites the
// newer holder's increment.
func TestCheck_StaleWriteAccepted_Reported(t *testing.T) {
	ops := []Op{
		op(0, KindAcquire, 1, "a", "", ResultOK, 0, 1),
		op(0, KindRead, 1, "a", "", ResultOK, 4, 5),
		op(1, KindAcquire, 2, "b", "", ResultOK, 10, 11),
		op(1, KindRead, 2, "b", "", ResultOK, 12, 13),
		op(1, KindWrite, 2, "b", "1:w1:1", ResultOK, 14, 15),
		op(0, KindWrite, 1, "a", "1:w0:1", ResultOK, 20, 21),
		finalRead("1:w0:1", 40),
	}
	r := mustCheck(t, ops)
	if r.OK() || !r.Found() {
		t.Fatalf("OK, Found = %v, %v; want false, true", r.OK(), r.Found())
	}
	if r.Linearizable != porcupine.Illegal {
		t.Errorf("Linearizable = %v, want Illegal", r.Linearizable)
	}
	if r.StaleAccepted != 1 {
		t.Errorf("StaleAccepted = %d, want 1", r.StaleAccepted)
	}
	if r.Lost != 1 {
		t.Errorf("Lost = %d, want 1 (two increments acknowledged, counter 1)", r.Lost)
	}
}

func TestCheck_AcknowledgedWriteLost_Reported(t *testing.T) {
	var ops []Op
	ops = append(ops, holder(0, 1, "a", "", "1:w0:1", 0)...)
	ops = append(ops, holder(1, 2, "b", "1:w0:1", "2:w1:1", 10)...)
	ops = append(ops, finalRead("1:w0:1", 30)) // the store rolled back
	r := mustCheck(t, ops)
	if r.OK() {
		t.Fatalf("OK() = true, want false")
	}
	if r.Lost < 1 {
		t.Errorf("Lost = %d, want >= 1; violations %q", r.Lost, r.Violations)
	}
	if r.Linearizable != porcupine.Illegal {
		t.Errorf("Linearizable = %v, want Illegal (final read of an overwritten value)", r.Linearizable)
	}
}

func TestCheck_RejectedWriteVisible_Reported(t *testing.T) {
	var ops []Op
	ops = append(ops, holder(1, 2, "b", "", "1:w1:1", 0)...)
	ops = append(ops,
		op(0, KindWrite, 1, "a", "1:w0:1", ResultRejected, 10, 11),
		op(1, KindRead, 2, "b", "1:w0:1", ResultOK, 12, 13),
		finalRead("1:w1:1", 20))
	r := mustCheck(t, ops)
	if r.RejectedSeen != 1 {
		t.Errorf("RejectedSeen = %d, want 1; violations %q", r.RejectedSeen, r.Violations)
	}
	if r.Linearizable != porcupine.Illegal {
		t.Errorf("Linearizable = %v, want Illegal", r.Linearizable)
	}
}

// A write refused although its fence was the highest: the guard is over-strict.
func TestCheck_AdmissibleWriteRejected_NotLinearizable(t *testing.T) {
	ops := []Op{
		op(0, KindAcquire, 1, "a", "", ResultOK, 0, 1),
		op(0, KindWrite, 1, "a", "1:w0:1", ResultRejected, 2, 3),
		finalRead("", 10),
	}
	r := mustCheck(t, ops)
	if r.Linearizable != porcupine.Illegal {
		t.Errorf("Linearizable = %v, want Illegal", r.Linearizable)
	}
}

// Equal tokens are legal only within one lease: a regressed counter handing token 1
// to a second lease must not be accepted.
func TestCheck_EqualTokenOtherLease_Reported(t *testing.T) {
	var ops []Op
	ops = append(ops, holder(0, 1, "a", "", "1:w0:1", 0)...)
	ops = append(ops, holder(1, 1, "b", "1:w0:1", "2:w1:1", 10)...)
	ops = append(ops, finalRead("2:w1:1", 30))
	r := mustCheck(t, ops)
	if r.StaleAccepted == 0 || r.Linearizable != porcupine.Illegal {
		t.Errorf("StaleAccepted, Linearizable = %d, %v; want > 0, Illegal", r.StaleAccepted, r.Linearizable)
	}
}

// A write of unknown outcome (server killed mid-request) may or may not have
// happened; both final values are legal.
func TestCheck_UnknownWrite_EitherOutcomeLegal(t *testing.T) {
	for _, final := range []string{"1:w0:1", "2:w0:1"} {
		var ops []Op
		ops = append(ops, holder(0, 1, "a", "", "1:w0:1", 0)...)
		ops = append(ops,
			op(0, KindAcquire, 2, "b", "", ResultOK, 10, 11),
			op(0, KindFence, 2, "b", "", ResultOK, 12, 13),
			op(0, KindRead, 2, "b", "1:w0:1", ResultOK, 14, 15),
			op(0, KindWrite, 2, "b", "2:w0:1", ResultUnknown, 16, 17),
			finalRead(final, 30))
		r := mustCheck(t, ops)
		if !r.OK() {
			t.Errorf("final %q: OK() = false, want true; linearizable %v, violations %q", final, r.Linearizable, r.Violations)
		}
	}
}

func TestCheck_BadResult_Error(t *testing.T) {
	_, err := Check([]Op{{Kind: KindRead, Result: "maybe"}}, CheckOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "chaos: ") {
		t.Fatalf("Check(bad result) error = %v, want a chaos: error", err)
	}
}

func TestSaveFailure_WritesHistoryAndVisualisation(t *testing.T) {
	ops := []Op{
		op(0, KindWrite, 2, "b", "1:w0:1", ResultOK, 0, 1),
		op(1, KindWrite, 1, "a", "1:w1:1", ResultOK, 2, 3),
		finalRead("1:w1:1", 10),
	}
	r := mustCheck(t, ops)
	dir := filepath.Join(t.TempDir(), "fail")
	paths, err := SaveFailure(dir, ops, r)
	if err != nil {
		t.Fatalf("SaveFailure: %v", err)
	}
	if len(paths) != 3 {
		t.Fatalf("SaveFailure wrote %q, want history.jsonl, history.html, violations.txt", paths)
	}
	back, err := ReadHistoryFile(paths[0])
	if err != nil {
		t.Fatalf("ReadHistoryFile: %v", err)
	}
	if len(back) != len(ops) || back[1] != ops[1] {
		t.Errorf("history round trip: got %d ops (%+v), want %d (%+v)", len(back), back, len(ops), ops[1])
	}
	html, err := os.ReadFile(paths[1])
	if err != nil || !strings.Contains(string(html), "<html") {
		t.Errorf("history.html: err %v, want an HTML page (%d bytes)", err, len(html))
	}
}

// A history saved by a real control run (fence chaos --fencing off --nemesis pause
// --duration 4s --workers 3 --seed 7): two stale writes accepted, two increments lost.
// Kept as a regression fixture of the checker.
func TestCheck_SavedControlRunFixture_Reported(t *testing.T) {
	ops, err := ReadHistoryFile(filepath.Join("testdata", "control-stale-write.jsonl"))
	if err != nil {
		t.Fatalf("ReadHistoryFile: %v", err)
	}
	r := mustCheck(t, ops)
	if !r.Found() || r.StaleAccepted != 2 || r.Lost != 2 || r.Linearizable != porcupine.Illegal {
		t.Errorf("Found, StaleAccepted, Lost, Linearizable = %v, %d, %d, %v; want true, 2, 2, Illegal", r.Found(), r.StaleAccepted, r.Lost, r.Linearizable)
	}
}

func TestReadHistory_MalformedLine_Error(t *testing.T) {
	_, err := ReadHistory(strings.NewReader("{\"op\":\"read\"}\nnot json\n{\"op\":\"read\"}\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("ReadHistory error = %v, want one naming line 2", err)
	}
	ops, err := ReadHistory(strings.NewReader("{\"op\":\"read\",\"result\":\"ok\"}\n{\"op\":\"wr"))
	if err != nil || len(ops) != 1 {
		t.Fatalf("ReadHistory(cut last line) = %d ops, %v; want 1, nil", len(ops), err)
	}
}

func fenceToken(n uint64) fence.Token { return fence.Token(n) }

// A write retried after an unknown outcome and then refused (a newer holder came in
// meanwhile) may have been applied by its first attempt: its value may be read
// before the refusal, so it is recorded unknown with the refusal as its end.
func TestCheck_RetriedWriteRefused_UnknownBoundedOutcomeLegal(t *testing.T) {
	var ops []Op
	ops = append(ops,
		op(0, KindAcquire, 1, "a", "", ResultOK, 0, 1),
		op(0, KindFence, 1, "a", "", ResultOK, 2, 3),
		op(0, KindRead, 1, "a", "", ResultOK, 4, 5),
		op(0, KindWrite, 1, "a", "1:w0:1", ResultUnknown, 6, 40), // first attempt applied at ~7
	)
	ops = append(ops, holder(1, 2, "b", "1:w0:1", "2:w1:1", 10)...)
	ops = append(ops, finalRead("2:w1:1", 50))
	r := mustCheck(t, ops)
	if !r.OK() {
		t.Fatalf("OK() = false, want true; linearizable %v, violations %q", r.Linearizable, r.Violations)
	}
	// The same value read after the bounded unknown write's end, with no other
	// write: impossible, since it could not take effect after its end.
	late := append([]Op(nil), ops[:4]...)
	late = append(late, finalRead("", 50))
	late[3].Return = 20
	late = append(late, op(1, KindRead, 0, "", "1:w0:1", ResultOK, 60, 61))
	if r := mustCheck(t, late); r.Linearizable != porcupine.Illegal {
		t.Errorf("value read after its unknown write ended, final read empty before it: Linearizable = %v, want Illegal", r.Linearizable)
	}
}
