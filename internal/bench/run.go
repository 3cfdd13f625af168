package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencelock/fence"
)

// Config is one run of the table.
type Config struct {
	Rows     []string      // which rows, in the table's order; nil means Rows
	Clients  int           // clients of the pairs/s measurement; 0 means 16
	Duration time.Duration // of each measurement of each row in each round; 0 means 1s
	Rounds   int           // 0 means 5
	// Shared makes the pairs/s clients one client (one connection pool, one Locker)
	// used by Clients goroutines, as in one process; false gives each its own, as
	// separate processes. A batching client (fence's Redis Locker pipelines
	// concurrent calls) gains only when shared.
	Shared bool
	// Fence is the path of the fence binary, for the rows fence-serve-etcd3 and
	// cluster (Options.Fence).
	Fence string
	// Progress, if set, is called before each measurement.
	Progress func(Progress)
}

// Progress says which measurement a run is about to make.
type Progress struct {
	Round, Rounds int    // from 1
	Step, Steps   int    // measurements of the whole run, from 1
	Row           string // e.g. RowFenceRedis
	Measure       string // "pair", "handoff", "pairs/s" or "expiry"
}

// Result is one row's figures: in each of its slices, one per round.
type Result struct {
	Row         string
	Pair        []time.Duration // median pair latency of each round
	Handoff     []time.Duration // median handoff of each round
	PairsPerSec []float64       // pairs/s of the clients together, each round
	Expiry      []time.Duration // median handoff after an expiry of each round; nil for a row without (ClusterRows have it)
}

// ExpiryMedian returns the median over rounds of the handoff after an expiry, 0
// for a row that does not measure it.
func (r Result) ExpiryMedian() time.Duration { return medianOf(r.Expiry) }

// PairMedian returns the median over rounds of the pair latency.
func (r Result) PairMedian() time.Duration { return medianOf(r.Pair) }

// HandoffMedian returns the median over rounds of the handoff.
func (r Result) HandoffMedian() time.Duration { return medianOf(r.Handoff) }

// PairsPerSecMedian returns the median over rounds of pairs/s.
func (r Result) PairsPerSecMedian() float64 {
	if len(r.PairsPerSec) == 0 {
		return 0
	}
	s := slices.Clone(r.PairsPerSec)
	slices.Sort(s)
	return s[len(s)/2]
}

// withDefaults returns c with its zero fields set to their defaults, or an error
// matching fence.ErrInvalid for a negative field or an unknown row.
func (c Config) withDefaults() (Config, error) {
	if c.Clients < 0 || c.Duration < 0 || c.Rounds < 0 {
		return c, fmt.Errorf("bench: %w: clients, duration and rounds must not be negative", fence.ErrInvalid)
	}
	if c.Clients == 0 {
		c.Clients = 16
	}
	if c.Duration == 0 {
		c.Duration = time.Second
	}
	if c.Rounds == 0 {
		c.Rounds = 5
	}
	if len(c.Rows) == 0 {
		c.Rows = slices.Clone(Rows)
	}
	for _, r := range c.Rows {
		if !slices.Contains(knownRows, r) {
			return c, fmt.Errorf("bench: %w: unknown row %q", fence.ErrInvalid, r)
		}
	}
	return c, nil
}

// measures are the measurements of a round, in order; "expiry" is made only on
// the rows hasExpiry names.
var measures = []string{"pair", "handoff", "pairs/s", "expiry"}

