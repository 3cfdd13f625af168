package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
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
// latency ratio at most 1). store=bolt/peer=redislock-aof compares the durable
// store with redislock on a second redis-server that, like it, has every write
// on disk before it answers (appendonly yes, appendfsync always, its file on
// the same file system). On a machine other processes keep busy those swing
// with the load; the CPU time per pair of each system's processes (this
// process for fence, client and server; this process and redis-server for
// redislock) and its ratio hold steadier:
//
//	go test -run '^$' -bench VsRedislock -benchtime 10x ./fencehttp/bench/
func BenchmarkVsRedislock(b *testing.B) {
	servertest.SkipIfShort(b)
	rs := servertest.Redis(b)
	rc := goredis.NewClient(&goredis.Options{Addr: rs.Addr})
	b.Cleanup(func() { _ = rc.Close() })
	rl := redislock.New(rc)
	for _, store := range []struct {
		name string
		opts *bolt.Options
		h2c  bool
	}{
		{"bolt", nil, false}, // as fence serve runs it: every grant and release on disk before its answer
		{"bolt-nosync", &bolt.Options{NoSync: true}, false}, // the HTTP layer's cost, without the disk's
		// HTTP/2 without TLS, every client's requests multiplexed on one connection.
		{"bolt-nosync/proto=h2c", &bolt.Options{NoSync: true}, true},
	} {
		b.Run("store="+store.name, func(b *testing.B) {
			var configure func(*http.Server)
			var copts *fencehttp.ClientOptions
			if store.h2c {
				configure = func(hs *http.Server) {
					hs.Protocols = new(http.Protocols)
					hs.Protocols.SetHTTP1(true)
					hs.Protocols.SetUnencryptedHTTP2(true)
				}
				copts = &fencehttp.ClientOptions{H2C: true}
			}
			_, base := fenceServerOn(b, store.opts, configure)
			fc, err := fencehttp.NewClient(base, copts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(fc.CloseIdleConnections)
			vsRedislock(b, fc, rl, redisPid(b, rs))
		})
	}
	b.Run("store=bolt/peer=redislock-aof", func(b *testing.B) {
		aof := servertest.Redis(b, "--appendonly", "yes", "--appendfsync", "always")
		ac := goredis.NewClient(&goredis.Options{Addr: aof.Addr})
		b.Cleanup(func() { _ = ac.Close() })
		_, base := fenceServerOn(b, nil, nil)
		fc, err := fencehttp.NewClient(base, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(fc.CloseIdleConnections)
		vsRedislock(b, fc, redislock.New(ac), redisPid(b, aof))
	})
}

// vsRedislock runs the rounds of BenchmarkVsRedislock with fc and rl, whose
// redis-server has process id pid.
func vsRedislock(b *testing.B, fc *fencehttp.Client, rl *redislock.Client, pid int) {
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
		cpu  func() time.Duration // CPU time used so far by the system's processes
	}{
		{"fence", fencePair, selfCPU}, // client and server
		{"redislock", redisPair, func() time.Duration { return selfCPU() + procCPU(b, pid) }}, // client, redis-server
	}
	// Warm up: connections, the script cache, the store's pages.
	for _, s := range systems {
		if _, err := runPhase(s.name, s.pair, s.cpu, vsRedislockClients, 200*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	rates := make([][]float64, len(systems))
	medians := make([][]float64, len(systems))
	cpus := make([][]float64, len(systems))
	var rateRatios, latRatios, cpuRatios []float64
	b.ResetTimer()
	for round := range b.N {
		var got [2]phaseResult
		for k := range systems {
			i := (k + round) % len(systems) // alternate the order
			r, err := runPhase(systems[i].name, systems[i].pair, systems[i].cpu, vsRedislockClients, vsRedislockPhase)
			if err != nil {
				b.Fatal(err)
			}
			got[i] = r
			rates[i] = append(rates[i], r.rate)
			medians[i] = append(medians[i], r.median)
			cpus[i] = append(cpus[i], r.cpu)
		}
		rateRatios = append(rateRatios, got[0].rate/got[1].rate)
		latRatios = append(latRatios, got[0].median/got[1].median)
		cpuRatios = append(cpuRatios, got[0].cpu/got[1].cpu)
	}
	b.StopTimer()
	for i, s := range systems {
		b.ReportMetric(median(rates[i]), s.name+"-pairs/s")
		b.ReportMetric(median(medians[i]), s.name+"-median-us")
		b.ReportMetric(median(cpus[i]), s.name+"-cpu-us/pair")
	}
	b.ReportMetric(median(rateRatios), "ratio-pairs/s")
	b.ReportMetric(median(latRatios), "ratio-median")
	b.ReportMetric(median(cpuRatios), "ratio-cpu/pair")
}

// phaseResult is one system's figures in one round.
type phaseResult struct {
	rate   float64 // pairs/s
	median float64 // median pair latency, microseconds
	cpu    float64 // CPU time of the system's processes per pair, microseconds
}

// runPhase runs pair on n goroutines, each on its own name, for d, and returns
// the pairs/s, the median pair latency and the CPU time (by cpu) per pair. Every
// goroutine stops at d, or at its first error, which runPhase returns.
func runPhase(system string, pair func(name string) error, cpu func() time.Duration, n int, d time.Duration) (phaseResult, error) {
	var wg sync.WaitGroup
	cpu0 := cpu()
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
	cpuUsed := cpu() - cpu0
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
		cpu:    float64(cpuUsed.Nanoseconds()) / 1000 / float64(len(all)),
	}, nil
}

// selfCPU returns the user and system CPU time of this process so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err) // RUSAGE_SELF with a valid pointer cannot fail
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU returns the user and system CPU time of process pid so far, from
// /proc/PID/stat (in clock ticks of 10ms).
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	const tick = 10 * time.Millisecond // USER_HZ on Linux
	return time.Duration(utime+stime) * tick
}

// redisPid returns the process id of rs, as its INFO reports it.
func redisPid(b *testing.B, rs *servers.Redis) int {
	info, err := rs.Do("INFO", "server")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				break
			}
			return pid
		}
	}
	b.Fatalf("redis INFO server without process_id: %q", info)
	return 0
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
