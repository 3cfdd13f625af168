package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// The lock the workers take and the key of their counter.
const runLock, runKey = "chaos", "chaos/counter"

// run is what one Run builds: the processes, and what the nemeses set up and act on.
// The nemeses' setup fills it before fence serve and the workers start; after that it
// is read-only (the workers guard their counters with their own locks).
type run struct {
	cfg        Config
	dir        string              // the run's folder
	srv        *server             // fence serve; nil on the cluster store
	nodes      []*node             // the cluster store's nodes; nil on other stores
	storeName  string              // fence serve's store in the backend label: "bolt", "etcd x3"
	locks      string              // who grants the workers' locks: "" for fence serve, "redis"
	workerURLs []string            // where the workers reach fence serve: its URL, or the nodes' (workerServer)
	workerArgs []string            // extra flags of every worker
	hostEnv    map[string][]string // extra environment of a host's processes, by host (r.command)
	inspector  fence.Inspector     // tells which token holds the lock; nil until the run starts means fence serve
	redis      *redisPair          // the redis store's servers; nil on other stores
	etcd       *etcdmember.Cluster // the etcd store's members; nil on other stores
	net        *netLayer           // every host in a namespace of its own; nil but with the partition nemesis
	crash      crashTarget         // what the crash nemesis kills; nil on stores without a database server
	workers    []*worker           // set once they started
	closers    []func()            // run in reverse order by close
}

// harnessAddr returns the address of this process that the hosts reach it at, for
// the proxies it runs: 127.0.0.1, or the gateway with the partition nemesis.
func (r *run) harnessAddr() string {
	if r.net != nil {
		return r.net.gateway()
	}
	return "127.0.0.1"
}

// privateNetFlags are the flags fence serve needs on the run's own network: with
// the partition nemesis every host is in a namespace of its own and listens on
// its address on the bridge, off loopback, which fence serve refuses without
// auth tokens and (cluster mode) without peer TLS. That network is the
// harness's alone (no route or address of the machine overlaps it), so the
// flags that say so are given; without it everything is on loopback and they
// are not.
func (r *run) privateNetFlags() []string {
	if r.net == nil {
		return nil
	}
	flags := []string{"--allow-no-auth"}
	if r.cfg.Store == StoreCluster {
		flags = append(flags, "--allow-plain-peers")
	}
	return flags
}

// onClose registers f to run when the run ends, before what was registered earlier.
func (r *run) onClose(f func()) { r.closers = append(r.closers, f) }

func (r *run) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// backend is the Summary's label of what served the locks and the KV.
func (r *run) backend() string {
	b := "fence serve (" + r.storeName + ")"
	if r.locks == "redis" {
		b = "redis+serve kv"
	}
	if r.cfg.Resource == ResourcePostgres {
		b += " + postgres"
	}
	return b
}

// Run runs the workers against a fresh `fence serve` for cfg.Duration with the
// configured nemeses, then checks the history. It returns the Summary, or an error if
// the run could not be carried out (bad config: fence.ErrInvalid; a process that
// would not start). Whether the run passed is Summary.Passed, not the error.
//
// The servers' ports are chosen free and then bound by the servers, so another
// process may take one in between: a run whose servers could not start on a port
// clash is run again from the start, in a folder of its own, up to
// servers.StartAttempts times.
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
	for attempt := 1; ; attempt++ {
		sum, err := runOnce(ctx, cfg, attempt)
		if !errors.Is(err, errPortClash) || attempt >= servers.StartAttempts || ctx.Err() != nil {
			return sum, err
		}
	}
}

// errPortClash marks runOnce's error when a server could not start because
// another process took its port.
var errPortClash = errors.New("chaos: a server's port was taken")

