package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/servers"
	fenceredis "github.com/fencelock/fence/redis"
)

// Nemesis names accepted by Config.Nemeses.
const (
	NemesisPause = "pause" // SIGSTOP the lock holder past its TTL, then SIGCONT
	NemesisKill  = "kill"  // SIGKILL `fence serve` and restart it on the same data
	NemesisLink  = "link"  // latency, resets and cuts on the workers' link to the server
	// NemesisFailover makes the locks come from a Redis primary with a replica, and
	// fails over to the replica after it missed recent INCRs.
	NemesisFailover = "failover"
)

// Nemeses lists the implemented nemeses.
var Nemeses = []string{NemesisPause, NemesisKill, NemesisLink, NemesisFailover, NemesisMember}

// Config configures a chaos run.
type Config struct {
	Binary   string        // the fence binary (its serve and chaos worker modes)
	Workers  int           // worker processes; default 4
	Duration time.Duration // how long the workers run; default 30s
	// TTL is the lease TTL; default 400ms. With the member nemesis it is at least 1s,
	// etcd's minimum lease TTL there, so that pauses (3 TTLs) outlast the etcd lease
	// that really holds the lock.
	TTL     time.Duration
	Hold    time.Duration // time between a worker's read and write; default 20ms
	Nemeses []string      // subset of Nemeses; empty means none
	// Interval is the mean time between two faults of one nemesis; default 3s.
	Interval time.Duration
	// MaxFaults bounds the faults each nemesis injects; 0 means no bound but Duration.
	MaxFaults int
	Fencing   bool   // false: the control run, which must find violations
	Results   string // directory for run folders (logs, failing histories); default a temp dir
	// Progress receives progress lines while the workers run; nil means none. By
	// default each is a line of its own ("\n"-terminated, no "\r"), about once a
	// second (less often on long runs, about 60 lines a run), fit for a log file or
	// a pipe.
	Progress io.Writer
	// ProgressInPlace rewrites one progress line in place ("\r" before each, one
	// "\n" at the end), once a second: for a terminal.
	ProgressInPlace bool
	Seed            uint64 // seed of the nemeses' choices; 0 means from the clock
	// Resource is what holds the workers' counter: ResourceServe (the default, the
	// fenced KV of `fence serve`) or ResourcePostgres (a table of the PostgreSQL at
	// Postgres, written through postgres.Guard; the run deletes its row first).
	Resource string
	Postgres string // DSN of the PostgreSQL of ResourcePostgres
}

// Summary is the outcome of a run.
type Summary struct {
	Backend string         // what served the locks and the KV, e.g. "fence serve (bolt)"
	Nemeses string         // the faults, e.g. "pause,kill"
	Fencing bool           // whether writes carried the lease's fence
	Faults  map[string]int // faults injected by nemesis
	Report  *Report        // what the checker found
	Dir     string         // the run's folder: worker logs, server log, saved histories
	Saved   []string       // files of a saved failing history
}

// Passed reports whether the run met its goal: no violation with fencing on,
// violations found with fencing off (the control run).
func (s *Summary) Passed() bool {
	if s.Fencing {
		return s.Report.OK()
	}
	return s.Report.Found()
}

