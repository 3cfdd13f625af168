package bolt

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
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
	// crashWallEnv is how far the child's wall clock runs ahead of the real one
	// (nanoseconds): the forward steps of earlier runs, which a restart keeps.
	crashWallEnv = "FENCE_BOLT_CRASH_WALL"
	// crashLeasesEnv lists the leases of earlier runs that may still be held
	// (name:token:id, comma-separated): the child renews or releases some of
	// them right after it opens the store, as their holders would.
	crashLeasesEnv = "FENCE_BOLT_CRASH_LEASES"
)

// crashOptions keep the token block small, so many ceilings are written.
var crashOptions = Options{
	TokenBlock:    8,
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
	if path := os.Getenv(semChildEnv); path != "" {
		os.Exit(semChild(path))
	}
	os.Exit(m.Run())
}

// crashChild acquires leases until killed. Each line goes to stdout in one
// write, unbuffered; times are of the real clock (time.Now), never of the
// stepped wall clock the store is given:
//
//	O unixNano                                          opened
//	A name ttl                                          about to acquire (printed before)
//	G name token start end ttl id owner                 granted (start/end bracket the call; owner "-": none)
//	I name token owner                                  Inspect of an earlier run's lease after the open (token 0: free)
//	F name start end                                    not acquired
//	P name token start ttl                              about to renew (printed before)
//	N name token start end ttl                          renewed (printed after success)
//	X name token start end                              renewal refused: not held
//	R name token                                        about to release or revoke (printed before)
//	D name token                                        released or revoked (printed after success)
//	T offset                                            wants to step the wall clock to real+offset (waits for a line on stdin)
//	S                                                   the step is absorbed (a grant was written since)
//	H name seen                                         healed (printed after Heal returned: on disk)
func crashChild(path string) int {
	seed, _ := strconv.ParseInt(os.Getenv(crashSeedEnv), 10, 64)
	rng := rand.New(rand.NewSource(seed))
	var offset atomic.Int64
	off, _ := strconv.ParseInt(os.Getenv(crashWallEnv), 10, 64)
	offset.Store(off)
	o := crashOptions
	o.Wall = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	broken := os.Getenv(crashBrokenEnv)
	if broken == forgetSteps {
		// The store never sees this run's steps, which the next run's wall
		// clock shows: it writes expiries as one ignoring them would.
		o.Wall = func() time.Time { return time.Now().Add(time.Duration(off)) }
	}
	s, err := openBroken(path, &o, broken)
	if err != nil {
		fmt.Printf("E open: %v\n", err)
		return 3
	}
	if rng.Intn(2) == 0 {
		s.setCheckpointAt(2048) // checkpoint every few commits: kills land in them too
	}
	fmt.Printf("O %d\n", time.Now().UnixNano())
	ctx := context.Background()
	// finish releases the lease, or revokes it by name (Revoke is durable as
	// Release is: a revoked name is free after the restart).
	finish := func(name string, tok fence.Token, id string, revoke bool) int {
		fmt.Printf("R %s %d\n", name, tok)
		op, err := "release", error(nil)
		if revoke {
			op, err = "revoke", s.Revoke(ctx, name)
		} else {
			err = s.Release(ctx, name, id)
		}
		switch {
		case err == nil:
			fmt.Printf("D %s %d\n", name, tok)
		case !errors.Is(err, fence.ErrNotHeld):
			fmt.Printf("E %s %s: %v\n", op, name, err)
			return 5
		}
		return 0
	}
	release := func(name string, tok fence.Token, id string) int { return finish(name, tok, id, false) }
	// The holders of earlier runs' leases renew or release some of them.
	if v := os.Getenv(crashLeasesEnv); v != "" {
		for _, l := range strings.Split(v, ",") {
			f := strings.Split(l, ":")
			name, id := f[0], f[2]
			tok, _ := strconv.ParseUint(f[1], 10, 64)
			// The restored lease keeps its owner.
			info, err := s.Inspect(ctx, name)
			if err != nil {
				fmt.Printf("E inspect %s: %v\n", name, err)
				return 8
			}
			fmt.Printf("I %s %d %s\n", name, info.Token, ownerField(info.Owner))
			if rng.Intn(3) == 0 {
				continue // left alone: it must still keep others out
			}
			ttl := crashTTLs[rng.Intn(len(crashTTLs))]
			start := time.Now()
			fmt.Printf("P %s %d %d %d\n", name, tok, start.UnixNano(), int64(ttl))
			err = s.Renew(ctx, name, id, ttl)
			end := time.Now()
			switch {
			case err == nil:
				fmt.Printf("N %s %d %d %d %d\n", name, tok, start.UnixNano(), end.UnixNano(), int64(ttl))
				if rng.Intn(2) == 0 {
					if code := release(name, fence.Token(tok), id); code != 0 {
						return code
					}
				}
			case errors.Is(err, fence.ErrNotHeld):
				fmt.Printf("X %s %d %d %d\n", name, tok, start.UnixNano(), end.UnixNano())
			default:
				fmt.Printf("E renew %s: %v\n", name, err)
				return 6
			}
		}
	}
	stepAt := -1
	if rng.Intn(2) == 0 {
		stepAt = 3 + rng.Intn(12)
	}
	var top fence.Token // the highest token this run was granted
	for i := 0; ; i++ {
		if i > 6 && rng.Intn(12) == 0 {
			// Heal a repeated name a little above every token of this run (so
			// usually above the shared counter: its floor), as P4 does after a
			// regression; a kill can come before or after the floor is written.
			name := fmt.Sprintf("r%d", rng.Intn(6))
			info, err := s.Inspect(ctx, name)
			if err != nil {
				fmt.Printf("E inspect %s: %v\n", name, err)
				return 8
			}
			seen := max(top, info.LastToken) + 1 + fence.Token(rng.Intn(64))
			if err := s.Heal(ctx, name, seen); err != nil {
				fmt.Printf("E heal %s: %v\n", name, err)
				return 9
			}
			fmt.Printf("H %s %d\n", name, seen)
		}
		// First a name never used, then every repeated name once, without
		// waiting: right after the reopen each must be granted at once unless a
		// lease of the killed run may still hold it.
		name := fmt.Sprintf("f-%d", seed)
		wait := fence.WithWait(0)
		switch {
		case i >= 1 && i <= 6:
			name = fmt.Sprintf("r%d", i-1)
		case i > 6:
			name = fmt.Sprintf("r%d", rng.Intn(6))
			if rng.Intn(10) < 3 {
				name = fmt.Sprintf("u-%d-%d", seed, i)
			}
			wait = fence.WithWait(30 * time.Millisecond)
		}
		if i == stepAt {
			// A forward step of the wall clock (as at boot, before NTP syncs),
			// absorbed by the next grant's commit; the parent holds its kill
			// from T to S.
			step := time.Second + time.Duration(rng.Int63n(int64(2*time.Second)))
			fmt.Printf("T %d\n", offset.Load()+int64(step))
			// Step only once the parent has promised not to kill before S (it
			// may have sent the kill already: then it never answers).
			if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
				fmt.Printf("E read the parent's go-ahead: %v\n", err)
				return 7
			}
			offset.Add(int64(step))
			name = fmt.Sprintf("s-%d", seed)
			wait = fence.WithWait(fence.WaitForever) // S must follow
		}
		ttl := crashTTLs[rng.Intn(len(crashTTLs))]
		// Announce it: a kill can come after the grant is written but before
		// "G" is printed, and then the lease holds the name after the restart.
		fmt.Printf("A %s %d\n", name, int64(ttl))
		start := time.Now()
		// Half the grants name an owner (with a space, as `fence lock` does), half
		// none: the log and the file then hold records of both layouts.
		owner := ""
		if rng.Intn(2) == 0 {
			owner = fmt.Sprintf("child-%d run-%d", seed, i)
		}
		l, err := s.Acquire(ctx, name, ttl, wait, fence.WithOwner(owner))
		end := time.Now()
		if errors.Is(err, fence.ErrNotAcquired) {
			fmt.Printf("F %s %d %d\n", name, start.UnixNano(), end.UnixNano())
			continue
		}
		if err != nil {
			fmt.Printf("E acquire %s: %v\n", name, err)
			return 4
		}
		fmt.Printf("G %s %d %d %d %d %s %s\n", name, l.Token(), start.UnixNano(), end.UnixNano(), int64(ttl), l.ID(), ownerField(owner))
		top = max(top, l.Token())
		if i == stepAt {
			fmt.Printf("S\n")
		}
		switch r := rng.Intn(10); {
		case r < 5:
			if code := finish(name, l.Token(), l.ID(), r == 4); code != 0 {
				return code
			}
		case r < 7:
			ttl2 := crashTTLs[rng.Intn(len(crashTTLs))]
			start := time.Now()
			// Announce the renewal first: it may shorten the lease, and a kill can
			// come after the store applied it but before "N" is printed.
			fmt.Printf("P %s %d %d %d\n", name, l.Token(), start.UnixNano(), int64(ttl2))
			if err := l.Renew(ctx, ttl2); err == nil {
				fmt.Printf("N %s %d %d %d %d\n", name, l.Token(), start.UnixNano(), time.Now().UnixNano(), int64(ttl2))
			} else if !errors.Is(err, fence.ErrNotHeld) {
				fmt.Printf("E renew %s: %v\n", name, err)
				return 6
			}
		}
	}
}