// runOnce is one attempt of Run, with cfg's defaults set.
func runOnce(ctx context.Context, cfg Config, attempt int) (*Summary, error) {
	dir := filepath.Join(cfg.Results, fmt.Sprintf("%s-%s-%d", cfg.mode(), time.Now().UTC().Format("20060102T150405"), os.Getpid()))
	if attempt > 1 {
		dir += fmt.Sprintf("-try%d", attempt)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: results: %w", err)
	}
	st := newStore(cfg.Store)
	r := &run{cfg: cfg, dir: dir, storeName: st.label()}
	defer r.close()
	if slices.Contains(cfg.Nemeses, NemesisPartition) {
		n, err := newNetLayer()
		if err != nil {
			return nil, err
		}
		r.net = n
		r.onClose(n.close) // last: after every process of the run is gone
	}
	if cfg.Store != StoreCluster {
		host, err := r.hostAddr("serve")
		if err != nil {
			return nil, err
		}
		addr, err := freeAddr(host)
		if err != nil {
			return nil, err
		}
		r.srv = newServer(cfg.Binary, addr, filepath.Join(dir, "data"), filepath.Join(dir, "server.log"))
		r.srv.command = func(bin string, args ...string) *exec.Cmd { return r.command("serve", bin, args...) }
		r.srv.flags = append(r.srv.flags, r.privateNetFlags()...)
	}
	if err := st.setup(ctx, r); err != nil {
		return nil, err
	}
	for _, s := range r.servers() {
		r.workerURLs = append(r.workerURLs, s.url())
	}
	nemeses := make([]nemesis, len(cfg.Nemeses))
	for i, name := range cfg.Nemeses {
		nemeses[i] = newNemesis(name)
		if err := nemeses[i].setup(ctx, r); err != nil {
			return nil, err
		}
	}
	if err := r.startServers(); err != nil {
		if servers.AddrInUse(err) {
			err = fmt.Errorf("%w: %w", errPortClash, err)
		}
		return nil, err
	}
	client, err := r.harnessClient()
	if err != nil {
		return nil, err
	}
	if r.inspector == nil {
		r.inspector = client
	}
	var res resource = serveResource{client}
	if r.cfg.Resource == ResourcePostgres { // r.cfg: the store's setup may have set the DSN
		pr, err := openPostgresResource(ctx, r.cfg.Postgres)
		if err != nil {
			return nil, err
		}
		r.onClose(pr.close)
		if err := pr.reset(ctx, runKey); err != nil {
			return nil, err
		}
		res = pr
		r.workerArgs = append(r.workerArgs, "--postgres", r.cfg.Postgres)
	}
	start := MonoNow()
	r.onClose(r.killWorkers) // never leave a worker behind, stopped or running
	if err := r.startWorkers(start); err != nil {
		return nil, err
	}
	faults, err := r.runFaults(ctx, nemeses)
	if err != nil {
		return nil, err
	}
	r.stopWorkers()
	ops, err := r.history(ctx, res, start)
	if err != nil {
		return nil, err
	}
	rep, err := Check(ops, CheckOptions{})
	if err != nil {
		return nil, err
	}
	names := strings.Join(cfg.Nemeses, ",")
	if names == "" {
		names = "none"
	}
	sum := &Summary{Store: cfg.Store, Backend: r.backend(), Nemeses: names, Fencing: cfg.Fencing, Faults: faults, Report: rep, Dir: dir}
	if rep.Found() || !rep.OK() {
		sum.Saved, err = SaveFailure(filepath.Join(dir, "failure"), ops, rep)
		if err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// servers returns the fence serve processes of the run: the cluster's nodes, or the
// one server.
func (r *run) servers() []*server {
	if r.srv != nil {
		return []*server{r.srv}
	}
	out := make([]*server, len(r.nodes))
	for i, n := range r.nodes {
		out[i] = n.server
	}
	return out
}

// startServers starts fence serve, or every node of the cluster at once (none serves
// before a majority runs), waits until each is healthy and registers their shutdown.
func (r *run) startServers() error {
	if r.srv != nil {
		if err := r.srv.start(); err != nil {
			return err
		}
		r.onClose(r.srv.stop)
		return nil
	}
	r.onClose(r.stopNodes)
	return r.startNodes()
}

// harnessClient returns the harness's own client of fence serve, or of every node
// (it fails over between them, an attempt on a node that does not answer cut short
// at 300ms): it tells which token holds the lock and reads the counter at the end.
func (r *run) harnessClient() (*fencehttp.Client, error) {
	var urls []string
	for _, s := range r.servers() {
		urls = append(urls, s.url())
	}
	opts := &fencehttp.ClientOptions{RequestTimeout: time.Second}
	if len(urls) > 1 {
		opts.AttemptTimeout = 300 * time.Millisecond
	}
	c, err := fencehttp.NewClient(strings.Join(urls, ","), opts)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return c, nil
}

// workerServer returns the workers' --server: fence serve's URL, or on the cluster
// store every node's, a comma-separated list their client fails over along.
func (r *run) workerServer() string {
	return strings.Join(r.workerURLs, ",")
}

// mode names a run in its folder and progress lines: "fenced" or "control".
func (c *Config) mode() string {
	if c.Fencing {
		return "fenced"
	}
	return "control"
}

// startWorkers starts cfg.Workers worker processes; start is the run's start on the
// monotonic clock.
func (r *run) startWorkers(start int64) error {
	fencing := "on"
	if !r.cfg.Fencing {
		fencing = "off"
	}
	r.workers = make([]*worker, r.cfg.Workers)
	for i := range r.workers {
		w := &worker{id: i, logPath: filepath.Join(r.dir, fmt.Sprintf("worker-%d.jsonl", i))}
		cmd := r.command(fmt.Sprintf("worker-%d", i), r.cfg.Binary, "chaos", "worker",
			"--server", r.workerServer(), "--lock", runLock, "--key", runKey, "--id", strconv.Itoa(i),
			"--ttl", r.cfg.TTL.String(), "--hold", r.cfg.Hold.String(), "--wait", (4 * r.cfg.TTL).String(),
			"--fencing", fencing, "--start", strconv.FormatInt(start, 10), "--log", w.logPath)
		cmd.Args = append(cmd.Args, r.workerArgs...)
		p, err := servers.StartCommand(fmt.Sprintf("worker %d", i), cmd, filepath.Join(r.dir, fmt.Sprintf("worker-%d.err", i)))
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		w.proc = p
		r.workers[i] = w
	}
	return nil
}

// killWorkers kills the workers still running (or stopped by a pause).
func (r *run) killWorkers() {
	for _, w := range r.workers {
		if w != nil && w.proc != nil {
			w.proc.Kill()
		}
	}
}

// stopWorkers stops the workers, all at once: SIGTERM ends their loop after the
// operation in flight; a worker still running servers.StopTimeout later is killed.
func (r *run) stopWorkers() {
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.proc.Stop(syscall.SIGTERM)
		}()
	}
	wg.Wait()
	for _, w := range r.workers {
		w.proc = nil
	}
}

