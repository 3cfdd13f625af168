package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fence"
)

// semaphoreRun is one semaphore-pause run with what the tests look at: the slot
// drawn, the paused holder and the newcomer.
type semaphoreRun struct {
	run      *Run
	permits  int
	slot     int    // the paused holder's slot
	stale    string // the paused holder
	newcomer string
}

func semaphorePauseRun(t *testing.T, fencing bool, o Options) semaphoreRun {
	t.Helper()
	run := simulate(t, "semaphore-pause", fencing, o).Runs[0]
	n := o.Workers
	if n == 0 {
		n = defaultPermits
	}
	pauses := eventsOf(run, KindPause)
	if len(pauses) != 1 {
		t.Fatalf("seed %d: want one pause, got %+v", o.Seed, pauses)
	}
	sr := semaphoreRun{run: run, permits: n, slot: -1, stale: pauses[0].Worker, newcomer: string(rune('A' + n))}
	for _, e := range eventsOf(run, KindAcquire) {
		if e.Worker == sr.stale {
			sr.slot = e.Slot
		}
	}
	return sr
}

// slotTimeline returns "T31 D acquire 4 slot 1" style lines of the acquires,
// pauses, expiries, resumes, writes and rejections.
func slotTimeline(run *Run) []string {
	var out []string
	for _, e := range run.Events {
		switch e.Kind {
		case KindAcquire, KindExpire:
			out = append(out, fmt.Sprintf("%s %s %s %d slot %d", stamp(e.At), e.Worker, e.Kind, e.Token, e.Slot))
		case KindAcquireFailed, KindPause, KindResume:
			out = append(out, fmt.Sprintf("%s %s %s", stamp(e.At), e.Worker, e.Kind))
		case KindWrite, KindReject:
			out = append(out, fmt.Sprintf("%s %s %s %s %d", stamp(e.At), e.Worker, e.Kind, e.Resource, e.Token))
		}
	}
	return out
}

func TestSemaphorePause_FollowsTheTimelineTickForTick(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		sr := semaphorePauseRun(t, fencing, Options{Seed: goldenSeed})
		stale := "T32 B write partition-1 2"
		if fencing {
			stale = "T32 B reject partition-1 2"
		}
		want := []string{
			"T0 A acquire 1 slot 0", "T0 A write partition-0 1",
			"T0 B acquire 2 slot 1", "T0 B write partition-1 2",
			"T0 C acquire 3 slot 2", "T0 C write partition-2 3",
			"T10 B pause",
			"T25 D acquire-failed",
			"T30 B expire 2 slot 1",
			"T31 D acquire 4 slot 1", "T31 D write partition-1 4",
			"T32 B resume",
			"T32 A write partition-0 1", stale, "T32 C write partition-2 3",
		}
		if got := slotTimeline(sr.run); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("fencing %v: timeline\nwant:\n%s\ngot:\n%s", fencing, strings.Join(want, "\n"), strings.Join(got, "\n"))
		}
	}
}

// Over many seeds, fencing off: the paused holder's write to its slot's partition
// lands after the slot's next holder's, whose batch is lost; nothing else is wrong.
func TestSemaphorePause_FencingOff_StaleHolderOverwritesTheSlotsNextHolder(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		sr := semaphorePauseRun(t, false, Options{Seed: seed})
		k, next := sr.slot, fence.Token(sr.permits+1)
		part := partition(k)
		if len(sr.run.Violations) != 1 {
			t.Fatalf("seed %d: want one violation, got %v", seed, sr.run.Violations)
		}
		v := sr.run.Violations[0]
		if v.Write.Resource != part || v.Write.Worker != sr.stale || v.Write.Token != fence.Token(k+1) || v.Prev.Worker != sr.newcomer || v.Prev.Token != next {
			t.Errorf("seed %d: want %s's token %d on %q after %s's token %d, got %v", seed, sr.stale, k+1, part, sr.newcomer, next, v)
		}
		if w, _ := finalValue(sr.run, part); w.Worker != sr.stale {
			t.Errorf("seed %d: %q ends with %+v, want the stale holder %s's write", seed, part, w, sr.stale)
		}
		if out := strings.Join(sr.run.Outcome, "\n"); !strings.Contains(out, fmt.Sprintf("LOST: %q = %q", part, sr.newcomer+"'s batch 1")) {
			t.Errorf("seed %d: outcome should report %s's batch on %q lost, got:\n%s", seed, sr.newcomer, part, out)
		}
		if rejects := eventsOf(sr.run, KindReject); len(rejects) != 0 {
			t.Errorf("seed %d, fencing off: want no rejection, got %+v", seed, rejects)
		}
	}
}