// ownerField returns owner as one field of a line: "-" for none, spaces as "_".
func ownerField(owner string) string {
	return strings.ReplaceAll(cmp.Or(owner, "-"), " ", "_")
}

// crashLease is what the parent knows of a lease from the child's output.
type crashLease struct {
	token    fence.Token
	id       string
	owner    string // as ownerField prints it
	minUntil int64  // a lower bound of the store's expiry, Unix nanoseconds (real clock)
	maxUntil int64  // an upper bound of it
	renewTTL int64  // a renewal was announced (P) and not answered: its TTL
	released bool   // a release was announced: it may have happened
	acked    bool   // a release was acknowledged: it happened
	run      int
}

// crashSlack is how much later than the bound the checker allows a lease that
// is surely over to keep a free name refused (reading jitter), before it calls
// that a violation.
const crashSlack = int64(5 * time.Millisecond)

// crashChecker checks the child's lines of every run against everything before.
type crashChecker struct {
	t        *testing.T
	run      int
	tokens   map[fence.Token]string // every token seen, with its name
	maxToken map[string]fence.Token // per name, over earlier runs
	healed   map[string]fence.Token // per name, the highest heal acknowledged (H)
	heals    int
	runMax   map[string]fence.Token // per name, in this run
	leases   map[string]*crashLease // per name, the last lease
	// ghosts: per name, an upper bound of the expiry of a grant that may have
	// been written but was never printed (an "A" answered by the kill).
	ghosts   map[string]int64
	acquire  []string // the unanswered "A" line's fields, if any
	offset   int64    // the wall clock's step so far (T lines)
	stepping bool     // between T and S: the parent holds its kill
	grants   int
	crossRun int // grants checked against an unreleased lease from an earlier run
	heldBack int // of those, calls that began while that lease was unexpired
	refused  int // refusals that P6 required: a grant would have violated it
	renewed  int // renewals after a restart of a lease granted before it
	freeNow  int // grants without waiting, right after a restart, of names surely free
	owners   int // leases with an owner reported with it after a restart
	steps    int
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

// endRun closes a run whose child was gone by killedBy: a renewal it announced
// and never answered may have happened before then.
func (c *crashChecker) endRun(killedBy int64) {
	for _, l := range c.leases {
		if l.renewTTL != 0 {
			l.maxUntil = max(l.maxUntil, killedBy+l.renewTTL)
			l.renewTTL = 0
		}
	}
	if a := c.acquire; a != nil {
		ttl, _ := strconv.ParseInt(a[2], 10, 64)
		c.ghosts[a[1]] = max(c.ghosts[a[1]], killedBy+ttl)
		c.acquire = nil
	}
	c.stepping = false
}

// carried returns the leases that may still be held at now, as the child's
// crashLeasesEnv wants them.
func (c *crashChecker) carried(now int64) string {
	var out []string
	for name, l := range c.leases {
		if !l.acked && l.maxUntil > now {
			out = append(out, fmt.Sprintf("%s:%d:%s", name, l.token, l.id))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
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
	return &crashChecker{t: t, tokens: map[fence.Token]string{}, maxToken: map[string]fence.Token{}, healed: map[string]fence.Token{},
		runMax: map[string]fence.Token{}, leases: map[string]*crashLease{}, ghosts: map[string]int64{}}
}

// surelyFree reports whether name had no lease at time at: never granted, its
// last lease's release acknowledged, or expired for certain.
func (c *crashChecker) surelyFree(name string, at int64) bool {
	if at <= c.ghosts[name]+crashSlack {
		return false
	}
	l := c.leases[name]
	return l == nil || l.acked || at > l.maxUntil+crashSlack
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
	at := func(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000000") }
	switch f[0] {
	case "O":
	case "E":
		t.Fatalf("run %d: child failed: %s", c.run, line)
	case "T": // handled by runCrashes, which answers it
	case "S":
		c.stepping = false
	case "A":
		c.acquire = f
	case "H":
		name, seen := f[1], fence.Token(num(2))
		c.healed[name] = max(c.healed[name], seen)
		c.heals++
	case "G":
		name, tok, start, end, ttl := f[1], fence.Token(num(2)), num(3), num(4), num(5)
		if len(f) < 8 {
			t.Fatalf("run %d: short line %q", c.run, line)
		}
		c.grants++
		c.acquire = nil
		// Tokens are unique per name only (P1): a healed name's floor hands out
		// tokens the shared counter may hand another name later. Within a name,
		// the checks below catch a repeat.
		c.tokens[tok] = name
		if h := c.healed[name]; tok <= h {
			c.violate("run %d: P1 violated: %q got token %d after it was healed to %d", c.run, name, tok, h)
		}
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
					c.run, name, tok, at(end), time.Duration(prev.minUntil-end), prev.token, prev.run)
			}
			if prev.run != c.run {
				c.crossRun++
				if start < prev.minUntil {
					c.heldBack++ // the call began while the pre-crash lease was unexpired
				}
			}
		}
		if prev := c.leases[name]; prev != nil && prev.run != c.run && c.surelyFree(name, start) {
			c.freeNow++ // the first grant in this run of a name free at the restart
		}
		c.leases[name] = &crashLease{token: tok, id: f[6], owner: f[7], minUntil: start + ttl, maxUntil: end + ttl, run: c.run}
	case "I": // a lease of an earlier run, inspected after the open
		name, tok := f[1], fence.Token(num(2))
		if len(f) < 4 {
			t.Fatalf("run %d: short line %q", c.run, line)
		}
		if l := c.leases[name]; l != nil && tok != 0 && l.token == tok {
			if f[3] != l.owner {
				c.violate("run %d: owner lost: %q held by token %d (run %d) reported with owner %s after the restart, want %s",
					c.run, name, tok, l.run, f[3], l.owner)
			} else if l.owner != "-" {
				c.owners++
			}
		}
	case "F":
		name, start, end := f[1], num(2), num(3)
		c.acquire = nil
		if c.surelyFree(name, start) {
			l := c.leases[name]
			if l == nil {
				c.violate("run %d: restart not a non-event: %q, never granted, refused at %v", c.run, name, at(start))
			} else {
				c.violate("run %d: restart not a non-event: %q refused at %v, but the lease of token %d (run %d) had ended (released %v, expired by %v)",
					c.run, name, at(start), l.token, l.run, l.acked, at(l.maxUntil))
			}
		}
		if prev := c.leases[name]; prev != nil && !prev.released && prev.run != c.run && end < prev.minUntil {
			c.refused++ // granting this would have violated P6
		}
	case "P": // the renewal may happen: the expiry is at least the smaller bound
		name, tok, start, ttl := f[1], fence.Token(num(2)), num(3), num(4)
		if l := c.leases[name]; l != nil && l.token == tok {
			l.minUntil = min(l.minUntil, start+ttl)
			l.renewTTL = ttl
		}
	case "N": // the renewal happened between start and end
		name, tok, start, end, ttl := f[1], fence.Token(num(2)), num(3), num(4), num(5)
		if l := c.leases[name]; l != nil && l.token == tok {
			if l.run != c.run {
				c.renewed++
			}
			l.minUntil, l.maxUntil, l.renewTTL = start+ttl, end+ttl, 0
		}
	case "X": // a renewal by the holder was refused
		name, tok, end := f[1], fence.Token(num(2)), num(4)
		if l := c.leases[name]; l != nil && l.token == tok {
			// The store judged at or before end: refusing then was wrong.
			if !l.released && end < l.minUntil {
				c.violate("run %d: P6 violated: renewal of %q (token %d, run %d) by its holder refused by %v, %v before the lease expired",
					c.run, name, tok, l.run, at(end), time.Duration(l.minUntil-end))
			}
			l.renewTTL = 0
		}
	case "R":
		if l := c.leases[f[1]]; l != nil && l.token == fence.Token(num(2)) {
			l.released = true
		}
	case "D":
		if l := c.leases[f[1]]; l != nil && l.token == fence.Token(num(2)) {
			l.released, l.acked = true, true
		}
	default:
		t.Fatalf("run %d: unexpected line %q", c.run, line)
	}
}

// TestCrash_KillNine_RestartIsANonEvent runs a child that acquires leases
// (repeated and distinct names, short and long TTLs, renewals and releases) and
// SIGKILLs it at random points, at least 50 times, reopening the same file each
// time; about every other run the child's wall clock steps forward by 1-3s while
// the store runs, and now and then it heals a name above every token of the run
// (so above the shared counter: the name's floor). Across all runs:
//
//   - no token is granted twice or lower than one granted before for that name,
//     nor at or below a heal of that name acknowledged before (P1, P4);
//   - no name is granted while a lease printed before a crash was still unexpired,
//     and the holder of such a lease can renew it after the restart (P6);
//   - a name that was free at the crash (never used, released, or expired) is
//     granted at once after the restart, without waiting.
//
// Set FENCE_BOLT_CRASH_SEED to replay a run, FENCE_BOLT_CRASH_KILLS for more kills.
func TestCrash_KillNine_RestartIsANonEvent(t *testing.T) {
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
	t.Logf("%d kills in %v: %d grants, %d grants after a reopen, %d checked against an unreleased pre-crash lease (%d requested while it was unexpired), %d refusals P6 required, %d renewals across a restart, %d names free at a restart granted at once, %d owners kept across a restart, %d wall-clock steps, %d heals",
		kills, time.Since(began).Round(time.Millisecond), c.grants, grantsAfterReopen, c.crossRun, c.heldBack, c.refused, c.renewed, c.freeNow, c.owners, c.steps, c.heals)
	if c.refused == 0 {
		t.Fatalf("no acquisition was attempted while a pre-crash lease was unexpired: P6 was not exercised")
	}
	if c.renewed == 0 {
		t.Fatalf("no lease was renewed across a restart: renewals were not exercised")
	}
	if c.owners == 0 {
		t.Fatalf("no lease with an owner was inspected after a restart: owners were not checked")
	}
	if c.heals == 0 {
		t.Fatalf("no heal was acknowledged: heals were not checked across a crash")
	}
	if c.freeNow < kills/2 {
		t.Fatalf("only %d grants of names free at a restart in %d runs: the crash test checked too little", c.freeNow, kills)
	}
	if grantsAfterReopen < kills {
		t.Fatalf("only %d grants after reopening in %d runs: the crash test checked too little", grantsAfterReopen, kills)
	}

	// The file still opens and hands out tokens above all of them.
	c.startRun(kills)
	o := crashOptions
	o.Wall = func() time.Time { return time.Now().Add(time.Duration(c.offset)) } // the steps are kept
	s, err := Open(path, &o)
	if err != nil {
		t.Fatalf("final reopen: %v", err)
	}
	defer s.Close()
	for i := range 6 {
		name := fmt.Sprintf("r%d", i)
		l, err := s.Acquire(context.Background(), name, time.Second, fence.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("final acquire: %v", err)
		}
		if want := max(c.maxToken[name], c.healed[name]); l.Token() <= want {
			t.Fatalf("final token of %q %d, want above every token printed for it and every heal (%d)", name, l.Token(), want)
		}
	}
}

// runCrashes runs the child kills times on the store at path, SIGKILLing it at
// random points drawn from rng (never between a T and an S line: the step is
// then being absorbed), feeding every line to c. broken is passed to the child
// (see openBroken); stop, if not nil, ends the runs early. It returns how
// many grants were made by children that reopened a used file.
func runCrashes(t *testing.T, rng *rand.Rand, path string, kills int, broken string, c *crashChecker, stop func() bool) int {
	grantsAfterReopen := 0
	for run := 0; run < kills && (stop == nil || !stop()); run++ {
		c.startRun(run)
		before := c.grants
		killAfterGrant := rng.Intn(5) != 0 // else kill at a random point after open
		delay := time.Duration(rng.Int63n(int64(120 * time.Millisecond)))
		cmd, lines, in := startChild(t, crashChildEnv+"="+path, fmt.Sprintf("%s=%d", crashSeedEnv, rng.Int63()),
			crashBrokenEnv+"="+broken,
			fmt.Sprintf("%s=%d", crashWallEnv, c.offset),
			crashLeasesEnv+"="+c.carried(time.Now().UnixNano()))
		defer in.Close()
		var kill <-chan time.Time
		killDue, killed := false, false
		doKill := func() {
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatalf("run %d: kill: %v", run, err)
			}
			killed = true
		}
		drainChild(t, run, cmd, lines, func() <-chan time.Time { return kill }, func(line string) {
			c.line(line)
			if line[0] == 'T' && !killed {
				// Let it step, and hold the kill until the step is absorbed.
				c.offset, _ = strconv.ParseInt(strings.TrimPrefix(line, "T "), 10, 64)
				c.stepping = true
				c.steps++
				if _, err := io.WriteString(in, "go\n"); err != nil {
					t.Fatalf("run %d: answer the step: %v", run, err)
				}
			}
			if kill == nil && !killDue && !killed && (line[0] == 'O' && !killAfterGrant || line[0] == 'G') {
				kill = time.After(delay)
			}
			if killDue && !killed && !c.stepping {
				doKill()
			}
		}, func() {
			kill = nil
			if c.stepping {
				killDue = true // after the S line
			} else if !killed {
				doKill()
			}
		})
		waitKilled(t, run, cmd)
		c.endRun(time.Now().UnixNano())
		if run > 0 {
			grantsAfterReopen += c.grants - before
		}
	}
	return grantsAfterReopen
}

