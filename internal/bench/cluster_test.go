package bench

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
)

// boltClient returns a client of a bolt store of its own, closed at t's end.
func boltClient(t *testing.T) *lockerClient {
	t.Helper()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "bolt.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &lockerClient{l: s, close: func() error { return nil }}
}

// On the bolt store, whose expiry is exact, the waiter holds the lock once the
// abandoned holder's TTL has passed, and not long after.
func TestExpiry_Bolt(t *testing.T) {
	c := boltClient(t)
	d, n, err := Expiry(context.Background(), c, "x", c.Lock("x"), Budget{N: 2})
	if err != nil || n != 2 {
		t.Fatalf("Expiry = %v, %d, %v; want two rounds", d, n, err)
	}
	if d < ExpiryTTL || d > ExpiryTTL+time.Second {
		t.Errorf("Expiry median = %v; want between the TTL %v and a second more", d, ExpiryTTL)
	}
}

// releasingAbandoner claims to abandon a held lock but releases it: the waiter gets
// it before the TTL, which Expiry must report as a second holder.
type releasingAbandoner struct{ c *lockerClient }

func (a releasingAbandoner) Abandon(ctx context.Context, name string, ttl time.Duration) error {
	lease, err := a.c.l.Acquire(ctx, name, ttl)
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

func TestExpiry_WaiterBeforeTTL_Error(t *testing.T) {
	c := boltClient(t)
	_, _, err := Expiry(context.Background(), releasingAbandoner{c}, "x", c.Lock("x"), Budget{N: 1})
	if err == nil || !strings.Contains(err.Error(), "before its TTL") {
		t.Fatalf("Expiry with a holder that released: %v; want the waiter-before-TTL error", err)
	}
}

func TestParseRows_ClusterRows(t *testing.T) {
	got, err := ParseRows("cluster-rows")
	if err != nil || strings.Join(got, ",") != strings.Join(ClusterRows, ",") {
		t.Errorf("ParseRows(cluster-rows) = %v, %v; want %v", got, err, ClusterRows)
	}
	got, err = ParseRows("cluster-leader,cluster, fence-bolt,etcd3-mutex")
	if err != nil || strings.Join(got, ",") != "fence-bolt,etcd3-mutex,cluster,cluster-leader" {
		t.Errorf("ParseRows = %v, %v; want [fence-bolt etcd3-mutex cluster] in the table's order", got, err)
	}
	got, err = ParseRows("all,cluster")
	if err != nil || len(got) != len(Rows)+1 || got[len(got)-1] != RowCluster {
		t.Errorf("ParseRows(all,cluster) = %v, %v; want every default row and cluster", got, err)
	}
}

func TestStartWith_FenceRowWithoutFence_Invalid(t *testing.T) {
	for _, row := range []string{RowFenceServeEtcd3, RowCluster, RowClusterLeader} {
		if _, err := Start(context.Background(), []string{row}); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "--fence") {
			t.Errorf("Start(%s) without the fence binary: %v; want fence.ErrInvalid naming --fence", row, err)
		}
	}
}

func TestFormatTable_ExpiryColumn(t *testing.T) {
	results := []Result{
		{Row: RowFenceBolt, Pair: []time.Duration{time.Millisecond}, Handoff: []time.Duration{time.Millisecond}, PairsPerSec: []float64{900}},
		{Row: RowEtcd3Mutex, Pair: []time.Duration{time.Millisecond}, Handoff: []time.Duration{time.Millisecond}, PairsPerSec: []float64{900},
			Expiry: []time.Duration{1400 * time.Millisecond, 1200 * time.Millisecond, 1300 * time.Millisecond}},
	}
	var out strings.Builder
	if err := FormatTable(&out, results, Setup{Clients: 16, Duration: time.Second, Rounds: 3}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| handoff after expiry (TTL 1s) |\n|---|---|---|---|---|\n",
		"| fence bolt in process | 1.00 ms | 1.00 ms | 900 | - |\n",
		"| etcd concurrency.Mutex, 3 members | 1.00 ms | 1.00 ms | 900 | 1.30 s |\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table:\n%s\nwant %q", out.String(), want)
		}
	}
	r := NewReport(results, Setup{})
	if r.Rows[0].ExpiryUS != nil || r.Rows[1].ExpiryMedianUS != 1.3e6 || len(r.Rows[1].ExpiryUS) != 3 {
		t.Errorf("report rows %+v; want the expiry figures on the second row only", r.Rows)
	}
}

// A whole run of etcd's Mutex on three member processes (this test binary
// re-executed, see TestMain): every figure, and a handoff after expiry no shorter
// than the TTL.
func TestRun_Etcd3MutexRow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd")
	}
	results, err := Run(context.Background(), Config{Rows: []string{RowEtcd3Mutex}, Clients: 2, Duration: 50 * time.Millisecond, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := results[0]
	if len(r.Pair) != 1 || len(r.Handoff) != 1 || len(r.PairsPerSec) != 1 || len(r.Expiry) != 1 {
		t.Fatalf("result %+v; want one round of each of the four figures", r)
	}
	if r.PairMedian() <= 0 || r.HandoffMedian() <= 0 || r.PairsPerSecMedian() <= 0 {
		t.Errorf("result %+v; want positive figures", r)
	}
	// etcd's lessor checks every 500 ms; a few seconds more is a broken run.
	if d := r.ExpiryMedian(); d < ExpiryTTL || d > ExpiryTTL+5*time.Second {
		t.Errorf("handoff after expiry %v; want at least the TTL %v, within seconds", d, ExpiryTTL)
	}
}
