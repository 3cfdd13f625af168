package bolt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// The crash test runs this test binary again as a child (crashChildEnv names the
// store file) that acquires leases in a loop and prints every grant; the parent
// kills it with SIGKILL at random points and checks P1 and P6 across the kills.
const (
	crashChildEnv = "FENCE_BOLT_CRASH_CHILD"
	crashSeedEnv  = "FENCE_BOLT_CRASH_SEED"
	crashKillsEnv = "FENCE_BOLT_CRASH_KILLS"
	// crashBrokenEnv breaks the child's store on purpose (negative control).
	crashBrokenEnv = "FENCE_BOLT_CRASH_BROKEN"
)

// crashOptions keep the grace period short (SyncTTL+HorizonChunk = 280ms), the
// token block small (so many ceilings are written) and exercise both kinds of
// lease: TTLs up to 250ms are covered by the horizon, longer ones are written.
var crashOptions = Options{
	TokenBlock:    8,
	SyncTTL:       250 * time.Millisecond,
	HorizonChunk:  30 * time.Millisecond,
	FlushInterval: 20 * time.Millisecond,
}

// crashTTLs: the 2s one outlives a slow child restart on a loaded machine, so
// the P6 check is exercised even then.
var crashTTLs = []time.Duration{10 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond,
	250 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 2 * time.Second}

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChild(path))
	}
	os.Exit(m.Run())
}

// crashChild acquires leases until killed. Each line goes to stdout in one
// write, unbuffered:
//
//	G name token startUnixNano endUnixNano ttlNanos   granted (start/end bracket the call)
//	P name token startUnixNano ttlNanos                about to renew (printed before)
//	N name token startUnixNano ttlNanos                renewed (printed after success)
//	R name token                                       about to release (printed before)
//	F name startUnixNano endUnixNano                   not acquired
func crashChild(path string) int {
	seed, _ := strconv.ParseInt(os.Getenv(crashSeedEnv), 10, 64)
	rng := rand.New(rand.NewSource(seed))
	o := crashOptions
	brokenForTest = os.Getenv(crashBrokenEnv)
	s, err := Open(path, &o)
	if err != nil {
		fmt.Printf("E open: %v\n", err)
		return 3
	}
	fmt.Printf("O %d\n", time.Now().UnixNano())
	ctx := context.Background()
	for i := 0; ; i++ {
		// First try every repeated name once, right after the reopen, while the
		// leases of the killed run are most likely unexpired.
		name := fmt.Sprintf("r%d", i)
		if i >= 6 {
			name = fmt.Sprintf("r%d", rng.Intn(6))
			if rng.Intn(10) < 3 {
				name = fmt.Sprintf("u-%d-%d", seed, i)
			}
		}
		ttl := crashTTLs[rng.Intn(len(crashTTLs))]
		start := time.Now()
		l, err := s.Acquire(ctx, name, ttl, fence.WithWait(30*time.Millisecond))
		end := time.Now()
		if errors.Is(err, fence.ErrNotAcquired) {
			fmt.Printf("F %s %d %d\n", name, start.UnixNano(), end.UnixNano())
			continue
		}
		if err != nil {
			fmt.Printf("E acquire %s: %v\n", name, err)
			return 4
		}
		fmt.Printf("G %s %d %d %d %d\n", name, l.Token(), start.UnixNano(), end.UnixNano(), int64(ttl))
		switch r := rng.Intn(10); {
		case r < 5:
			fmt.Printf("R %s %d\n", name, l.Token())
			if err := l.Release(ctx); err != nil && !errors.Is(err, fence.ErrNotHeld) {
				fmt.Printf("E release %s: %v\n", name, err)
				return 5
			}
		case r < 7:
			ttl2 := crashTTLs[rng.Intn(len(crashTTLs))]
			start := time.Now()
			// Announce the renewal first: it may shorten the lease, and a kill can
			// come after the store applied it but before "N" is printed.
			fmt.Printf("P %s %d %d %d\n", name, l.Token(), start.UnixNano(), int64(ttl2))
			if err := l.Renew(ctx, ttl2); err == nil {
				fmt.Printf("N %s %d %d %d\n", name, l.Token(), start.UnixNano(), int64(ttl2))
			} else if !errors.Is(err, fence.ErrNotHeld) {
				fmt.Printf("E renew %s: %v\n", name, err)
				return 6
			}
		}
	}
}

// crashLease is what the parent knows of a lease from the child's output.
type crashLease struct {
	token    fence.Token
	minUntil int64 // a lower bound of the store's expiry, Unix nanoseconds
	released bool  // a release was announced: it may have happened
	run      int
}

