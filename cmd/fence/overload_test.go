package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Overload and hostile clients against the real `fence serve` binary. The tests
// assert bounds with wide margins and log what they measured; the benchmarks
// (BenchmarkServe_*) report the figures.

// Bounds of the hostile-client server: short, so that a test sees the cut-off.
const (
	attackHeaderTimeout = time.Second
	attackReadTimeout   = 2 * time.Second
)

// startAttackServe runs a fence serve with short header and body timeouts, stopped
// at the end of the test.
func startAttackServe(tb testing.TB, extra ...string) *serveProc {
	tb.Helper()
	args := append([]string{"--header-timeout", attackHeaderTimeout.String(), "--read-timeout", attackReadTimeout.String()}, extra...)
	p, err := startServe(tb.TempDir(), args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.stop() })
	return p
}

func hostOf(tb testing.TB, server string) string {
	tb.Helper()
	u, err := url.Parse(server)
	if err != nil {
		tb.Fatal(err)
	}
	return u.Host
}

// goodClient is a well-behaved client: acquire then release of its own lock, over
// one keep-alive connection.
type goodClient struct {
	server, name string
	hc           *http.Client
}

func newGoodClient(tb testing.TB, server string) *goodClient {
	t := http.DefaultTransport.(*http.Transport).Clone()
	tb.Cleanup(t.CloseIdleConnections)
	return &goodClient{server: server, name: url.PathEscape(uniqName(tb)), hc: &http.Client{Transport: t, Timeout: 10 * time.Second}}
}

