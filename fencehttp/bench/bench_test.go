package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/watchtest"
)

var clientCounts = []int{1, 16}

// fenceServer starts fence's HTTP server on the bolt store (as `fence serve` runs it).
func fenceServer(b *testing.B) (*fencehttp.Server, string) {
	b.Helper()
	return fenceServerOn(b, nil, nil)
}

// fenceServerOn is fenceServer with the bolt store opened with opts, and
// configure (if not nil) called on the HTTP server before it starts.
func fenceServerOn(b *testing.B, opts *bolt.Options, configure func(*http.Server)) (*fencehttp.Server, string) {
	b.Helper()
	store, err := bolt.Open(filepath.Join(b.TempDir(), "fence.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: store, KV: store})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	if configure != nil {
		configure(hs.Config)
	}
	hs.Start()
	b.Cleanup(hs.Close)
	return s, hs.URL
}

// freePort returns a free port of 127.0.0.1, never one it returned before: the
// client and peer ports of etcdServer must differ.
func freePort(b *testing.B) int {
	b.Helper()
	port, err := servers.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	return port
}

// etcdServer starts a single-member embedded etcd with default (durable) settings.
func etcdServer(b *testing.B) string {
	b.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(b.TempDir(), "etcd")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{os.DevNull}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort(b))}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort(b))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		b.Fatalf("embedded etcd: %v", err)
	}
	b.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		b.Fatal("embedded etcd not ready within 60s")
	}
	return client.String()
}

// parallel runs b.N pairs spread over n clients, each with its own state from
// newClient, and reports pairs/s.
func parallel(b *testing.B, n int, newClient func(i int) func() error) {
	b.Helper()
	pairs := make([]func() error, n)
	for i := range pairs {
		pairs[i] = newClient(i)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(pair func() error) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := pair(); err != nil {
					errs <- err
					return
				}
			}
		}(pairs[i])
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
}

// BenchmarkPairs: acquire+release pairs over keep-alive HTTP (fence) and
// Lock+Unlock of concurrency.Mutex (etcd), each client on its own name.
func BenchmarkPairs(b *testing.B) {
	b.Run("system=fence-http", func(b *testing.B) {
		_, base := fenceServer(b)
		for _, n := range clientCounts {
			b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
				ctx := context.Background()
				parallel(b, n, func(i int) func() error {
					c, err := fencehttp.NewClient(base, nil)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(c.CloseIdleConnections)
					name := fmt.Sprintf("bench/%d/%d", n, i)
					return func() error {
						l, err := c.Acquire(ctx, name, 30*time.Second)
						if err != nil {
							return err
						}
						return l.Release(ctx)
					}
				})
			})
		}
	})
	b.Run("system=etcd-mutex", func(b *testing.B) {
		endpoint := etcdServer(b)
		for _, n := range clientCounts {
			b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
				ctx := context.Background()
				parallel(b, n, func(i int) func() error {
					cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { cli.Close() })
					sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { sess.Close() })
					m := concurrency.NewMutex(sess, fmt.Sprintf("/bench/%d/%d", n, i))
					return func() error {
						if err := m.Lock(ctx); err != nil {
							return err
						}
						return m.Unlock(ctx)
					}
				})
			})
		}
	})
}

// BenchmarkHandoff measures, per handoff, the time from the holder's release
// request to the waiter's grant, the waiter long-polling at the server. It reports
// the median and the 90th percentile.
func BenchmarkHandoff(b *testing.B) {
	srv, base := fenceServer(b)
	ctx := context.Background()
	holder, err := fencehttp.NewClient(base, nil)
	if err != nil {
		b.Fatal(err)
	}
	waiter, err := fencehttp.NewClient(base, nil)
	if err != nil {
		b.Fatal(err)
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("handoff/%d", i)
		before := metric(b, srv, "fence_waits_total")
		h, err := holder.Acquire(ctx, name, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		type res struct {
			l   *fence.Lease
			at  time.Time
			err error
		}
		got := make(chan res, 1)
		go func() {
			l, err := waiter.Acquire(ctx, name, time.Minute, fence.WithWait(time.Minute))
			got <- res{l, time.Now(), err}
		}()
		for metric(b, srv, "fence_waits_total") <= before { // the waiter is in its long poll
			time.Sleep(50 * time.Microsecond)
		}
		t0 := time.Now()
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			b.Fatal(r.err)
		}
		samples = append(samples, r.at.Sub(t0))
		if err := r.l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportLatency(b, samples, "")
}

// reportLatency reports the median and the 90th percentile of samples, in
// milliseconds, as PREFIXmedian-ms and PREFIXp90-ms.
func reportLatency(b *testing.B, samples []time.Duration, prefix string) {
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, prefix+"median-ms")
	b.ReportMetric(float64(samples[len(samples)*9/10].Microseconds())/1000, prefix+"p90-ms")
}

// metric returns the value of the server's counter or gauge name (0 if it has
// no sample yet).
func metric(b *testing.B, s *fencehttp.Server, name string) float64 {
	mfs, err := s.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// BenchmarkWatch measures watch latency through `fence serve` on the bolt store:
// per round, the time from the holder's Release returning to the watcher's
// Client.Watch yielding the free state, the watcher waiting in its blocking
// query at the server when the release is sent. It reports the median and the
// 90th percentile (the target: a median of at most 2ms). The store
// signals the release before its commit, so the watcher's answer can be on its
// way before the holder's: such rounds count as negative latencies. sent-median-ms
// and sent-p90-ms measure from the call of Release instead.
//
//	go test -run '^$' -bench 'Watch$' -benchtime 1000x ./fencehttp/bench/
func BenchmarkWatch(b *testing.B) {
	srv, base := fenceServer(b)
	ctx := context.Background()
	clients := newClients(b, base, 2)
	holder, watcher := clients[0], clients[1]
	const name = "watched"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := watchtest.Follow(wctx, watcher, name)
	parked := func() { // the watcher is in its next blocking query
		for metric(b, srv, "fence_blocking_queries_in_flight") < 1 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	f.MustUntil(b, 10*time.Second, "the first state", watchtest.Any)
	fromReturn := make([]time.Duration, 0, b.N)
	fromSend := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		l, err := holder.Acquire(ctx, name, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		f.MustUntil(b, 10*time.Second, "the lock held", watchtest.Held(true))
		parked()
		sent := time.Now()
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		at := f.MustUntil(b, 10*time.Second, "the lock free", watchtest.Held(false)).At
		fromReturn = append(fromReturn, at.Sub(returned))
		fromSend = append(fromSend, at.Sub(sent))
	}
	b.StopTimer()
	reportLatency(b, fromReturn, "")
	reportLatency(b, fromSend, "sent-")
}

// BenchmarkExpiryHandoff measures the handoff after an expiry through `fence serve`
// (see fencetest.BenchmarkExpiryHandoff): over HTTP, on the bolt store, a holder
// never releases a 100ms lease and a waiter on its own client is already waiting
// in its long poll at the server.
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 100x ./fencehttp/bench/
func BenchmarkExpiryHandoff(b *testing.B) {
	_, base := fenceServer(b)
	clients := newClients(b, base, 2)
	fencetest.BenchmarkExpiryHandoff(b, clients[0], clients[1], 100*time.Millisecond)
}

// newClients returns n clients of the server at base, each with connections of
// its own.
func newClients(b *testing.B, base string, n int) []*fencehttp.Client {
	clients := make([]*fencehttp.Client, n)
	for i := range clients {
		c, err := fencehttp.NewClient(base, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.CloseIdleConnections)
		clients[i] = c
	}
	return clients
}
