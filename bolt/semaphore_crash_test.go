package bolt

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// semChildEnv names the store file of the semaphore crash test's child (this
// test binary run again), which takes permits of "pool" (limit semLimit) and
// shared and exclusive leases of "doc" until it is killed; crashSeedEnv,
// crashBrokenEnv and crashLeasesEnv serve it as they serve the crash child.
const (
	semChildEnv = "FENCE_BOLT_SEM_CHILD"
	semLimit    = 3
)

var semTTLs = []time.Duration{20 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, time.Second, 2 * time.Second}

// semChild prints, each line in one write, with times of the real clock:
//
//	A name kind ttl                          about to acquire (kind s: permit, r: shared, x: exclusive)
//	G name kind token slot start end ttl id  granted
//	P name token start ttl                   about to renew an earlier run's lease
//	N name token start end ttl               renewed
//	X name token start end                   renewal refused: not held
//	R name token                             about to release
//	D name token                             released
func semChild(path string) int {
	seed, _ := strconv.ParseInt(os.Getenv(crashSeedEnv), 10, 64)
	rng := rand.New(rand.NewSource(seed))
	s, err := openBroken(path, &Options{TokenBlock: 8}, os.Getenv(crashBrokenEnv))
	if err != nil {
		fmt.Printf("E open: %v\n", err)
		return 3
	}
	if rng.Intn(2) == 0 {
		s.setCheckpointAt(2048)
	}
	ctx := context.Background()
	fmt.Printf("O\n")
	release := func(name string, tok fence.Token, id string) int {
		fmt.Printf("R %s %d\n", name, tok)
		if err := s.Release(ctx, name, id); err != nil && !errors.Is(err, fence.ErrNotHeld) {
			fmt.Printf("E release %s: %v\n", name, err)
			return 5
		}
		fmt.Printf("D %s %d\n", name, tok)
		return 0
	}
	if v := os.Getenv(crashLeasesEnv); v != "" {
		for _, l := range strings.Split(v, ",") {
			f := strings.Split(l, ":")
			name, id := f[0], f[2]
			tok, _ := strconv.ParseUint(f[1], 10, 64)
			ttl := semTTLs[rng.Intn(len(semTTLs))]
			start := time.Now()
			fmt.Printf("P %s %d %d %d\n", name, tok, start.UnixNano(), int64(ttl))
			err := s.Renew(ctx, name, id, ttl)
			switch {
			case err == nil:
				fmt.Printf("N %s %d %d %d %d\n", name, tok, start.UnixNano(), time.Now().UnixNano(), int64(ttl))
				if rng.Intn(2) == 0 {
					if code := release(name, fence.Token(tok), id); code != 0 {
						return code
					}
				}
			case errors.Is(err, fence.ErrNotHeld):
				fmt.Printf("X %s %d %d %d\n", name, tok, start.UnixNano(), time.Now().UnixNano())
			default:
				fmt.Printf("E renew %s: %v\n", name, err)
				return 6
			}
		}
	}
	for {
		name, kind, opts := "pool", "s", []fence.AcquireOption{fence.WithLimit(semLimit)}
		switch r := rng.Intn(10); {
		case r < 3:
			name, kind, opts = "doc", "r", []fence.AcquireOption{fence.WithShared()}
		case r < 4:
			name, kind, opts = "doc", "x", nil
		}
		ttl := semTTLs[rng.Intn(len(semTTLs))]
		fmt.Printf("A %s %s %d\n", name, kind, int64(ttl))
		start := time.Now()
		l, err := s.Acquire(ctx, name, ttl, append(opts, fence.WithWait(20*time.Millisecond))...)
		end := time.Now()
		if errors.Is(err, fence.ErrNotAcquired) {
			fmt.Printf("F %s %s\n", name, kind)
			continue
		}
		if err != nil {
			fmt.Printf("E acquire %s: %v\n", name, err)
			return 4
		}
		fmt.Printf("G %s %s %d %d %d %d %d %s\n", name, kind, l.Token(), l.Slot(), start.UnixNano(), end.UnixNano(), int64(ttl), l.ID())
		if rng.Intn(2) == 0 {
			if code := release(name, l.Token(), l.ID()); code != 0 {
				return code
			}
		}
	}
}