func (c *goodClient) post(path, body string) (int, []byte, error) {
	resp, err := c.hc.Post(c.server+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// hold acquires the client's lock for a minute and returns the lease id and the
// lock's Fence-Index then.
func (c *goodClient) hold(tb testing.TB) (lease, index string) {
	tb.Helper()
	code, body, err := c.post("/v1/locks/"+c.name+"/acquire", `{"ttl_ms":60000}`)
	var l struct{ Lease string }
	if err == nil {
		err = json.Unmarshal(body, &l)
	}
	if err != nil || code != http.StatusOK {
		tb.Fatalf("acquire: status %d, %s, %v", code, body, err)
	}
	resp, err := c.hc.Get(c.server + "/v1/locks/" + c.name)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return l.Lease, resp.Header.Get("Fence-Index")
}

// pairs runs n acquire+release pairs and returns each pair's latency.
func (c *goodClient) pairs(n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		code, body, err := c.post("/v1/locks/"+c.name+"/acquire", `{"ttl_ms":10000}`)
		if err != nil || code != http.StatusOK {
			return lat, fmt.Errorf("acquire: status %d, %s, %v", code, body, err)
		}
		var l struct{ Lease string }
		if err := json.Unmarshal(body, &l); err != nil {
			return lat, fmt.Errorf("acquire: %v: %s", err, body)
		}
		code, body, err = c.post("/v1/locks/"+c.name+"/release", `{"lease":"`+l.Lease+`"}`)
		if err != nil || code != http.StatusOK {
			return lat, fmt.Errorf("release: status %d, %s, %v", code, body, err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// quantile of sorted latencies.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// attackStats is what an attack saw: connections the server cut, how long the
// longest lived, and the answers it got.
type attackStats struct {
	mu       sync.Mutex
	cut      int
	longest  time.Duration
	statuses map[int]int
	errs     int
}

func (s *attackStats) conn(lived time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut++
	s.longest = max(s.longest, lived)
}

func (s *attackStats) status(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.statuses == nil {
		s.statuses = map[int]int{}
	}
	s.statuses[code]++
}

// attack is a hostile client: it runs until ctx is done, from several goroutines.
type attack func(ctx context.Context, host string, st *attackStats)

// dribble opens conns connections that send head at once and then one byte of
// tail every 100ms, never finishing; each connection counts how long it lived
// until the server closed it, then it is opened again, until ctx is done.
func dribble(conns int, head, tail string) attack {
	return func(ctx context.Context, host string, st *attackStats) {
		var wg sync.WaitGroup
		for range conns {
			wg.Go(func() {
				for ctx.Err() == nil {
					dribbleOnce(ctx, host, head, tail, st)
				}
			})
		}
		wg.Wait()
	}
}

func dribbleOnce(ctx context.Context, host, head, tail string, st *attackStats) {
	c, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	start := time.Now()
	closed := make(chan time.Duration, 1) // how long it lived, once the server closed it
	go func() {
		// Whatever the server answers before it closes: a status line, or nothing.
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			st.status(resp.StatusCode)
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		_, _ = io.Copy(io.Discard, c)
		closed <- time.Since(start)
	}()
	if _, err := io.WriteString(c, head); err == nil {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
			case lived := <-closed:
				st.conn(lived)
				c.Close()
				return
			case <-tick.C:
				_, _ = io.WriteString(c, tail[i%len(tail):i%len(tail)+1])
			}
		}
	}
	// Still open when the attack ended (or never written to): not a cut.
	c.Close()
	<-closed
}

// slowHeaders is slowloris: the header section never ends.
func slowHeaders(conns int) attack {
	return dribble(conns, "POST /v1/locks/slow/acquire HTTP/1.1\r\nHost: fence\r\n", "X-Slow: aaaaaaaa\r\n")
}

// slowBody sends whole headers and then a body that never finishes.
func slowBody(conns int) attack {
	return dribble(conns, "POST /v1/locks/slow/acquire HTTP/1.1\r\nHost: fence\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", `{"ttl_ms":1000,   `)
}

// badRequests are what the flood sends, each answered 4xx.
var badRequests = []struct{ method, path, body string }{
	{"POST", "/v1/locks/x/acquire", `{"ttl_ms":`},
	{"POST", "/v1/locks/x/acquire", `{"ttl_ms":"ten"}`},
	{"POST", "/v1/locks/x/acquire", `{"unknown":1}`},
	{"POST", "/v1/locks/x/acquire", `[1,2,3]`},
	{"POST", "/v1/locks/x/acquire", `{"ttl_ms":-5}`},
	{"POST", "/v1/locks/x/release", `{"lease":"nope"}`},
	{"POST", "/v1/locks/a/../b/acquire", `{}`},
	{"POST", "/v1/locks//acquire", `{}`},
	{"POST", "/v1/locks/%ff%fe/acquire", `{}`},
	{"POST", "/v1/locks/" + strings.Repeat("n", 2000) + "/acquire", `{}`},
	{"GET", "/v1/nothing/here", ``},
	{"DELETE", "/v1/locks/x", ``},
	{"PUT", "/v1/kv/k", `value`},
	{"GET", "/v1/locks/x?index=abc", ``},
	{"POST", "/v1/locks/x/acquire", `{"ttl_ms":1000,"pad":"` + strings.Repeat("p", 200<<10) + `"}`},
}

// flood sends badRequests round robin from workers goroutines, each on its own
// keep-alive connection, as fast as the server answers.
func flood(workers int) attack {
	return func(ctx context.Context, host string, st *attackStats) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				tr := &http.Transport{MaxIdleConnsPerHost: 1}
				defer tr.CloseIdleConnections()
				hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
				for i := w; ctx.Err() == nil; i++ {
					b := badRequests[i%len(badRequests)]
					req, err := http.NewRequestWithContext(ctx, b.method, "http://"+host+b.path, strings.NewReader(b.body))
					if err != nil {
						panic(err)
					}
					resp, err := hc.Do(req)
					if err != nil {
						if ctx.Err() == nil {
							st.mu.Lock()
							st.errs++
							st.mu.Unlock()
						}
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					st.status(resp.StatusCode)
				}
			})
		}
		wg.Wait()
	}
}

// underAttack measures a good client's pairs before and during the attack.
type underAttack struct {
	before, during []time.Duration // sorted
	stats          *attackStats
}

func (u underAttack) String() string {
	return fmt.Sprintf("good client acquire+release: before p50 %v p99 %v; during p50 %v p99 %v (%d pairs)",
		quantile(u.before, .5), quantile(u.before, .99), quantile(u.during, .5), quantile(u.during, .99), len(u.during))
}

