package bench

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// chanLock is an exclusive lock in memory, shared by its handles: a token in a
// channel of one. grantDelay delays a waiting Acquire after the lock became free.
type chanLock struct {
	free       chan struct{}
	grantDelay time.Duration
	acquires   atomic.Int64
}

func newChanLock() *chanLock {
	l := &chanLock{free: make(chan struct{}, 1)}
	l.free <- struct{}{}
	return l
}

func (l *chanLock) Acquire(ctx context.Context, wait bool) error {
	if !wait {
		select {
		case <-l.free:
			l.acquires.Add(1)
			return nil
		default:
			return fence.ErrNotAcquired
		}
	}
	select {
	case <-l.free:
		time.Sleep(l.grantDelay)
		l.acquires.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *chanLock) Release(context.Context) error {
	select {
	case l.free <- struct{}{}:
		return nil
	default:
		return fence.ErrNotHeld
	}
}

// openLock grants every Acquire: a lock that does not exclude.
type openLock struct{}

func (openLock) Acquire(context.Context, bool) error { return nil }
func (openLock) Release(context.Context) error       { return nil }

// failingLock fails its Acquires after ok successful ones.
type failingLock struct{ ok atomic.Int64 }

func (l *failingLock) Acquire(context.Context, bool) error {
	if l.ok.Add(-1) < 0 {
		return errors.New("injected failure")
	}
	return nil
}
func (l *failingLock) Release(context.Context) error { return nil }

func TestPair_StopsAtN(t *testing.T) {
	l := newChanLock()
	d, n, err := Pair(context.Background(), l, Budget{N: 50})
	if err != nil || n != 50 || d <= 0 {
		t.Fatalf("Pair = %v, %d, %v; want a positive median of 50 pairs", d, n, err)
	}
	if got := l.acquires.Load(); got != 51 { // and the warm-up
		t.Errorf("%d acquires, want 51", got)
	}
}

func TestPair_StopsAtDuration(t *testing.T) {
	start := time.Now()
	_, n, err := Pair(context.Background(), newChanLock(), Budget{D: 20 * time.Millisecond})
	if err != nil || n < 1 {
		t.Fatalf("Pair = %d pairs, %v; want at least one", n, err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Errorf("Pair returned after %v, before its 20ms", el)
	}
}

func TestPair_Error(t *testing.T) {
	l := &failingLock{}
	l.ok.Store(3)
	if _, _, err := Pair(context.Background(), l, Budget{N: 10}); err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Pair of a failing lock: %v, want the injected failure", err)
	}
}

func TestHandoff_MeasuresReleaseToGrant(t *testing.T) {
	l := newChanLock()
	l.grantDelay = 5 * time.Millisecond
	d, n, err := Handoff(context.Background(), l, l, Budget{N: 3})
	if err != nil || n != 3 {
		t.Fatalf("Handoff = %v, %d, %v; want 3 rounds", d, n, err)
	}
	if d < l.grantDelay {
		t.Errorf("median handoff %v, want at least the grant's delay %v", d, l.grantDelay)
	}
	// Each round: the holder's acquire and the waiter's.
	if got := l.acquires.Load(); got != 6 {
		t.Errorf("%d acquires, want 6", got)
	}
}

func TestHandoff_WaiterNotExcluded_Fails(t *testing.T) {
	_, _, err := Handoff(context.Background(), openLock{}, openLock{}, Budget{N: 1})
	if err == nil || !strings.Contains(err.Error(), "while the holder held it") {
		t.Fatalf("Handoff of a lock that does not exclude: %v, want an error", err)
	}
}

func TestThroughput_CountsEveryPair(t *testing.T) {
	locks := []*chanLock{newChanLock(), newChanLock(), newChanLock()}
	ls := []Lock{locks[0], locks[1], locks[2]}
	perSec, n, err := Throughput(context.Background(), ls, Budget{N: 300})
	if err != nil || n != 300 || perSec <= 0 {
		t.Fatalf("Throughput = %v, %d, %v; want a positive rate of 300 pairs", perSec, n, err)
	}
	var total int64
	for _, l := range locks {
		total += l.acquires.Load()
	}
	if total != 300+3 { // and a warm-up each
		t.Errorf("%d acquires, want 303", total)
	}
}

func TestThroughput_StopsAtDuration(t *testing.T) {
	_, n, err := Throughput(context.Background(), []Lock{newChanLock(), newChanLock()}, Budget{D: 20 * time.Millisecond})
	if err != nil || n < 1 {
		t.Fatalf("Throughput = %d pairs, %v; want at least one", n, err)
	}
}

func TestThroughput_Error(t *testing.T) {
	bad := &failingLock{}
	bad.ok.Store(1) // the warm-up's acquire
	_, _, err := Throughput(context.Background(), []Lock{newChanLock(), bad}, Budget{D: time.Second})
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Throughput with a failing lock: %v, want the injected failure", err)
	}
	if _, _, err := Throughput(context.Background(), nil, Budget{N: 1}); err == nil {
		t.Fatal("Throughput of no locks: want an error")
	}
}