// semLease is what the parent knows of one lease from the child's lines.
type semLease struct {
	name, kind, id     string
	token              fence.Token
	slot               int
	minUntil, maxUntil int64 // bounds of its expiry at the store, Unix nanoseconds
	renewTTL           int64 // a renewal announced and not answered
	released, acked    bool  // a release announced; acknowledged
	run                int
}

// semChecker checks every grant against every lease printed before, in any run.
type semChecker struct {
	t          *testing.T
	run        int
	leases     []*semLease
	tokens     map[fence.Token]bool
	crossRun   int // grants checked against a live lease of an earlier run
	renewed    int // renewals, after a restart, of an earlier run's lease
	record     bool
	violations []string
}

func (c *semChecker) violate(format string, args ...any) {
	c.t.Helper()
	if !c.record {
		c.t.Fatalf(format, args...)
	}
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// lease returns the lease of name and token, or nil.
func (c *semChecker) lease(name string, tok fence.Token) *semLease {
	for _, l := range c.leases {
		if l.name == name && l.token == tok {
			return l
		}
	}
	return nil
}

func (c *semChecker) line(line string) {
	f := strings.Fields(line)
	num := func(i int) int64 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			c.t.Fatalf("run %d: bad line %q", c.run, line)
		}
		return n
	}
	switch f[0] {
	case "O", "A", "F":
	case "E":
		c.t.Fatalf("run %d: child failed: %s", c.run, line)
	case "G":
		g := &semLease{name: f[1], kind: f[2], token: fence.Token(num(3)), slot: int(num(4)), id: f[8], run: c.run}
		start, end, ttl := num(5), num(6), num(7)
		g.minUntil, g.maxUntil = start+ttl, end+ttl
		if c.tokens[g.token] {
			c.violate("run %d: P1 violated: token %d granted twice", c.run, g.token)
		}
		c.tokens[g.token] = true
		if g.kind == "s" && (g.slot < 0 || g.slot >= semLimit) {
			c.violate("run %d: permit of token %d has slot %d, limit %d", c.run, g.token, g.slot, semLimit)
		}
		for _, l := range c.leases {
			if l.name != g.name || l.released || end >= l.minUntil {
				continue // another name, maybe released, or maybe expired by the grant
			}
			if l.token >= g.token {
				c.violate("run %d: P1 violated: %q granted token %d after %d", c.run, g.name, g.token, l.token)
			}
			if l.run != c.run {
				c.crossRun++
			}
			if g.kind == "x" || l.kind == "x" || g.kind == "s" && g.slot == l.slot {
				c.violate("run %d: P6 violated: %q granted (kind %s, slot %d, token %d) while the lease of token %d (kind %s, slot %d, run %d) was live for %v more",
					c.run, g.name, g.kind, g.slot, g.token, l.token, l.kind, l.slot, l.run, time.Duration(l.minUntil-end))
			}
		}
		c.leases = append(c.leases, g)
	case "P":
		if l := c.lease(f[1], fence.Token(num(2))); l != nil {
			l.minUntil = min(l.minUntil, num(3)+num(4))
			l.renewTTL = num(4)
		}
	case "N":
		if l := c.lease(f[1], fence.Token(num(2))); l != nil {
			c.renewed++
			l.minUntil, l.maxUntil, l.renewTTL = num(3)+num(5), num(4)+num(5), 0
		}
	case "X":
		if l := c.lease(f[1], fence.Token(num(2))); l != nil {
			if !l.released && num(4) < l.minUntil {
				c.violate("run %d: P6 violated: renewal of %q token %d refused %v before it expired",
					c.run, l.name, l.token, time.Duration(l.minUntil-num(4)))
			}
			l.renewTTL = 0
		}
	case "R":
		if l := c.lease(f[1], fence.Token(num(2))); l != nil {
			l.released = true
		}
	case "D":
		if l := c.lease(f[1], fence.Token(num(2))); l != nil {
			l.released, l.acked = true, true
		}
	default:
		c.t.Fatalf("run %d: unexpected line %q", c.run, line)
	}
}

