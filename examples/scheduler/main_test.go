//go:build unix

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/servers/servertest"
)

// dsn is the database the tests share (every run uses its own election and job
// list). Empty under -short.
var dsn string

func TestMain(m *testing.M) {
	// The demo re-executes its own binary as the instances: in a test, that is
	// this test binary, which then runs one instance instead of the tests.
	if os.Getenv(envInstance) != "" {
		os.Exit(runInstanceFromEnv())
	}
	os.Exit(servertest.RunWithPostgres(m, "scheduler", &dsn))
}

// testConfig is a 1s term and a job every 100ms: a run takes about 3 seconds.
func testConfig(t *testing.T) config {
	t.Helper()
	servertest.SkipIfShort(t)
	cfg := config{DSN: dsn, TTL: time.Second, Every: 100 * time.Millisecond, PauseAfter: 3, Pause: time.Second, After: 2}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	return cfg
}

// TestRun_PausedLeaderRefusedOnWaking is the example's claim: node-1 leads and
// records jobs 1 to 3; it is stopped (SIGSTOP) just before its next write;
// node-2 takes over once node-1's term ran out, with a higher epoch, and records
// the next jobs; node-1 is resumed (SIGCONT) and its write, carrying its old
// epoch, is refused (fence.ErrStaleToken). The jobs table holds every job
// once, node-1's in epoch 1 and node-2's after, never an older epoch after a
// newer.
func TestRun_PausedLeaderRefusedOnWaking(t *testing.T) {
	cfg := testConfig(t)
	var out bytes.Buffer
	res, err := run(cfg)
	printTimeline(&out, cfg, res)
	t.Logf("timeline:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}

	if res.First == 0 || res.Second <= res.First {
		t.Errorf("epochs: node-1 %d, node-2 %d; want node-2's above node-1's", res.First, res.Second)
	}
	// node-1 renews every third of the TTL, so its term ran out between 2/3 of
	// the TTL and the TTL after it stopped; node-2 waits for that, no longer.
	if res.Takeover < cfg.TTL/2 || res.Takeover > cfg.TTL+time.Second {
		t.Errorf("node-2 led %v after node-1 was stopped; want after node-1's term ran out and within TTL + 1s (TTL %v)", res.Takeover, cfg.TTL)
	}
	if res.Paused < cfg.Pause {
		t.Errorf("node-1 was stopped for %v; want at least %v", res.Paused, cfg.Pause)
	}
	if res.Refused == nil {
		t.Fatal("node-1's write on waking was not refused")
	}
	if r := res.Refused; r.Epoch != res.First || r.Highest != res.Second || !strings.Contains(r.Detail, "stale token") {
		t.Errorf("node-1's refusal = %+v; want epoch %d refused as a stale token with highest %d", *r, res.First, res.Second)
	}
	if res.Late != 0 {
		t.Errorf("%d writes of node-1 admitted after it woke; want 0", res.Late)
	}

	var byNode2 int
	for i, j := range res.Jobs {
		if j.Job != int64(i+1) {
			t.Fatalf("jobs = %+v; want 1, 2, 3, ... each once", res.Jobs)
		}
		want := jobRow{Job: j.Job, Instance: "node-1", Epoch: res.First}
		if i >= cfg.PauseAfter {
			want.Instance, want.Epoch = "node-2", res.Second
			byNode2++
		}
		if j != want {
			t.Errorf("job %d = %+v; want %+v (node-1 wrote jobs 1-%d, node-2 the rest)", j.Job, j, want, cfg.PauseAfter)
		}
	}
	if byNode2 < 1+cfg.After {
		t.Errorf("node-2 wrote %d jobs; want at least %d", byNode2, 1+cfg.After)
	}

	// The timeline tells it in this order.
	steps := []struct{ who, what string }{
		{"node-1", "leads, epoch"},
		{"node-1", "paused (SIGSTOP)"},
		{"node-2", "leads, epoch"},
		{"node-1", "resumed (SIGCONT)"},
		{"node-1", "refused"},
		{"node-1", "stopped leading"},
	}
	at := 0
	for _, e := range res.Timeline {
		if at < len(steps) && e.Instance == steps[at].who && strings.Contains(e.What, steps[at].what) {
			at++
		}
	}
	if at < len(steps) {
		t.Errorf("timeline lacks %s %q after the steps before it; timeline:\n%s", steps[at].who, steps[at].what, out.String())
	}
}

// TestRunMain_PrintsTimeline runs the program's command line, as `go run` does.
func TestRunMain_PrintsTimeline(t *testing.T) {
	cfg := testConfig(t)
	var out, errOut bytes.Buffer
	code := runMain([]string{"--postgres", cfg.DSN, "--ttl", "1s", "--every", "100ms", "--pause-after", "2", "--after", "1"}, &out, &errOut)
	t.Logf("output:\n%s", out.String())
	if code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, errOut.String())
	}
	for _, want := range []string{
		"node-1  leads, epoch",
		"node-1  paused (SIGSTOP) while about to write its next job",
		"node-2  leads, epoch",
		"refused: postgres: do",
		"jobs recorded: 1-2 by node-1 (epoch ",
		"node-1 woke after",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestRunMain_BadUsage(t *testing.T) {
	db := []string{"--postgres", "postgres://x@127.0.0.1/db"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--postgres", ""}, "no database"},
		{append(db, "--ttl", "100ms"), "--ttl 100ms"},
		{append(db, "--every", "5s"), "--every 5s"},
		{append(db, "--pause-after", "0"), "--pause-after 0"},
		{append(db, "--ttl", "2s", "--pause", "1s"), "--pause 1s"},
		{append(db, "--after", "0"), "--after 0"},
		{append(db, "extra"), "unexpected arguments"},
		{[]string{"instance", "--postgres", ""}, "no database"},
		{[]string{"instance", "--postgres", "postgres://x@127.0.0.1/db", "--ttl", "1ms"}, "--ttl 1ms"},
		{[]string{"instance", "--postgres", "postgres://x@127.0.0.1/db", "--every", "1ms"}, "--every 1ms"},
	} {
		var out, errOut bytes.Buffer
		code := runMain(tc.args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("runMain(%q) = %d, stderr %q; want 2 and an error containing %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	jobs := []jobRow{{1, "node-1", 1}, {2, "node-1", 1}, {3, "node-1", 1}, {4, "node-2", 2}, {5, "node-1", 3}, {6, "node-1", 3}}
	got := summarize(jobs)
	want := "1-3 by node-1 (epoch 1), 4 by node-2 (epoch 2), 5-6 by node-1 (epoch 3)"
	if got != want {
		t.Errorf("summarize = %q; want %q", got, want)
	}
}