// startChild starts this test binary again as a child, with env added to ours
// and its stderr ours, and returns it with the lines of its stdout (the
// channel closes at its end) and its stdin.
func startChild(t *testing.T, env ...string) (*exec.Cmd, <-chan string, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A race in the child fails the run (exit 66, not SIGKILL).
	cmd.Env = append(append(os.Environ(), env...), "GORACE=halt_on_error=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
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
	return cmd, lines, in
}

// drainChild feeds the lines of the child of run to onLine until its stdout
// closes, and calls onKill each time the channel kill returns (read afresh
// each time) is ready. It kills the child and fails the test if that takes
// more than 20s.
func drainChild(t *testing.T, run int, cmd *exec.Cmd, lines <-chan string, kill func() <-chan time.Time, onLine func(string), onKill func()) {
	t.Helper()
	guard := time.NewTimer(20 * time.Second)
	defer guard.Stop()
	for lines != nil {
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			onLine(line)
		case <-kill():
			onKill()
		case <-guard.C:
			_ = cmd.Process.Kill()
			t.Fatalf("run %d: child printed no grant within 20s", run)
		}
	}
}

// waitKilled waits for the child of run to end and fails the test unless
// SIGKILL ended it.
func waitKilled(t *testing.T, run int, cmd *exec.Cmd) {
	t.Helper()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("run %d: child ended with %v, want killed by SIGKILL", run, err)
	}
}