// measureUnderAttack runs n good pairs, then starts the attack, lets it build up
// for warmup, runs n good pairs again, and stops it.
func measureUnderAttack(tb testing.TB, p *serveProc, a attack, n int, warmup time.Duration) underAttack {
	tb.Helper()
	good := newGoodClient(tb, p.url)
	before, err := good.pairs(n)
	if err != nil {
		tb.Fatalf("before the attack: %v", err)
	}
	st := &attackStats{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a(ctx, hostOf(tb, p.url), st) }()
	time.Sleep(warmup)
	during, err := good.pairs(n)
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		tb.Fatal("the attack did not stop within 20s of being cancelled")
	}
	if err != nil {
		tb.Fatalf("a good client was refused during the attack: %v", err)
	}
	slices.Sort(before)
	slices.Sort(during)
	return underAttack{before: before, during: during, stats: st}
}

// serverRSS is the resident set of the server process, in bytes.
func serverRSS(tb testing.TB, p *serveProc) float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				tb.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb * 1024
		}
	}
	tb.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// goroutinesBackTo waits up to 10s for the server's goroutines to fall to at most
// limit, and returns the last count.
func goroutinesBackTo(tb testing.TB, p *serveProc, limit float64) float64 {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := metric(tb, p.url, "go_goroutines")
		if g <= limit || time.Now().After(deadline) {
			return g
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestServe_Slowloris_HeadersCutOff_GoodClientsServed(t *testing.T) {
	p := startAttackServe(t)
	base := metric(t, p.url, "go_goroutines")
	u := measureUnderAttack(t, p, slowHeaders(100), 100, 2*attackHeaderTimeout)
	t.Logf("%v; server cut %d slow connections, the longest after %v", u, u.stats.cut, u.stats.longest)
	if u.stats.cut == 0 {
		t.Fatal("the server cut no connection dribbling its headers")
	}
	if bound := attackHeaderTimeout + 3*time.Second; u.stats.longest > bound {
		t.Fatalf("a connection dribbling its headers lived %v, want at most %v (--header-timeout %v)", u.stats.longest, bound, attackHeaderTimeout)
	}
	if g := goroutinesBackTo(t, p, base+50); g > base+50 {
		t.Fatalf("server goroutines after the attack: want at most %v (baseline + 50), got %v", base+50, g)
	}
}

func TestServe_SlowBody_CutOff_GoodClientsServed(t *testing.T) {
	p := startAttackServe(t)
	base := metric(t, p.url, "go_goroutines")
	u := measureUnderAttack(t, p, slowBody(100), 100, 2*attackReadTimeout)
	t.Logf("%v; server cut %d slow bodies, the longest after %v, answers %v", u, u.stats.cut, u.stats.longest, u.stats.statuses)
	if u.stats.cut == 0 {
		t.Fatal("the server cut no connection dribbling its body")
	}
	if bound := attackReadTimeout + 3*time.Second; u.stats.longest > bound {
		t.Fatalf("a connection dribbling its body lived %v, want at most %v (--read-timeout %v)", u.stats.longest, bound, attackReadTimeout)
	}
	for code := range u.stats.statuses {
		if code < 400 {
			t.Fatalf("a body that never finished was answered %d, want an error status or a close", code)
		}
	}
	if g := goroutinesBackTo(t, p, base+50); g > base+50 {
		t.Fatalf("server goroutines after the attack: want at most %v (baseline + 50), got %v", base+50, g)
	}
}

// The header and read bounds must not cut a long poll: once its request is read, a
// waiting acquire and a blocking query wait their whole wait_ms.
func TestServe_LongPollsOutliveHeaderAndReadTimeouts(t *testing.T) {
	p := startAttackServe(t, "--max-wait", "10s")
	good := newGoodClient(t, p.url)
	_, index := good.hold(t)
	wait := 2 * max(attackHeaderTimeout, attackReadTimeout)
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		code, body, err := good.post("/v1/locks/"+good.name+"/acquire", fmt.Sprintf(`{"ttl_ms":1000,"wait_ms":%d}`, wait.Milliseconds()))
		if took := time.Since(start); err != nil || code != http.StatusConflict || took < wait {
			t.Errorf("waiting acquire of %v: want 409 after the whole wait, got status %d after %v: %s %v", wait, code, took, body, err)
		}
	})
	wg.Go(func() {
		start := time.Now()
		resp, err := good.hc.Get(fmt.Sprintf("%s/v1/locks/%s?index=%s&wait_ms=%d", p.url, good.name, index, wait.Milliseconds()))
		if err != nil {
			t.Errorf("blocking query: %v", err)
			return
		}
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != http.StatusOK || took < wait {
			t.Errorf("blocking query of %v: want 200 after the whole wait, got status %d after %v", wait, resp.StatusCode, took)
		}
	})
	wg.Wait()
}

