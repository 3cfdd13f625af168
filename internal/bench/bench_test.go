package bench

// The benchmarks run the measurements of `fence-bench` (Pair, Handoff, Throughput
// on the rows' clients of one Env), one sub-benchmark per row, so their figures
// and the command's agree:
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/bench/
//	go test -run '^$' -bench 'Pairs/row=fence-redis' ./internal/bench/
//
// Sub-benchmarks run one after another, so on a busy machine their figures drift
// with the load; `fence-bench` interleaves the rows round by round and is the
// figure to compare rows by.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// shared is the package's one Env with every row's servers, started by the first
// benchmark that needs it and closed by TestMain.
var shared struct {
	once sync.Once
	env  *Env
	err  error
}

func TestMain(m *testing.M) {
	MemberMain() // the three-member etcd's members are this binary re-executed
	code := m.Run()
	if shared.env != nil {
		if err := shared.env.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the bench servers:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedEnv returns the package's Env, failing b if its servers do not start.
func sharedEnv(b *testing.B) *Env {
	b.Helper()
	shared.once.Do(func() { shared.env, shared.err = Start(context.Background(), Rows) })
	if shared.err != nil {
		b.Fatal(shared.err)
	}
	return shared.env
}

// benchClients returns n new clients of row on env, closed at b's end.
func benchClients(b *testing.B, env *Env, row string, n int) []Client {
	b.Helper()
	cs := make([]Client, n)
	for i := range cs {
		c, err := env.NewClient(row)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

// BenchmarkPair reports each row's median uncontended acquire+release pair
// (median-us) over b.N pairs.
func BenchmarkPair(b *testing.B) {
	benchMedians(b, 1, func(b *testing.B, cs []Client) (time.Duration, int, error) {
		return Pair(context.Background(), cs[0].Lock(fmt.Sprintf("bench-pair-%d", b.N)), Budget{N: b.N})
	})
}

// BenchmarkHandoff reports each row's median handoff (median-us) over b.N
// rounds; ns/op includes the waiter's BlockDelay and is not the figure to read.
//
//	go test -run '^$' -bench Handoff -benchtime 20x ./internal/bench/
func BenchmarkHandoff(b *testing.B) {
	benchMedians(b, 2, func(b *testing.B, cs []Client) (time.Duration, int, error) {
		name := fmt.Sprintf("bench-handoff-%d", b.N)
		return Handoff(context.Background(), cs[0].Lock(name), cs[1].Lock(name), Budget{N: b.N})
	})
}

// benchMedians runs measure, on n new clients of each row, in a sub-benchmark
// per row, and reports the median it returns (median-us); measure must take b.N
// samples.
func benchMedians(b *testing.B, n int, measure func(b *testing.B, cs []Client) (time.Duration, int, error)) {
	env := sharedEnv(b)
	for _, row := range Rows {
		b.Run("row="+row, func(b *testing.B) {
			cs := benchClients(b, env, row, n)
			b.ResetTimer()
			d, got, err := measure(b, cs)
			if err != nil {
				b.Fatal(err)
			}
			if got != b.N {
				b.Fatalf("measured %d samples, want b.N = %d", got, b.N)
			}
			b.ReportMetric(us(d), "median-us")
		})
	}
}

// BenchmarkPairs reports each row's pairs/s of 1 and 16 clients, each on a name
// of its own, b.N pairs in all.
func BenchmarkPairs(b *testing.B) {
	env := sharedEnv(b)
	for _, row := range Rows {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("row=%s/clients=%d", row, clients), func(b *testing.B) {
				cs := benchClients(b, env, row, clients)
				locks := make([]Lock, clients)
				for i, c := range cs {
					locks[i] = c.Lock(fmt.Sprintf("bench-pairs-%d-%d-%d", clients, b.N, i))
				}
				b.ResetTimer()
				perSec, n, err := Throughput(context.Background(), locks, Budget{N: b.N})
				if err != nil {
					b.Fatal(err)
				}
				if n != b.N {
					b.Fatalf("measured %d pairs, want b.N = %d", n, b.N)
				}
				b.ReportMetric(perSec, "pairs/s")
			})
		}
	}
}

// BenchmarkTable runs the command's table, every row interleaved, with rounds
// of 500ms per measurement, b.N rounds, and reports each row's medians over
// them: ROW-pair-us, ROW-handoff-us and ROW-pairs/s (16 clients).
//
//	go test -run '^$' -bench Table -benchtime 3x ./internal/bench/
func BenchmarkTable(b *testing.B) {
	results, err := Run(context.Background(), Config{Clients: 16, Duration: 500 * time.Millisecond, Rounds: b.N})
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range results {
		b.ReportMetric(us(r.PairMedian()), r.Row+"-pair-us")
		b.ReportMetric(us(r.HandoffMedian()), r.Row+"-handoff-us")
		b.ReportMetric(r.PairsPerSecMedian(), r.Row+"-pairs/s")
	}
}