// Over many seeds, fencing on: the guard of the paused holder's partition refuses
// its token, and only that write; the other partitions take their holders' tokens,
// lower than the newcomer's, since each keeps its own highest.
func TestSemaphorePause_FencingOn_OnlyTheStaleWriteIsRefused(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		sr := semaphorePauseRun(t, true, Options{Seed: seed})
		k, next := sr.slot, fence.Token(sr.permits+1)
		rejects := eventsOf(sr.run, KindReject)
		if len(rejects) != 1 {
			t.Fatalf("seed %d: want one rejection, got %+v", seed, rejects)
		}
		r := rejects[0]
		want := fmt.Sprintf("fence: stale token %d for %q, highest seen %d", k+1, partition(k), next)
		if r.Worker != sr.stale || r.At != T(32) || r.Resource != partition(k) || !strings.Contains(r.Err, want) {
			t.Errorf("seed %d: rejection: want %s at T32 on %q with %q, got %s %s %q err=%q", seed, sr.stale, partition(k), want, r.Worker, stamp(r.At), r.Resource, r.Err)
		}
		if len(sr.run.Violations) != 0 {
			t.Errorf("seed %d: violations with fencing on: want none, got %v", seed, sr.run.Violations)
		}
		for slot := 0; slot < sr.permits; slot++ {
			w, ok := finalValue(sr.run, partition(slot))
			switch {
			case !ok:
				t.Errorf("seed %d: %q was never written", seed, partition(slot))
			case slot == k && (w.Worker != sr.newcomer || w.Token != next):
				t.Errorf("seed %d: %q ends with %+v, want %s's token %d", seed, partition(slot), w, sr.newcomer, next)
			case slot != k && (w.Token != fence.Token(slot+1) || w.Value != w.Worker+"'s batch 2"):
				t.Errorf("seed %d: %q ends with %+v, want its holder's second batch with token %d", seed, partition(slot), w, slot+1)
			}
		}
	}
}

// The seed draws the paused slot: the same seed gives the same bytes, and seeds
// cover every slot.
func TestSemaphorePause_TheSeedPicksTheSlot(t *testing.T) {
	text := func(seed uint64) string {
		var buf bytes.Buffer
		if err := WriteText(&buf, simulate(t, "semaphore-pause", false, Options{Seed: seed})); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	if a, b := text(11), text(11); a != b {
		t.Errorf("seed 11 twice: outputs differ:\n%s", firstDiff([]byte(a), []byte(b)))
	}
	slots := make([]bool, defaultPermits)
	for seed := uint64(1); seed <= 30; seed++ {
		sr := semaphorePauseRun(t, false, Options{Seed: seed})
		if sr.slot < 0 || sr.slot >= defaultPermits {
			t.Fatalf("seed %d: the paused holder %s has slot %d, want one in [0, %d)", seed, sr.stale, sr.slot, defaultPermits)
		}
		slots[sr.slot] = true
	}
	for k, seen := range slots {
		if !seen {
			t.Errorf("no seed in 1..30 pauses the holder of slot %d", k)
		}
	}
}

// The permits come from Options.Workers: the semaphore never has more live leases
// than permits, nor two live leases on one slot, and the story holds at both ends of
// the range.
func TestSemaphorePause_PermitsFromWorkers(t *testing.T) {
	for _, n := range []int{2, 25} {
		for _, fencing := range []bool{false, true} {
			sr := semaphorePauseRun(t, fencing, Options{Seed: 3, Workers: n})
			if len(sr.run.Workers) != n+1 {
				t.Errorf("%d permits: want %d workers, got %v", n, n+1, sr.run.Workers)
			}
			rejected := len(eventsOf(sr.run, KindReject))
			if fencing && (rejected != 1 || len(sr.run.Violations) != 0) || !fencing && (rejected != 0 || len(sr.run.Violations) != 1) {
				t.Errorf("%d permits, fencing %v: %d rejected, violations %v", n, fencing, rejected, sr.run.Violations)
			}
			for at := T(0); at <= sr.run.End; at += Tick {
				live, slots := 0, make(map[int]string) // lookup only
				for _, sp := range sr.run.Leases {
					if sp.Start <= at && at < sp.End {
						live++
						if other, dup := slots[sp.Slot]; dup {
							t.Errorf("%d permits, %s: leases %s and %s both live on slot %d", n, stamp(at), other, sp.Lease, sp.Slot)
						}
						slots[sp.Slot] = sp.Lease
					}
				}
				if live > n {
					t.Errorf("%d permits, %s: %d live leases", n, stamp(at), live)
				}
			}
		}
	}
	for _, n := range []int{1, 26} {
		if _, err := Simulate("semaphore-pause", true, Options{Workers: n}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%d permits: want fence.ErrInvalid, got %v", n, err)
		}
	}
}

// JSON gives a permit's limit and slot (slot 0 included) on its events and lease
// spans, and a lock's events and leases none.
func TestWriteJSON_PermitsCarryLimitAndSlot(t *testing.T) {
	decode := func(name string) map[string]any {
		var buf bytes.Buffer
		if err := WriteJSON(&buf, simulate(t, name, true, Options{Seed: goldenSeed})); err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		return v["runs"].([]any)[0].(map[string]any)
	}
	run := decode("semaphore-pause")
	first := run["events"].([]any)[0].(map[string]any)
	if first["kind"] != "acquire" || first["limit"] != 3.0 || first["slot"] != 0.0 {
		t.Errorf("first event: want an acquire with limit 3 and slot 0, got %v", first)
	}
	lease := run["leases"].([]any)[0].(map[string]any)
	if lease["limit"] != 3.0 || lease["slot"] != 0.0 || lease["label"] != "lease A1 token 1 slot 0" {
		t.Errorf("first lease: want limit 3, slot 0, got %v", lease)
	}
	lock := decode("pause-past-ttl")
	for _, key := range []string{"events", "leases"} {
		for _, x := range lock[key].([]any) {
			m := x.(map[string]any)
			if _, ok := m["slot"]; ok {
				t.Errorf("pause-past-ttl %s: a lock's has a slot: %v", key, m)
			}
			if _, ok := m["limit"]; ok {
				t.Errorf("pause-past-ttl %s: a lock's has a limit: %v", key, m)
			}
		}
	}
}