func TestServe_OversizedHeaders_431(t *testing.T) {
	p := startAttackServe(t)
	req, err := http.NewRequest("GET", p.url+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("h", maxHeaderBytes*2))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("oversized headers: want 431, got %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: want status 431, got %d", resp.StatusCode)
	}
	if _, err := newGoodClient(t, p.url).pairs(1); err != nil {
		t.Fatalf("after oversized headers: %v", err)
	}
}

func TestServe_BadRequestFlood_Bounded_GoodClientsServed(t *testing.T) {
	p := startAttackServe(t)
	base := metric(t, p.url, "go_goroutines")
	rss0 := serverRSS(t, p)
	u := measureUnderAttack(t, p, flood(8), 200, 500*time.Millisecond)
	total := 0
	for code, n := range u.stats.statuses {
		total += n
		if code < 400 || code >= 500 {
			t.Errorf("a bad request was answered %d (%d times), want 4xx", code, n)
		}
	}
	rss1 := serverRSS(t, p)
	t.Logf("%v; %d bad requests answered %v, %d transport errors; server RSS %.1f MiB before, %.1f MiB after",
		u, total, u.stats.statuses, u.stats.errs, rss0/(1<<20), rss1/(1<<20))
	if total < 100 {
		t.Fatalf("the flood got %d answers, want at least 100", total)
	}
	if g := goroutinesBackTo(t, p, base+50); g > base+50 {
		t.Fatalf("server goroutines after the flood: want at most %v (baseline + 50), got %v", base+50, g)
	}
	if grown := rss1 - rss0; grown > 200<<20 {
		t.Fatalf("server RSS grew by %.0f MiB during the flood, want at most 200 MiB", grown/(1<<20))
	}
}

// BenchmarkServe_GoodClientUnderAttack reports a good client's acquire+release
// latency while each attack runs (µs, p50 and p99), against none.
func BenchmarkServe_GoodClientUnderAttack(b *testing.B) {
	for _, a := range []struct {
		name   string
		attack attack
	}{
		{"none", func(ctx context.Context, _ string, _ *attackStats) { <-ctx.Done() }},
		{"slowloris-headers-500conns", slowHeaders(500)},
		{"slow-body-500conns", slowBody(500)},
		{"bad-request-flood-8workers", flood(8)},
	} {
		b.Run(a.name, func(b *testing.B) {
			p := startAttackServe(b)
			var during []time.Duration
			for b.Loop() {
				u := measureUnderAttack(b, p, a.attack, 500, 2*time.Second)
				during = append(during, u.during...)
			}
			slices.Sort(during)
			b.ReportMetric(float64(quantile(during, .5).Microseconds()), "p50-us")
			b.ReportMetric(float64(quantile(during, .99).Microseconds()), "p99-us")
		})
	}
}

// raiseNoFile raises the test process's soft RLIMIT_NOFILE to its hard limit (the
// servers it starts inherit it) and skips unless need descriptors fit: the test
// holds one a waiter, and so does the server, in its own process.
func raiseNoFile(tb testing.TB, need uint64) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			tb.Fatal(err)
		}
	}
	if lim.Cur < need {
		tb.Skipf("the waiters need about %d file descriptors in each process; RLIMIT_NOFILE's hard limit is %d", need, lim.Max)
	}
}

// heldWaiters are long polls held open on one lock: half waiting acquires, half
// blocking queries, each on its own connection (Connection: close, so that an
// answered waiter's connection ends).
type heldWaiters struct {
	acquires, queries chan int // status of each answer, or 0 for a broken connection
}