func TestParseRows(t *testing.T) {
	for _, in := range []string{"", "all", " all "} {
		if got, err := ParseRows(in); err != nil || strings.Join(got, ",") != strings.Join(Rows, ",") {
			t.Errorf("ParseRows(%q) = %v, %v; want every row", in, got, err)
		}
	}
	got, err := ParseRows("fence-bolt, redislock,fence-bolt")
	if err != nil || strings.Join(got, ",") != "redislock,fence-bolt" {
		t.Errorf("ParseRows = %v, %v; want [redislock fence-bolt] in the table's order", got, err)
	}
	for _, in := range []string{"fence-mysql", ",", "redislock,nope"} {
		if _, err := ParseRows(in); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("ParseRows(%q): %v, want fence.ErrInvalid", in, err)
		}
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		950 * time.Nanosecond:   "0.95 us",
		113 * time.Microsecond:  "113 us",
		8300 * time.Microsecond: "8.30 ms",
		144 * time.Millisecond:  "144 ms",
		1500 * time.Millisecond: "1.50 s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for v, want := range map[float64]string{850: "850", 43210: "43.2k", 1.21e6: "1.21M", 2.5: "2.50"} {
		if got := FormatRate(v); got != want {
			t.Errorf("FormatRate(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestRun_BadConfig(t *testing.T) {
	for _, cfg := range []Config{{Rows: []string{"nope"}}, {Clients: -1}, {Rounds: -2}} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Run(%+v): %v, want fence.ErrInvalid", cfg, err)
		}
	}
}

// The in-process row needs no outside server: a whole run of it, two rounds.
func TestRun_BoltRow(t *testing.T) {
	var steps []Progress
	results, err := Run(context.Background(), Config{Rows: []string{RowFenceBolt}, Clients: 2, Duration: 30 * time.Millisecond, Rounds: 2,
		Progress: func(p Progress) { steps = append(steps, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Row != RowFenceBolt {
		t.Fatalf("results = %+v; want the one row", results)
	}
	r := results[0]
	if len(r.Pair) != 2 || len(r.Handoff) != 2 || len(r.PairsPerSec) != 2 {
		t.Fatalf("result %+v; want two rounds of each figure", r)
	}
	if r.PairMedian() <= 0 || r.HandoffMedian() <= 0 || r.PairsPerSecMedian() <= 0 {
		t.Errorf("result %+v; want positive figures", r)
	}
	if len(steps) != 6 || steps[5].Step != 6 || steps[5].Steps != 6 || steps[5].Round != 2 {
		t.Errorf("progress %+v; want 6 steps over 2 rounds", steps)
	}
	var out strings.Builder
	if err := FormatTable(&out, results, Setup{Clients: 2, Duration: 30 * time.Millisecond, Rounds: 2, CPUs: 2, LoadFrom: 1.5, LoadTo: 2.25}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| fence bolt in process | ") || !strings.Contains(out.String(), "pairs/s at 2 clients") ||
		!strings.Contains(out.String(), "; 2 CPUs, load average 1.5 at the start, 2.2 at the end") {
		t.Errorf("table:\n%s\nwant the row and the clients' column", out.String())
	}
}