// crashChecker checks the child's lines of every run against everything before.
type crashChecker struct {
	t        *testing.T
	run      int
	tokens   map[fence.Token]string // every token seen, with its name
	maxToken map[string]fence.Token // per name, over earlier runs
	runMax   map[string]fence.Token // per name, in this run
	leases   map[string]*crashLease // per name, the last lease
	grants   int
	crossRun int // grants checked against an unreleased lease from an earlier run
	heldBack int // of those, calls that began while that lease was unexpired
	refused  int // refusals that P6 required: a grant would have violated it
	// record makes violations be recorded (for the negative control) instead of
	// failing the test.
	record     bool
	violations []string
}

func (c *crashChecker) startRun(run int) {
	for name, tok := range c.runMax {
		if tok > c.maxToken[name] {
			c.maxToken[name] = tok
		}
	}
	c.runMax = make(map[string]fence.Token)
	c.run = run
}

func (c *crashChecker) violate(format string, args ...any) {
	c.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if !c.record {
		c.t.Fatal(msg)
	}
	c.violations = append(c.violations, msg)
}

func newCrashChecker(t *testing.T) *crashChecker {
	return &crashChecker{t: t, tokens: map[fence.Token]string{}, maxToken: map[string]fence.Token{},
		runMax: map[string]fence.Token{}, leases: map[string]*crashLease{}}
}

func (c *crashChecker) line(line string) {
	t := c.t
	f := strings.Fields(line)
	num := func(i int) int64 {
		if i >= len(f) {
			t.Fatalf("run %d: short line %q", c.run, line)
		}
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("run %d: bad number in %q: %v", c.run, line, err)
		}
		return n
	}
	switch f[0] {
	case "O":
	case "E":
		t.Fatalf("run %d: child failed: %s", c.run, line)
	case "G":
		name, tok, start, end, ttl := f[1], fence.Token(num(2)), num(3), num(4), num(5)
		c.grants++
		if other, dup := c.tokens[tok]; dup {
			c.violate("run %d: P1 violated: token %d granted on %q was already granted on %q", c.run, tok, name, other)
		}
		c.tokens[tok] = name
		if max := c.maxToken[name]; tok <= max {
			c.violate("run %d: P1 violated: %q got token %d after a crash, but %d was granted before", c.run, name, tok, max)
		}
		if max := c.runMax[name]; tok <= max {
			c.violate("run %d: P1 violated: %q got token %d after %d in the same run", c.run, name, tok, max)
		}
		c.runMax[name] = tok
		if prev := c.leases[name]; prev != nil && !prev.released {
			if end < prev.minUntil {
				c.violate("run %d: P6 violated: %q granted (token %d) by %v, %v before the lease of token %d (run %d) expired",
					c.run, name, tok, time.Unix(0, end).Format("15:04:05.000000"), time.Duration(prev.minUntil-end), prev.token, prev.run)
			}
			if prev.run != c.run {
				c.crossRun++
				if start < prev.minUntil {
					c.heldBack++ // the call began while the pre-crash lease was unexpired
				}
			}
		}
		c.leases[name] = &crashLease{token: tok, minUntil: start + ttl, run: c.run}
	case "F":
		name, end := f[1], num(3)
		if prev := c.leases[name]; prev != nil && !prev.released && prev.run != c.run && end < prev.minUntil {
			c.refused++ // granting this would have violated P6
		}
	case "P": // the renewal may happen: the expiry is at least the smaller bound
		name, tok, start, ttl := f[1], fence.Token(num(2)), num(3), num(4)
		if l := c.leases[name]; l != nil && l.token == tok {
			l.minUntil = min(l.minUntil, start+ttl)
		}
	case "N": // the renewal happened at or after start
		name, tok, start, ttl := f[1], fence.Token(num(2)), num(3), num(4)
		if l := c.leases[name]; l != nil && l.token == tok {
			l.minUntil = start + ttl
		}
	case "R":
		if l := c.leases[f[1]]; l != nil && l.token == fence.Token(num(2)) {
			l.released = true
		}
	default:
		t.Fatalf("run %d: unexpected line %q", c.run, line)
	}
}

