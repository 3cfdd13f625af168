package chaos

import (
	"strings"
	"testing"
	"time"
)

// The disk nemesis alone, fencing on: fence serve's data directory is a tmpfs of
// its own, filled and freed while the workers run. Writes refused with 503 while it
// is full are failures the checker knows as such; nothing acknowledged is lost, no
// stale write is accepted, the history is linearizable, and the workers make
// progress again after each free (the server is never restarted).
func TestRun_FencingOn_DiskFull_NoViolation(t *testing.T) {
	sum := runChaos(t, Config{Workers: 4, Duration: 10 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 4,
		Nemeses: []string{NemesisDisk}, Fencing: true, Seed: 11})
	wantNoViolation(t, sum)
	r := sum.Report
	if sum.Faults[NemesisDisk] < 2 {
		t.Errorf("faults injected = %v, want at least 2 disk-full faults", sum.Faults)
	}
	if r.Writes < 10 {
		t.Errorf("accepted writes = %d, want at least 10 (workers made no progress?)", r.Writes)
	}
	if n := diskFullRefusals(t, sum.Dir); n < 1 {
		t.Errorf("operations refused with \"disk full\" = %d, want at least 1 (the fault never reached fence serve?)", n)
	} else {
		t.Logf("operations refused with \"disk full\": %d", n)
	}
}

// diskFullRefusals counts the workers' operations in dir refused because the disk
// was full.
func diskFullRefusals(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, o := range workerOps(t, dir) {
		if o.Result == ResultFailed && strings.Contains(o.Err, "disk full (no space left on device)") {
			n++
		}
	}
	return n
}

// The disk nemesis alone, fencing off. A full disk makes fence serve refuse, never
// grant twice: a refused grant is no grant, a refused release leaves the lease
// held, so no two workers come to believe they hold the lock at once, and a
// control run under this nemesis alone is not expected to find violations (the
// workers' own hold between read and write is far shorter than the TTL). The test
// records what it finds rather than requiring violations; the kill and pause
// nemeses are the controls that must fail.
func TestRun_FencingOff_DiskFull_Control(t *testing.T) {
	sum := runChaos(t, Config{Workers: 4, Duration: 8 * time.Second, Interval: 1500 * time.Millisecond, MaxFaults: 4,
		Nemeses: []string{NemesisDisk}, Fencing: false, Seed: 12})
	r := sum.Report
	t.Logf("control under disk alone: found violations %v (stale accepted %d, lost %d)", r.Found(), r.StaleAccepted, r.Lost)
	if sum.Faults[NemesisDisk] < 2 {
		t.Errorf("faults injected = %v, want at least 2 disk-full faults", sum.Faults)
	}
}