// TestCrash_BrokenStore_CheckerFindsViolations is the crash test's negative
// control: with a store that forgets its token ceiling, its written leases, its
// lease log, or the forward steps of the wall clock, after a restart, the same checker must
// report P1 or P6 violations; with one that forgets the floors of healed names,
// tokens at or below a heal; with one that forgets the owners of the leases it
// restores, lost owners; with one that refuses every grant for a while
// after a restart (as the lease horizon did), it must report free names
// refused. A checker that cannot fail proves nothing.
func TestCrash_BrokenStore_CheckerFindsViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short mode")
	}
	for _, tc := range []struct{ broken, want string }{
		{"tokens", "P1 violated"}, {"leases", "P6 violated"}, {"steps", "P6 violated"},
		{"grace", "restart not a non-event"}, {"log", "P6 violated"}, {"owners", "owner lost"},
		{"floors", "after it was healed"},
	} {
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
			runCrashes(t, rand.New(rand.NewSource(seed)), filepath.Join(t.TempDir(), "fence.db"), 30, tc.broken, c, found)
			if !found() {
				t.Fatalf("store broken in its %s: no %q found in 30 kills; violations: %q", tc.broken, tc.want, c.violations)
			}
			t.Logf("found as expected: %s", c.violations[0])
		})
	}
}
