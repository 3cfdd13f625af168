package bench_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/testserv"
)

// vsRedislockClients is the figure: 16 clients, each on its own name.
const vsRedislockClients = 16

// vsRedislockPhase is how long each system runs in one round.
const vsRedislockPhase = 500 * time.Millisecond

// BenchmarkVsRedislock measures acquire+release pairs through the Go client of
// `fence serve` (fencehttp.Client, one shared by 16 goroutines, the server's
// handler on the embedded bolt store in this process on a free port) against
// bsm/redislock (one go-redis client shared by 16 goroutines) on a throwaway
// redis-server (no persistence), each goroutine on its own name. store=bolt is
// the store as fence serve opens it (each grant and release fsynced before its
// answer, in group commits); store=bolt-nosync skips the fsync, leaving the cost
// of HTTP, JSON and the client, which is what this benchmark guards. One iteration is one round: each
// system runs 500ms, the order alternating from round to round, so load from
// elsewhere on the machine hits both alike. It reports, as medians over the
// rounds, each system's pairs/s and median pair latency, and the ratios
// fence/redislock of both (the target: pairs/s ratio at least 0.6,
// latency ratio at most 1):
//
//	go test -run '^$' -bench VsRedislock -benchtime 10x ./fencehttp/bench/
func BenchmarkVsRedislock(b *testing.B) {
	testserv.SkipIfShort(b)
	rs := testserv.Redis(b)
	rc := goredis.NewClient(&goredis.Options{Addr: rs.Addr})
	b.Cleanup(func() { _ = rc.Close() })
	rl := redislock.New(rc)
	for _, store := range []struct {
		name string
		opts *bolt.Options
	}{
		{"bolt", nil}, // as fence serve runs it: every grant and release on disk before its answer
		{"bolt-nosync", &bolt.Options{NoSync: true}}, // the HTTP layer's cost, without the disk's
	} {
		b.Run("store="+store.name, func(b *testing.B) {
			_, base := fenceServerOn(b, store.opts)
			fc, err := fencehttp.NewClient(base, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(fc.CloseIdleConnections)
			vsRedislock(b, fc, rl)
		})
	}
}

// vsRedislock runs the rounds of BenchmarkVsRedislock with fc and rl.
func vsRedislock(b *testing.B, fc *fencehttp.Client, rl *redislock.Client) {
	ctx := context.Background()
	fencePair := func(name string) error {
		l, err := fc.Acquire(ctx, name, 30*time.Second)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	redisPair := func(name string) error {
		l, err := rl.Obtain(ctx, name, 30*time.Second, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	systems := []struct {
		name string
		pair func(name string) error
	}{{"fence", fencePair}, {"redislock", redisPair}}
	// Warm up: connections, the script cache, the store's pages.
	for _, s := range systems {
		if _, err := runPhase(s.name, s.pair, vsRedislockClients, 200*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	rates := make([][]float64, len(systems))
	medians := make([][]float64, len(systems))
	var rateRatios, latRatios []float64
	b.ResetTimer()
	for round := range b.N {
		var got [2]phaseResult
		for k := range systems {
			i := (k + round) % len(systems) // alternate the order
			r, err := runPhase(systems[i].name, systems[i].pair, vsRedislockClients, vsRedislockPhase)
			if err != nil {
				b.Fatal(err)
			}
			got[i] = r
			rates[i] = append(rates[i], r.rate)
			medians[i] = append(medians[i], r.median)
		}
		rateRatios = append(rateRatios, got[0].rate/got[1].rate)
		latRatios = append(latRatios, got[0].median/got[1].median)
	}
	b.StopTimer()
	for i, s := range systems {
		b.ReportMetric(median(rates[i]), s.name+"-pairs/s")
		b.ReportMetric(median(medians[i]), s.name+"-median-us")
	}
	b.ReportMetric(median(rateRatios), "ratio-pairs/s")
	b.ReportMetric(median(latRatios), "ratio-median")
}

// phaseResult is one system's figures in one round.
type phaseResult struct {
	rate   float64 // pairs/s
	median float64 // median pair latency, microseconds
}

// runPhase runs pair on n goroutines, each on its own name, for d, and returns
// the pairs/s and the median pair latency. Every goroutine stops at d, or at its
// first error, which runPhase returns.
func runPhase(system string, pair func(name string) error, n int, d time.Duration) (phaseResult, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, n)
	errs := make([]error, n)
	start := time.Now()
	deadline := start.Add(d)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("vs/%s/%d", system, i)
			samples := make([]time.Duration, 0, 4096)
			for t0 := time.Now(); t0.Before(deadline); {
				if err := pair(name); err != nil {
					errs[i] = fmt.Errorf("%s: %w", system, err)
					break
				}
				t1 := time.Now()
				samples = append(samples, t1.Sub(t0))
				t0 = t1
			}
			lat[i] = samples
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for i := range n {
		if errs[i] != nil {
			return phaseResult{}, errs[i]
		}
		all = append(all, lat[i]...)
	}
	if len(all) == 0 {
		return phaseResult{}, fmt.Errorf("%s: no pair completed in %v", system, d)
	}
	slices.Sort(all)
	return phaseResult{
		rate:   float64(len(all)) / elapsed.Seconds(),
		median: float64(all[len(all)/2].Nanoseconds()) / 1000,
	}, nil
}

// median returns the median of xs (not empty), the mean of the middle two for an
// even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