// Run starts the servers cfg.Rows need (see StartWith), makes max(cfg.Clients, 2)
// clients of each row, and measures cfg.Rounds rounds: in each, every
// measurement of every row (the handoff after an expiry only on ClusterRows), the
// rows in a fresh shuffled order each time, each measurement taking cfg.Duration
// (an expiry's at least one sample of over ExpiryTTL). It returns the rows' results in cfg.Rows'
// order. It returns an error matching fence.ErrInvalid for a bad cfg, the error
// of Start, or the first error of a client or a measurement (naming the row);
// ctx ending stops it with ctx's error.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	env, err := StartWith(ctx, cfg.Rows, Options{Fence: cfg.Fence})
	if err != nil {
		return nil, err
	}
	defer env.Close()
	rigs := make([]*rig, len(cfg.Rows))
	defer func() {
		for _, g := range rigs {
			if g != nil {
				g.close()
			}
		}
	}()
	for i, row := range cfg.Rows {
		if rigs[i], err = newRig(env, row, cfg.Clients, cfg.Shared); err != nil {
			return nil, err
		}
	}
	results := make([]Result, len(cfg.Rows))
	for i, row := range cfg.Rows {
		results[i].Row = row
	}
	bud := Budget{D: cfg.Duration}
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same orders every run
	order := make([]int, len(cfg.Rows))
	for i := range order {
		order[i] = i
	}
	perRound := 0
	for _, row := range cfg.Rows {
		perRound += len(measures) - 1
		if hasExpiry(row) {
			perRound++
		}
	}
	step, steps := 0, cfg.Rounds*perRound
	for round := 1; round <= cfg.Rounds; round++ {
		for _, m := range measures {
			rng.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
			for _, k := range order {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				if m == "expiry" && rigs[k].abandoner == nil {
					continue
				}
				step++
				if cfg.Progress != nil {
					cfg.Progress(Progress{Round: round, Rounds: cfg.Rounds, Step: step, Steps: steps, Row: cfg.Rows[k], Measure: m})
				}
				g, r := rigs[k], &results[k]
				switch m {
				case "pair":
					d, _, err := Pair(ctx, g.pair, bud)
					if err != nil {
						return nil, g.fail(m, err)
					}
					r.Pair = append(r.Pair, d)
				case "handoff":
					d, _, err := Handoff(ctx, g.holder, g.waiter, bud)
					if err != nil {
						return nil, g.fail(m, err)
					}
					r.Handoff = append(r.Handoff, d)
				case "pairs/s":
					ps, _, err := Throughput(ctx, g.parallel, bud)
					if err != nil {
						return nil, g.fail(m, err)
					}
					r.PairsPerSec = append(r.PairsPerSec, ps)
				case "expiry":
					d, _, err := Expiry(ctx, g.abandoner, "expiry", g.expiryWaiter, bud)
					if err != nil {
						return nil, g.fail(m, err)
					}
					r.Expiry = append(r.Expiry, d)
				}
			}
		}
	}
	return results, nil
}

// rig is one row's clients and locks: pair, holder and waiter, parallel (one
// lock per client, each on a name of its own), and on the rows that measure it
// the expiry's abandoning holder and its waiter. The measurements never run at
// the same time, so they share the clients.
type rig struct {
	row            string
	clients        []Client
	pair           Lock
	holder, waiter Lock
	parallel       []Lock
	abandoner      Abandoner // nil: the row does not measure Expiry
	expiryWaiter   Lock
}

// newRig makes max(n, 2) clients of row on env (2 if shared: the parallel locks then
// all come from the first). It returns the error of a client.
func newRig(env *Env, row string, n int, shared bool) (*rig, error) {
	g := &rig{row: row}
	clients := max(n, 2)
	if shared {
		clients = 2
	}
	for i := 0; i < clients; i++ {
		c, err := env.NewClient(row)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("bench: %s: new client: %w", Label(row), err)
		}
		g.clients = append(g.clients, c)
	}
	g.pair = g.clients[0].Lock("pair")
	g.holder = g.clients[0].Lock("handoff")
	g.waiter = g.clients[1].Lock("handoff")
	if a, ok := g.clients[0].(Abandoner); ok && hasExpiry(row) {
		g.abandoner, g.expiryWaiter = a, g.clients[1].Lock("expiry")
	}
	for i := 0; i < n; i++ {
		c := g.clients[0]
		if !shared {
			c = g.clients[i]
		}
		g.parallel = append(g.parallel, c.Lock(fmt.Sprintf("parallel-%d", i)))
	}
	return g, nil
}

// fail wraps err of the measurement m of the rig's row.
func (g *rig) fail(m string, err error) error {
	return fmt.Errorf("bench: %s: %s: %w", Label(g.row), m, err)
}

// close closes the rig's clients and returns their first error.
func (g *rig) close() error {
	var errs []error
	for _, c := range g.clients {
		errs = append(errs, c.Close())
	}
	g.clients = nil
	return errors.Join(errs...)
}