func holdWaiters(tb testing.TB, host, name, index string, n int) *heldWaiters {
	tb.Helper()
	pw := &heldWaiters{acquires: make(chan int, n), queries: make(chan int, n)}
	body := `{"ttl_ms":60000,"wait_ms":60000}`
	acquire := fmt.Sprintf("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: fence\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", name, len(body), body)
	query := fmt.Sprintf("GET /v1/locks/%s?index=%s&wait_ms=60000 HTTP/1.1\r\nHost: fence\r\nConnection: close\r\n\r\n", name, index)
	dialing := make(chan struct{}, 32) // within the listen backlog
	for i := range n {
		req, answers := acquire, pw.acquires
		if i%2 == 1 {
			req, answers = query, pw.queries
		}
		dialing <- struct{}{}
		go func() {
			c, err := net.DialTimeout("tcp", host, 10*time.Second)
			if err == nil {
				_, err = io.WriteString(c, req)
			}
			<-dialing
			if err != nil {
				answers <- 0
				return
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			resp, err := http.ReadResponse(bufio.NewReaderSize(c, 1024), nil)
			if err != nil {
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	return pw
}

// collect takes n answers from ch within d and counts them by status; it returns
// too how long after start the last came.
func collect(ch chan int, n int, start time.Time, d time.Duration) (map[int]int, time.Duration, bool) {
	got := map[int]int{}
	timeout := time.After(d)
	for range n {
		select {
		case code := <-ch:
			got[code]++
		case <-timeout:
			return got, time.Since(start), false
		}
	}
	return got, time.Since(start), true
}

// waiterFigures are what n waiters cost the server, and how long their
// release took.
type waiterFigures struct {
	n                          int
	rssPerWaiter, gPerWaiter   float64
	releasedIn, drainedIn      time.Duration
	queryAnswers, acquireEnds  map[int]int
	goroutinesBase, goroutines float64
}

// holdAndRelease holds n waiters on a held lock of a fresh `fence serve`, measures
// it, releases the lock (every blocking query answers, one acquire is granted), then
// shuts the server down (the other acquires end with 503).
func holdAndRelease(tb testing.TB, n int) waiterFigures {
	tb.Helper()
	raiseNoFile(tb, uint64(n+200))
	p, err := startServe(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	defer p.stop()
	good := newGoodClient(tb, p.url)
	lease, index := good.hold(tb)
	good.hc.Transport.(*http.Transport).CloseIdleConnections()

	f := waiterFigures{n: n, goroutinesBase: metric(tb, p.url, "go_goroutines")}
	rss0 := serverRSS(tb, p)
	pw := holdWaiters(tb, hostOf(tb, p.url), good.name, index, n)
	// Waiting: each waiter's connection has its goroutines in the server.
	deadline := time.Now().Add(60 * time.Second)
	for f.goroutines = metric(tb, p.url, "go_goroutines"); f.goroutines < f.goroutinesBase+float64(n); f.goroutines = metric(tb, p.url, "go_goroutines") {
		if time.Now().After(deadline) {
			tb.Fatalf("after 60s only %v of %d waiters wait", f.goroutines-f.goroutinesBase, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the last ones finish parsing their requests
	f.goroutines = metric(tb, p.url, "go_goroutines")
	f.rssPerWaiter = (serverRSS(tb, p) - rss0) / float64(n)
	f.gPerWaiter = (f.goroutines - f.goroutinesBase) / float64(n)

	released := time.Now()
	code, body, err := good.post("/v1/locks/"+good.name+"/release", `{"lease":"`+lease+`"}`)
	if err != nil || code != http.StatusOK {
		tb.Fatalf("release: status %d, %s, %v", code, body, err)
	}
	good.hc.Transport.(*http.Transport).CloseIdleConnections()
	var ok bool
	if f.queryAnswers, f.releasedIn, ok = collect(pw.queries, n/2, released, 30*time.Second); !ok {
		tb.Fatalf("30s after the release only %v of %d blocking queries answered", f.queryAnswers, n/2)
	}
	granted, _, ok := collect(pw.acquires, 1, released, 30*time.Second)
	if !ok || granted[http.StatusOK] != 1 {
		tb.Fatalf("after the release: want one waiting acquire granted, got %v", granted)
	}
	stopped := make(chan error, 1)
	sigterm := time.Now()
	go func() { stopped <- p.stop() }()
	if f.acquireEnds, f.drainedIn, ok = collect(pw.acquires, n-n/2-1, sigterm, 30*time.Second); !ok {
		tb.Fatalf("30s after SIGTERM only %v of %d waiting acquires ended", f.acquireEnds, n-n/2-1)
	}
	if err := <-stopped; err != nil {
		tb.Fatalf("fence serve with waiters did not stop cleanly: %v\n%s", err, p.log())
	}
	return f
}

func (f waiterFigures) String() string {
	return fmt.Sprintf("%d waiters: %.0f bytes RSS and %.2f goroutines each (server goroutines %v -> %v); blocking queries answered %v within %v of the release; waiting acquires ended %v within %v of SIGTERM",
		f.n, f.rssPerWaiter, f.gPerWaiter, f.goroutinesBase, f.goroutines, f.queryAnswers, f.releasedIn, f.acquireEnds, f.drainedIn)
}

// TestServe_Waiters_ReleasedByReleaseAndDrain holds 1,000 long polls (the race
// detector allows 8,128 goroutines; BenchmarkServe_Waiters holds 10,000).
func TestServe_Waiters_ReleasedByReleaseAndDrain(t *testing.T) {
	n := 1000
	f := holdAndRelease(t, n)
	t.Log(f)
	if f.queryAnswers[http.StatusOK] != n/2 {
		t.Errorf("blocking queries after the release: want %d answered 200, got %v", n/2, f.queryAnswers)
	}
	if f.acquireEnds[http.StatusServiceUnavailable] != n-n/2-1 {
		t.Errorf("waiting acquires at SIGTERM: want %d ended 503, got %v", n-n/2-1, f.acquireEnds)
	}
	if f.gPerWaiter > 3 {
		t.Errorf("want at most 3 server goroutines per waiter, got %.2f", f.gPerWaiter)
	}
}

var benchWaiters = flag.Int("waiters", 10000, "waiters of BenchmarkServe_Waiters")

// BenchmarkServe_Waiters reports the server's RSS and goroutines per waiting
// long poll (-waiters of them, half waiting acquires, half blocking queries) and how
// long their release took.
func BenchmarkServe_Waiters(b *testing.B) {
	var f waiterFigures
	for b.Loop() {
		f = holdAndRelease(b, *benchWaiters)
	}
	b.Log(f)
	b.ReportMetric(f.rssPerWaiter, "rss-bytes/waiter")
	b.ReportMetric(f.gPerWaiter, "goroutines/waiter")
	b.ReportMetric(float64(f.releasedIn.Milliseconds()), "release-ms")
	b.ReportMetric(float64(f.drainedIn.Milliseconds()), "drain-ms")
}

func TestServe_OverloadFlags_UsageErrors_Exit2(t *testing.T) {
	for _, args := range [][]string{
		{"--max-waiters", "-1"},
		{"--header-timeout", "0s"},
		{"--read-timeout", "-1s"},
	} {
		r := runFence(t, "", nil, "", append([]string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir()}, args...)...)
		wantCode(t, strings.Join(args, " "), r, 2)
	}
}

func TestServe_MaxWaiters_OneMoreIs503(t *testing.T) {
	p := startAttackServe(t, "--max-waiters", "1")
	good := newGoodClient(t, p.url)
	good.hold(t)
	pw := holdWaiters(t, hostOf(t, p.url), good.name, "0", 1) // one waiting acquire
	waitFor(t, "the waiting acquire", func() bool { return metric(t, p.url, "fence_waits_total") == 1 })
	code, body, err := good.post("/v1/locks/"+good.name+"/acquire", `{"ttl_ms":1000,"wait_ms":20000}`)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(string(body), "limit is 1") {
		t.Fatalf("a second waiter with --max-waiters 1: want 503 naming the limit, got %d %s %v", code, body, err)
	}
	_ = p.stop()
	if got, _, ok := collect(pw.acquires, 1, time.Now(), 30*time.Second); !ok || got[http.StatusServiceUnavailable] != 1 {
		t.Fatalf("the waiting acquire at SIGTERM: want 503, got %v", got)
	}
}
