package redis

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"
)

// parallelClients is how many goroutines BenchmarkAcquireReleaseParallel runs per
// library, each on its own lock name: the "16 clients on distinct names" of the
// throughput target.
const parallelClients = 16

// parallelPairs is how many acquire+release pairs each client runs per round.
const parallelPairs = 64

// BenchmarkAcquireReleaseParallel measures throughput: parallelClients goroutines,
// each acquiring and releasing its own lock name, on the package's one
// redis-server. Each iteration is one round per library, in a shuffled order (so
// load from other processes hits them alike), fence and bsm/redislock each on its
// own go-redis client with default options; a round is parallelClients x
// parallelPairs pairs. It reports each library's pairs/s over its rounds' wall time,
// its median pair latency (p50-us, over every pair), the CPU time a pair costs
// the server and this process (server-cpu-us/pair, client-cpu-us/pair: less
// sensitive to other load than the rates), and fence/redislock of the rates and
// latencies:
//
//	go test -run '^$' -bench AcquireReleaseParallel -benchtime 200x -count 5 ./redis/
//
// pairs/s ratio above 1 and p50 ratio below 1 mean fence is ahead.
func BenchmarkAcquireReleaseParallel(b *testing.B) { benchParallel(b, false) }

// BenchmarkAcquireReleaseSeparate is BenchmarkAcquireReleaseParallel with each of
// the parallelClients goroutines on a go-redis client and a Locker (or
// redislock client) of its own, as separate processes would be: nothing is
// batched, so it measures what one call costs client and server (the
// server-cpu-us/pair and client-cpu-us/pair figures are the steadiest on a
// loaded machine), as `go run ./cmd/fence-bench` does with its default 16 clients:
//
//	go test -run '^$' -bench AcquireReleaseSeparate -benchtime 100x -count 5 ./redis/
func BenchmarkAcquireReleaseSeparate(b *testing.B) { benchParallel(b, true) }

// benchParallel runs the two benchmarks above: with separate, each client its
// own go-redis client and Locker or redislock client; without, one of each.
func benchParallel(b *testing.B, separate bool) {
	s := server(b)
	ctx := context.Background()
	lockers := make([]*Locker, parallelClients)
	rls := make([]*redislock.Client, parallelClients)
	for c := range parallelClients {
		if c > 0 && !separate {
			lockers[c], rls[c] = lockers[0], rls[0]
			continue
		}
		fl, err := NewLocker(newClient(b, s.Addr), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer fl.Close()
		lockers[c], rls[c] = fl, redislock.New(newClient(b, s.Addr))
	}
	admin := newClient(b, s.Addr) // reads the server's command statistics

	type peer struct {
		name string
		pair func(c int, name string) error // c: the client
	}
	peers := []peer{
		{"fence", func(c int, name string) error {
			lease, err := lockers[c].Acquire(ctx, name, 10*time.Second)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
		{"redislock", func(c int, name string) error {
			lock, err := rls[c].Obtain(ctx, name, 10*time.Second, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
	}
	names := make([][]string, len(peers))
	for k, p := range peers {
		for c := range parallelClients {
			names[k] = append(names[k], fmt.Sprintf("bench-par-%s-%d", p.name, c))
		}
	}
	// round runs one round of peer k and returns its wall time; lat gets every
	// pair's latency.
	lat := make([][]time.Duration, len(peers))
	round := func(k int) (time.Duration, error) {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		per := make([][]time.Duration, parallelClients)
		start := time.Now()
		for c := range parallelClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds := make([]time.Duration, 0, parallelPairs)
				for range parallelPairs {
					t := time.Now()
					if err := peers[k].pair(c, names[k][c]); err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
						return
					}
					ds = append(ds, time.Since(t))
				}
				per[c] = ds
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		for _, ds := range per {
			lat[k] = append(lat[k], ds...)
		}
		return wall, first
	}
	for k := range peers { // warm up: connections, script cache
		if _, err := round(k); err != nil {
			b.Fatal(err)
		}
		lat[k] = lat[k][:0]
	}
	wall := make([]time.Duration, len(peers))
	server := make([]time.Duration, len(peers)) // the server's CPU time
	client := make([]time.Duration, len(peers)) // this process's CPU time
	order := []int{0, 1}
	rng := rand.New(rand.NewPCG(7, 8))
	b.ResetTimer()
	for range b.N {
		rng.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
		for _, k := range order {
			before, err := serverCPU(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			self := processCPU(b)
			d, err := round(k)
			client[k] += processCPU(b) - self
			if err != nil {
				b.Fatal(err)
			}
			wall[k] += d
			after, err := serverCPU(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			server[k] += after - before
		}
	}
	b.StopTimer()
	pairs := float64(b.N * parallelClients * parallelPairs)
	rate := make([]float64, len(peers))
	p50 := make([]float64, len(peers))
	for k, p := range peers {
		rate[k] = pairs / wall[k].Seconds()
		slices.Sort(lat[k])
		p50[k] = float64(lat[k][len(lat[k])/2].Nanoseconds()) / 1e3
		b.ReportMetric(rate[k], p.name+"-pairs/s")
		b.ReportMetric(p50[k], p.name+"-p50-us")
		b.ReportMetric(float64(server[k].Nanoseconds())/1e3/pairs, p.name+"-server-cpu-us/pair")
		b.ReportMetric(float64(client[k].Nanoseconds())/1e3/pairs, p.name+"-client-cpu-us/pair")
	}
	b.ReportMetric(rate[0]/rate[1], "fence/redislock-pairs/s")
	b.ReportMetric(p50[0]/p50[1], "fence/redislock-p50")
}

// processCPU returns the CPU time (user and system) this process has used. Only
// one library runs at a time, so a round's difference is that library's client
// side (and the benchmark's own loop, alike for both). With the server's, it is
// what a pair costs the machine, which decides the pairs/s on an idle one: on 2
// cores the client and redis-server share the CPU.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time (user and system) the server process has used:
// INFO cpu's used_cpu_user and used_cpu_sys.
func serverCPU(ctx context.Context, c *goredis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu line %q: %w", line, err)
		}
		total += time.Duration(f * 1e9)
	}
	return total, nil
}