// carried returns the leases that may be live at now, for crashLeasesEnv.
func (c *semChecker) carried(now int64) string {
	var out []string
	for _, l := range c.leases {
		if !l.acked && l.maxUntil > now {
			out = append(out, fmt.Sprintf("%s:%d:%s", l.name, l.token, l.id))
		}
	}
	return strings.Join(out, ",")
}

// runSemCrashes runs the child kills times on one file, SIGKILLing it a random
// while after its first grant, until stop (if not nil) says enough.
func runSemCrashes(t *testing.T, rng *rand.Rand, kills int, broken string, c *semChecker, stop func() bool) {
	path := filepath.Join(t.TempDir(), "fence.db")
	for run := 0; run < kills && (stop == nil || !stop()); run++ {
		c.run = run
		cmd, lines, in := startChild(t, semChildEnv+"="+path, fmt.Sprintf("%s=%d", crashSeedEnv, rng.Int63()),
			crashBrokenEnv+"="+broken, crashLeasesEnv+"="+c.carried(time.Now().UnixNano()))
		defer in.Close()
		var kill <-chan time.Time
		drainChild(t, run, cmd, lines, func() <-chan time.Time { return kill }, func(line string) {
			c.line(line)
			if kill == nil && line[0] == 'G' {
				kill = time.After(time.Duration(rng.Int63n(int64(150 * time.Millisecond))))
			}
		}, func() {
			_ = cmd.Process.Kill() // SIGKILL
			kill = make(chan time.Time)
		})
		waitKilled(t, run, cmd)
		killed := time.Now().UnixNano()
		for _, l := range c.leases {
			if l.renewTTL != 0 {
				l.maxUntil, l.renewTTL = max(l.maxUntil, killed+l.renewTTL), 0
			}
		}
	}
}

// TestSemaphoreCrash_KillNine_PermitsAndSharedLeasesHonoured kills a child that
// takes permits of a semaphore and shared and exclusive leases of a lock 25
// times, reopening the file each time: no slot, and no exclusive lease, is
// granted while a lease printed before a crash is live (P6 per slot), no token
// repeats (P1), and holders renew and release their leases after the restart.
// A store that forgets its leases at a restart is caught by the same checker.
func TestSemaphoreCrash_KillNine_PermitsAndSharedLeasesHonoured(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short mode")
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	c := &semChecker{t: t, tokens: map[fence.Token]bool{}}
	runSemCrashes(t, rand.New(rand.NewSource(seed)), 25, "", c, nil)
	t.Logf("%d grants, %d checked against a live lease of an earlier run, %d renewals across a restart", len(c.leases), c.crossRun, c.renewed)
	if c.crossRun == 0 || c.renewed == 0 {
		t.Fatalf("restarts not exercised: %d grants checked against live pre-crash leases, %d renewals", c.crossRun, c.renewed)
	}

	t.Run("negative control", func(t *testing.T) {
		c := &semChecker{t: t, tokens: map[fence.Token]bool{}, record: true}
		runSemCrashes(t, rand.New(rand.NewSource(seed)), 25, "leases", c, func() bool { return len(c.violations) > 0 })
		if len(c.violations) == 0 {
			t.Fatal("a store that forgets its leases at a restart: no violation found in 25 kills")
		}
		t.Logf("found as expected: %s", c.violations[0])
	})
}