func (c *Config) defaults() error {
	if c.Binary == "" {
		return fmt.Errorf("chaos: %w: no fence binary", fence.ErrInvalid)
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.TTL == 0 {
		c.TTL = 400 * time.Millisecond
	}
	if c.Hold == 0 {
		c.Hold = 20 * time.Millisecond
	}
	if c.Interval == 0 {
		c.Interval = 3 * time.Second
	}
	if c.Workers < 2 || c.Workers > 64 {
		return fmt.Errorf("chaos: %w: workers %d not in [2, 64]", fence.ErrInvalid, c.Workers)
	}
	if c.Duration < 0 || c.TTL < 10*time.Millisecond || c.Hold < 0 || c.Interval < 0 || c.MaxFaults < 0 {
		return fmt.Errorf("chaos: %w: duration, ttl (>= 10ms), hold, interval and max faults must be positive", fence.ErrInvalid)
	}
	seen := map[string]bool{}
	for _, n := range c.Nemeses {
		ok := false
		for _, k := range Nemeses {
			ok = ok || n == k
		}
		if !ok {
			return fmt.Errorf("chaos: %w: unknown nemesis %q (have %s)", fence.ErrInvalid, n, strings.Join(Nemeses, ", "))
		}
		if seen[n] {
			return fmt.Errorf("chaos: %w: nemesis %q given twice", fence.ErrInvalid, n)
		}
		seen[n] = true
	}
	if seen[NemesisMember] && c.TTL < etcdMinTTL {
		c.TTL = etcdMinTTL
	}
	if err := validResource(c.Resource); err != nil {
		return err
	}
	if (c.Resource == ResourcePostgres) != (c.Postgres != "") {
		return fmt.Errorf("chaos: %w: a postgres DSN goes with the postgres resource, and only with it", fence.ErrInvalid)
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}

// server is the `fence serve` child process, restartable on the same port and data.
type server struct {
	bin, addr, data, logPath string
	store                    string // --store URL; "" means the embedded bolt store in data
	mu                       sync.Mutex
	cmd                      *exec.Cmd
	exited                   chan struct{}
}

func (s *server) url() string { return "http://" + s.addr }

func (s *server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: server log: %w", err)
	}
	cmd := exec.Command(s.bin, "serve", "--listen", s.addr, "--data", s.data, "--log-level", "warn", "--shutdown-timeout", "2s")
	if s.store != "" {
		cmd.Args = append(cmd.Args, "--store", s.store)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start fence serve: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	// Wait until it serves.
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := healthClient.Get(s.url() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("chaos: fence serve exited at start (see %s)", s.logPath)
		case <-ctx.Done():
			return fmt.Errorf("chaos: waiting for fence serve: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: fence serve not healthy after 15s (see %s)", s.logPath)
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// stop shuts the server down gracefully (SIGTERM), killing it after 5s.
func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// healthClient polls /healthz; a server stopped mid-answer must not hang the poll.
var healthClient = &http.Client{Timeout: time.Second}

// freeAddr returns 127.0.0.1:PORT with a port free at the time of the call.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("chaos: free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// worker is one worker process and what the harness learnt from its log so far.
type worker struct {
	id      int
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
	mu      sync.Mutex
	off     int64
	ops     int
	acq     int
	token   fence.Token // token of its latest acquisition
	paused  bool
}

// tail reads the new complete lines of the worker's log and updates its counters.
func (w *worker) tail() {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, err := os.Open(w.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(w.off, io.SeekStart); err != nil {
		return
	}
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return // a partial line is read again next time
		}
		w.off += int64(len(line))
		var o Op
		if json.Unmarshal(line, &o) != nil {
			continue
		}
		w.ops++
		if o.Kind == KindAcquire && o.Result == ResultOK {
			w.acq++
			w.token = o.Token
		}
	}
}

// Run runs the workers against a fresh `fence serve` for cfg.Duration with the
// configured nemeses, then checks the history. It returns the Summary, or an error if
// the run could not be carried out (bad config: fence.ErrInvalid; a process that
// would not start). Whether the run passed is Summary.Passed, not the error.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Results == "" {
		d, err := os.MkdirTemp("", "fence-chaos-")
		if err != nil {
			return nil, fmt.Errorf("chaos: results: %w", err)
		}
		cfg.Results = d
	}
	mode := "fenced"
	if !cfg.Fencing {
		mode = "control"
	}
	dir := filepath.Join(cfg.Results, fmt.Sprintf("%s-%s-%d", mode, time.Now().UTC().Format("20060102T150405"), os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: results: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	var linkProxy *linkProxy
	srv := &server{bin: cfg.Binary, addr: addr, data: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "server.log")}
	backend := "fence serve (bolt)"
	var cluster *etcdCluster
	if contains(cfg.Nemeses, NemesisMember) {
		cluster, err = startEtcdCluster(ctx, cfg.Binary, filepath.Join(dir, "etcd"), 3)
		if err != nil {
			return nil, err
		}
		defer cluster.close()
		srv.store = cluster.storeURL()
		backend = "fence serve (etcd x3)"
	}
	if err := srv.start(ctx); err != nil {
		return nil, err
	}
	defer srv.stop()

	workerURL := srv.url()
	if contains(cfg.Nemeses, NemesisLink) {
		px, err := startLinkProxy(addr)
		if err != nil {
			return nil, err
		}
		defer px.close()
		workerURL = "http://" + px.addr()
		linkProxy = px
	}
	var redisArgs []string
	var inspector fence.Inspector
	var rp *redisPair
	if contains(cfg.Nemeses, NemesisFailover) {
		rp, err = startRedisPair()
		if err != nil {
			return nil, err
		}
		defer rp.close()
		redisArgs = []string{"--redis", rp.proxy.addr()}
		backend = "redis+serve kv"
		rc := goredis.NewClient(&goredis.Options{Addr: rp.proxy.addr(), MaxRetries: -1})
		defer rc.Close()
		rl, err := fenceredis.NewLocker(rc, nil)
		if err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
		inspector = rl
	}
	const lock, key = "chaos", "chaos/counter"
	client, err := fencehttp.NewClient(srv.url(), &fencehttp.ClientOptions{RequestTimeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	var res resource = serveResource{client}
	if cfg.Resource == ResourcePostgres {
		pr, err := openPostgresResource(ctx, cfg.Postgres)
		if err != nil {
			return nil, err
		}
		defer pr.close()
		if err := pr.reset(ctx, key); err != nil {
			return nil, err
		}
		res = pr
		redisArgs = append(redisArgs, "--postgres", cfg.Postgres)
		backend += " + postgres"
	}
	start := MonoNow()
	workers := make([]*worker, cfg.Workers)
	defer func() { // never leave a worker behind, stopped or running
		for _, w := range workers {
			if w != nil && w.cmd != nil {
				w.cmd.Process.Signal(syscall.SIGCONT)
				w.cmd.Process.Kill()
				<-w.exited
			}
		}
	}()
	for i := range workers {
		w := &worker{id: i, logPath: filepath.Join(dir, fmt.Sprintf("worker-%d.jsonl", i))}
		errf, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.err", i)))
		if err != nil {
			return nil, fmt.Errorf("chaos: worker log: %w", err)
		}
		fencing := "on"
		if !cfg.Fencing {
			fencing = "off"
		}
		w.cmd = exec.Command(cfg.Binary, "chaos", "worker",
			"--server", workerURL, "--lock", lock, "--key", key, "--id", strconv.Itoa(i),
			"--ttl", cfg.TTL.String(), "--hold", cfg.Hold.String(), "--wait", (4 * cfg.TTL).String(),
			"--fencing", fencing, "--start", strconv.FormatInt(start, 10), "--log", w.logPath)
		w.cmd.Args = append(w.cmd.Args, redisArgs...)
		w.cmd.Stdout, w.cmd.Stderr = errf, errf
		if err := w.cmd.Start(); err != nil {
			errf.Close()
			w.cmd = nil
			return nil, fmt.Errorf("chaos: start worker %d: %w", i, err)
		}
		w.exited = make(chan struct{})
		go func(cmd *exec.Cmd, done chan struct{}, f *os.File) { cmd.Wait(); f.Close(); close(done) }(w.cmd, w.exited, errf)
		workers[i] = w
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	if inspector == nil {
		inspector = client
	}
	faults := map[string]int{}
	var fmu sync.Mutex
	count := func(kind string) { fmu.Lock(); faults[kind]++; fmu.Unlock() }
	var wg sync.WaitGroup
	var nemErr error
	var emu sync.Mutex
	for i, n := range cfg.Nemeses {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch n {
			case NemesisPause:
				err = pauseNemesis(runCtx, cfg, rng, inspector, lock, workers, func() { count(n) })
			case NemesisKill:
				err = killNemesis(runCtx, cfg, rng, srv, func() { count(n) })
			case NemesisLink:
				linkNemesis(runCtx, cfg, rng, linkProxy, count)
			case NemesisFailover:
				err = failoverNemesis(runCtx, cfg, rng, rp, func() { count(n) })
			case NemesisMember:
				err = memberNemesis(runCtx, cfg, rng, cluster, func() { count(n) })
			}
			if err != nil {
				emu.Lock()
				nemErr = errors.Join(nemErr, err)
				emu.Unlock()
			}
		}()
	}
	// Progress until the run's time is up.
	every := time.Second
	if !cfg.ProgressInPlace {
		every = max(every, (cfg.Duration / 60).Truncate(time.Second))
	}
	tick := time.NewTicker(every)
	began := time.Now()
progress:
	for {
		select {
		case <-runCtx.Done():
			break progress
		case <-tick.C:
			if cfg.Progress != nil {
				ops, acq := 0, 0
				for _, w := range workers {
					w.tail()
					w.mu.Lock()
					ops, acq = ops+w.ops, acq+w.acq
					w.mu.Unlock()
				}
				fmu.Lock()
				line := fmt.Sprintf("chaos %s %3.0fs/%.0fs  ops %6d  acquisitions %5d  pauses %d  kills %d  links %d  failovers %d  members %d",
					mode, time.Since(began).Seconds(), cfg.Duration.Seconds(), ops, acq, faults[NemesisPause], faults[NemesisKill], faults[NemesisLink], faults[NemesisFailover], faults[NemesisMember])
				fmu.Unlock()
				if cfg.ProgressInPlace {
					fmt.Fprintf(cfg.Progress, "\r%s ", line)
				} else {
					fmt.Fprintln(cfg.Progress, line)
				}
			}
		}
	}
	tick.Stop()
	wg.Wait() // nemeses resume what they paused and restart what they killed
	if cfg.Progress != nil && cfg.ProgressInPlace {
		fmt.Fprintln(cfg.Progress)
	}
	if nemErr != nil {
		return nil, nemErr
	}
	// Stop the workers: SIGTERM ends their loop after the operation in flight.
	for _, w := range workers {
		w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		select {
		case <-w.exited:
		case <-time.After(5 * time.Second):
			w.cmd.Process.Kill()
			<-w.exited
		}
		w.cmd = nil
	}
	// The final read, after every worker stopped.
	final := Op{Worker: -1, Kind: KindRead, Key: key, Lock: lock}
	var value string
	for try := 0; ; try++ {
		final.Call = MonoNow() - start
		value, err = res.get(ctx, key)
		final.Return = MonoNow() - start
		if err == nil || try == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: final read: %w", err)
	}
	final.Result, final.Value = ResultOK, value
	ops := []Op{}
	for _, w := range workers {
		wops, err := ReadHistoryFile(w.logPath)
		if err != nil {
			return nil, err
		}
		ops = append(ops, wops...)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	ops = append(ops, final)
	rep, err := Check(ops, CheckOptions{})
	if err != nil {
		return nil, err
	}
	names := strings.Join(cfg.Nemeses, ",")
	if names == "" {
		names = "none"
	}
	sum := &Summary{Backend: backend, Nemeses: names, Fencing: cfg.Fencing, Faults: faults, Report: rep, Dir: dir}
	if rep.Found() || !rep.OK() {
		sum.Saved, err = SaveFailure(filepath.Join(dir, "failure"), ops, rep)
		if err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter returns a duration uniformly in [d/2, 3d/2).
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)+1))
}

// pauseNemesis SIGSTOPs the lock holder (the worker whose latest acquisition has the
// token the server reports as held; a random worker if none matches) for 3 TTLs, so
// its lease expires and another worker takes the lock, then SIGCONTs it.
func pauseNemesis(ctx context.Context, cfg Config, rng *rand.Rand, c fence.Inspector, lock string, workers []*worker, injected func()) error {
	for n := 0; cfg.MaxFaults == 0 || n < cfg.MaxFaults; n++ {
		if !sleepCtx(ctx, jitter(rng, cfg.Interval)) {
			return nil
		}
		target := workers[rng.IntN(len(workers))]
		ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		info, err := c.Inspect(ictx, lock)
		cancel()
		if err == nil && info.Held {
			for _, w := range workers {
				w.tail()
				w.mu.Lock()
				if w.token == info.Token {
					target = w
				}
				w.mu.Unlock()
			}
		}
		if err := target.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return fmt.Errorf("chaos: pause worker %d: %w", target.id, err)
		}
		injected()
		// Not cut short by the end of the run: the pause must outlast the TTL.
		time.Sleep(3 * cfg.TTL)
		if err := target.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return fmt.Errorf("chaos: resume worker %d: %w", target.id, err)
		}
	}
	return nil
}

// killNemesis SIGKILLs `fence serve`, leaves it down for a moment, and restarts it
// on the same port and data directory.
func killNemesis(ctx context.Context, cfg Config, rng *rand.Rand, srv *server, injected func()) error {
	for n := 0; cfg.MaxFaults == 0 || n < cfg.MaxFaults; n++ {
		if !sleepCtx(ctx, jitter(rng, cfg.Interval)) {
			return nil
		}
		srv.kill()
		injected()
		time.Sleep(jitter(rng, 200*time.Millisecond))
		if err := srv.start(context.Background()); err != nil {
			return fmt.Errorf("chaos: restart after kill: %w", err)
		}
	}
	return nil
}

// linkNemesis injects one link fault at a time on the proxy between the workers and
// the server, picked at random: latency (0.5 to 1.5 TTL on every chunk, for 3 TTLs,
// so a write can arrive after its lease expired), reset
// (every open connection aborted) or cut (a black hole for 3 TTLs, then a reset).
// Faults are counted as "link" and by kind ("link/latency", ...).
func linkNemesis(ctx context.Context, cfg Config, rng *rand.Rand, px *linkProxy, count func(string)) {
	for n := 0; cfg.MaxFaults == 0 || n < cfg.MaxFaults; n++ {
		if !sleepCtx(ctx, jitter(rng, cfg.Interval)) {
			return
		}
		count(NemesisLink)
		switch rng.IntN(3) {
		case 0:
			count(NemesisLink + "/latency")
			px.setLatency(jitter(rng, cfg.TTL))
			time.Sleep(3 * cfg.TTL)
			px.setLatency(0)
		case 1:
			count(NemesisLink + "/reset")
			px.reset()
		default:
			count(NemesisLink + "/cut")
			px.setCut(true)
			time.Sleep(3 * cfg.TTL)
			px.setCut(false)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// FormatTable writes the final table of one or more runs, one row per run, and a
// legend of its columns.
func FormatTable(w io.Writer, runs []*Summary) {
	defer fmt.Fprint(w, tableLegend)
	fmt.Fprintf(w, "%-21s %-24s %-7s %7s %6s %6s %5s %5s %9s %7s %8s %8s %6s %8s %7s %s\n",
		"backend", "faults", "fencing", "ops", "acq", "pauses", "kills", "links", "failovers", "members", "rejected", "accepted", "lost", "overlaps", "linear", "verdict")
	for _, s := range runs {
		r := s.Report
		fencing := "on"
		if !s.Fencing {
			fencing = "off"
		}
		verdict := "PASS"
		switch {
		case s.Fencing && !s.Passed():
			verdict = "FAIL: violations with fencing on"
		case !s.Fencing && s.Passed():
			verdict = "PASS: control run found violations"
		case !s.Fencing:
			verdict = "FAIL: control run found no violation, the checker proved nothing"
		}
		fmt.Fprintf(w, "%-21s %-24s %-7s %7d %6d %6d %5d %5d %9d %7d %8d %8d %6d %8d %7s %s\n",
			s.Backend, s.Nemeses, fencing, r.Operations, r.Acquisitions, s.Faults[NemesisPause], s.Faults[NemesisKill], s.Faults[NemesisLink], s.Faults[NemesisFailover], s.Faults[NemesisMember],
			r.StaleRejected, r.StaleAccepted, r.Lost, r.Overlaps, r.Linearizable, verdict)
	}
}

// tableLegend explains FormatTable's columns, overlaps above all: they are expected
// under pauses, and what fencing makes harmless.
const tableLegend = `columns:
  ops        operations the workers recorded (acquire, read, write, fence, release)
  acq        leases granted
  pauses ... members
             faults injected by each nemesis
  rejected   stale writes and fences the resource refused: fencing at work
  accepted   stale writes or fences the resource accepted anyway: must be 0 with fencing on
  lost       acknowledged writes missing from the final value: must be 0 with fencing on
  overlaps   how often two workers believed they held the lock at once (pairs of
             leases), each by its own clock: a holder paused past its TTL woke up
             still "holding" it while the next holder had it. Expected under pauses, and harmless with fencing on:
             the resource rejected the stale holder's writes (see rejected). With
             fencing off they are where accepted stale writes and lost writes come from.
  linear     whether the history of the fenced key is linearizable (porcupine): Ok,
             Illegal, or Unknown when the check ran out of time
`

// redisPair is a Redis primary and its replica behind a proxy whose address the
// workers use, so that a failover is a retarget of the proxy.
type redisPair struct {
	primary, replica *servers.Redis
	proxy            *linkProxy
}

func startRedisPair() (*redisPair, error) {
	p, err := servers.StartRedis()
	if err != nil {
		return nil, fmt.Errorf("chaos: redis primary: %w", err)
	}
	r, err := servers.StartRedisReplica(p)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("chaos: redis replica: %w", err)
	}
	px, err := startLinkProxy(p.Addr)
	if err != nil {
		p.Close()
		r.Close()
		return nil, err
	}
	return &redisPair{primary: p, replica: r, proxy: px}, nil
}

func (rp *redisPair) close() {
	rp.proxy.close()
	rp.primary.Close()
	rp.replica.Close()
}

// failoverNemesis fails the locks' Redis over to a replica that missed the latest
// increments: the replica is cut off from replication (REPLICAOF NO ONE) while the
// workers go on acquiring on the primary for about 2 TTLs; then the primary is
// killed (SIGKILL) and the workers are sent to the old replica, whose counters are
// behind. The old primary comes back as a replica of the new one, ready for the
// next round.
func failoverNemesis(ctx context.Context, cfg Config, rng *rand.Rand, rp *redisPair, injected func()) error {
	for n := 0; cfg.MaxFaults == 0 || n < cfg.MaxFaults; n++ {
		if !sleepCtx(ctx, jitter(rng, cfg.Interval)) {
			return nil
		}
		if _, err := rp.replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
			return fmt.Errorf("chaos: failover: detach replica: %w", err)
		}
		time.Sleep(2 * cfg.TTL) // increments the replica misses
		rp.primary.Kill()
		rp.proxy.retarget(rp.replica.Addr)
		injected()
		old := rp.primary
		rp.primary, rp.replica = rp.replica, old
		if err := old.Restart(); err != nil {
			return fmt.Errorf("chaos: failover: restart old primary: %w", err)
		}
		if _, err := old.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(rp.primary.Port)); err != nil {
			return fmt.Errorf("chaos: failover: old primary as replica: %w", err)
		}
		if err := old.WaitReplicaSynced(10 * time.Second); err != nil {
			return fmt.Errorf("chaos: failover: resync: %w", err)
		}
	}
	return nil
}
