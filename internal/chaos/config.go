package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fence"
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
var Nemeses = []string{NemesisPause, NemesisKill, NemesisLink, NemesisFailover, NemesisMember, NemesisDisk, NemesisClock, NemesisPartition, NemesisCrash}

// Bounds of Config.Workers: a race needs two workers, and each is a process.
const (
	MinWorkers = 2
	MaxWorkers = 64
)

// Config configures a chaos run.
type Config struct {
	Binary   string        // the fence binary (its serve and chaos worker modes)
	Workers  int           // worker processes, MinWorkers to MaxWorkers; default 4
	Duration time.Duration // how long the workers run; default 30s
	// TTL is the lease TTL; default 400ms. On the etcd and cluster stores it is at
	// least 1s, etcd's minimum lease TTL there, so that pauses (3 TTLs) outlast the
	// etcd lease that really holds the lock.
	TTL     time.Duration
	Hold    time.Duration // time between a worker's read and write; default 20ms
	Nemeses []string      // subset of Nemeses; empty means none
	// Store is what grants the workers' locks, one of Stores. Empty means the store the
	// nemeses need (redis for failover, etcd for member, postgres for crash), bolt
	// otherwise. Every nemesis must apply to it (Applies).
	Store string
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
	// Postgres, written through postgres.Guard; the run deletes its row first). On
	// the postgres store the default is ResourcePostgres on the store's own database.
	Resource string
	// Postgres is the DSN of the PostgreSQL of ResourcePostgres; on the postgres store
	// empty means the store's own database.
	Postgres string
}

// Summary is the outcome of a run.
type Summary struct {
	Store   string         // Config.Store as resolved: "bolt", "redis", "etcd"
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
	if c.Workers < MinWorkers || c.Workers > MaxWorkers {
		return fmt.Errorf("chaos: %w: workers %d not in [%d, %d]", fence.ErrInvalid, c.Workers, MinWorkers, MaxWorkers)
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
	if err := c.resolveStore(); err != nil {
		return err
	}
	if slices.Contains(c.Nemeses, NemesisClock) {
		if err := checkFaultClock(c.Binary); err != nil {
			return err
		}
	}
	if (c.Store == StoreEtcd || c.Store == StoreCluster) && c.TTL < etcdMinTTL {
		c.TTL = etcdMinTTL
	}
	if c.Store == StorePostgres && c.Resource == "" {
		c.Resource = ResourcePostgres
	}
	if err := validResource(c.Resource); err != nil {
		return err
	}
	ownDB := c.Store == StorePostgres && c.Resource == ResourcePostgres && c.Postgres == "" // filled by the store's setup
	if !ownDB && (c.Resource == ResourcePostgres) != (c.Postgres != "") {
		return fmt.Errorf("chaos: %w: a postgres DSN goes with the postgres resource, and only with it", fence.ErrInvalid)
	}
	if slices.Contains(c.Nemeses, NemesisPartition) && c.Resource == ResourcePostgres {
		return fmt.Errorf("chaos: %w: the partition nemesis puts the workers in network namespaces of their own, from which the postgres resource's server on this machine's loopback is out of reach", fence.ErrInvalid)
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}