// TestCrash_KillNine_NoTokenReissuedNoLeaseGrantedEarly runs a child that acquires
// leases (repeated and distinct names, TTLs on both sides of SyncTTL, renewals and
// releases) and SIGKILLs it at random points, at least 50 times, reopening the
// same file each time. Across all runs no token is granted twice or lower than
// one granted before for that name (P1), and no name is granted while a lease
// printed before a crash was still unexpired (P6). Set FENCE_BOLT_CRASH_SEED to
// replay a run, FENCE_BOLT_CRASH_KILLS for more kills.
func TestCrash_KillNine_NoTokenReissuedNoLeaseGrantedEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short mode")
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv(crashSeedEnv); v != "" {
		seed, _ = strconv.ParseInt(v, 10, 64)
	}
	kills := 50
	if v := os.Getenv(crashKillsEnv); v != "" {
		kills, _ = strconv.Atoi(v)
	}
	t.Logf("seed %d (replay with %s=%d), %d kills", seed, crashSeedEnv, seed, kills)
	rng := rand.New(rand.NewSource(seed))
	path := filepath.Join(t.TempDir(), "fence.db")
	c := newCrashChecker(t)
	began := time.Now()
	grantsAfterReopen := runCrashes(t, rng, path, kills, "", c, nil)
	t.Logf("%d kills in %v: %d grants, %d grants after a reopen, %d checked against an unreleased pre-crash lease (%d requested while it was unexpired), %d refusals P6 required",
		kills, time.Since(began).Round(time.Millisecond), c.grants, grantsAfterReopen, c.crossRun, c.heldBack, c.refused)
	if c.refused == 0 {
		t.Fatalf("no acquisition was attempted while a pre-crash lease was unexpired: P6 was not exercised")
	}
	if grantsAfterReopen < kills {
		t.Fatalf("only %d grants after reopening in %d runs: the crash test checked too little", grantsAfterReopen, kills)
	}

	// The file still opens and hands out tokens above all of them.
	c.startRun(kills)
	o := crashOptions
	s, err := Open(path, &o)
	if err != nil {
		t.Fatalf("final reopen: %v", err)
	}
	defer s.Close()
	var max fence.Token
	for tok := range c.tokens {
		if tok > max {
			max = tok
		}
	}
	l, err := s.Acquire(context.Background(), "r0", time.Second, fence.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("final acquire: %v", err)
	}
	if l.Token() <= max {
		t.Fatalf("final token %d, want above every token printed (%d)", l.Token(), max)
	}
}

// runCrashes runs the child kills times on the store at path, SIGKILLing it at
// random points drawn from rng, feeding every line to c. broken is passed to the
// child (see brokenForTest); stop, if not nil, ends the runs early. It returns
// how many grants were made by children that reopened a used file.
func runCrashes(t *testing.T, rng *rand.Rand, path string, kills int, broken string, c *crashChecker, stop func() bool) int {
	grantsAfterReopen := 0
	for run := 0; run < kills && (stop == nil || !stop()); run++ {
		c.startRun(run)
		before := c.grants
		killAfterGrant := rng.Intn(5) != 0 // else kill at a random point after open
		delay := time.Duration(rng.Int63n(int64(120 * time.Millisecond)))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path, fmt.Sprintf("%s=%d", crashSeedEnv, rng.Int63()),
			crashBrokenEnv+"="+broken,
			"GORACE=halt_on_error=1") // a race in the child fails the run (exit 66, not SIGKILL)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var kill <-chan time.Time
		guard := time.NewTimer(20 * time.Second)
		for lines != nil {
			select {
			case line, ok := <-lines:
				if !ok {
					lines = nil
					break
				}
				c.line(line)
				if kill == nil && (line[0] == 'O' && !killAfterGrant || line[0] == 'G') {
					kill = time.After(delay)
				}
			case <-kill:
				kill = nil
				if err := cmd.Process.Kill(); err != nil { // SIGKILL
					t.Fatalf("run %d: kill: %v", run, err)
				}
			case <-guard.C:
				_ = cmd.Process.Kill()
				t.Fatalf("run %d: child printed no grant within 20s", run)
			}
		}
		guard.Stop()
		err = cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
			t.Fatalf("run %d: child ended with %v, want killed by SIGKILL", run, err)
		}
		if run > 0 {
			grantsAfterReopen += c.grants - before
		}
	}
	return grantsAfterReopen
}

// TestCrash_BrokenStore_CheckerFindsViolations is the crash test's negative
// control: with a store that forgets its token ceiling, or its lease horizon and
// written leases, after a restart, the same checker must report P1 or P6
// violations. A checker that cannot fail proves nothing.
func TestCrash_BrokenStore_CheckerFindsViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short mode")
	}
	for _, tc := range []struct{ broken, want string }{{"tokens", "P1 violated"}, {"leases", "P6 violated"}} {
		t.Run(tc.broken, func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			c := newCrashChecker(t)
			c.record = true
			found := func() bool {
				for _, v := range c.violations {
					if strings.Contains(v, tc.want) {
						return true
					}
				}
				return false
			}
			runCrashes(t, rand.New(rand.NewSource(seed)), filepath.Join(t.TempDir(), "fence.db"), 20, tc.broken, c, found)
			if !found() {
				t.Fatalf("store broken in its %s: no %q found in 20 kills; violations: %q", tc.broken, tc.want, c.violations)
			}
			t.Logf("found as expected: %s", c.violations[0])
		})
	}
}