// runFaults runs every nemesis for cfg.Duration, writing progress lines meanwhile,
// and returns the faults injected by name. It returns the errors of the nemeses that
// failed, once every nemesis healed its last fault.
func (r *run) runFaults(ctx context.Context, nemeses []nemesis) (map[string]int, error) {
	cfg := r.cfg
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	faults := map[string]int{}
	var fmu sync.Mutex
	count := func(kind string) { fmu.Lock(); faults[kind]++; fmu.Unlock() }
	var wg sync.WaitGroup
	var nemErr error
	var emu sync.Mutex
	for i, n := range nemeses {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runNemesis(runCtx, cfg, n, rng, count); err != nil {
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
				fmu.Lock()
				line := r.progressLine(time.Since(began), faults)
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
	return faults, nemErr
}

// progressLine is the progress line after elapsed, with the workers' counts so far.
func (r *run) progressLine(elapsed time.Duration, faults map[string]int) string {
	ops, acq := 0, 0
	for _, w := range r.workers {
		w.tail()
		w.mu.Lock()
		ops, acq = ops+w.ops, acq+w.acq
		w.mu.Unlock()
	}
	return fmt.Sprintf("chaos %s %3.0fs/%.0fs  ops %6d  acquisitions %5d  faults %s",
		r.cfg.mode(), elapsed.Seconds(), r.cfg.Duration.Seconds(), ops, acq, faultCounts(r.cfg.Nemeses, faults))
}

// history returns every worker's operations by invocation time, then a final read of
// the counter from res (retried for about 5 s while the resource recovers).
func (r *run) history(ctx context.Context, res resource, start int64) ([]Op, error) {
	final := Op{Worker: -1, Kind: KindRead, Key: runKey, Lock: runLock}
	var value string
	var err error
	for try := 0; ; try++ {
		final.Call = MonoNow() - start
		value, err = res.get(ctx, runKey)
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
	for _, w := range r.workers {
		wops, err := ReadHistoryFile(w.logPath)
		if err != nil {
			return nil, err
		}
		ops = append(ops, wops...)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return append(ops, final), nil
}
