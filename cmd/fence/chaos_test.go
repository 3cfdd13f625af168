package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// fence chaos, its --matrix and its hidden modes refuse a bad command line with exit 2
// and one line.
func TestChaos_UsageErrors_Exit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error line, if not ""
	}{
		{[]string{"chaos", "--fencing", "maybe"}, `--fencing must be on or off, got "maybe"`},
		{[]string{"chaos", "--nemesis", "flood"}, ""},
		// The test binary is the default build: no fault clock to step.
		{[]string{"chaos", "--nemesis", "clock", "--duration", "1s"}, "go build -tags faultclock ./cmd/fence"},
		{[]string{"chaos", "--workers", "1", "--duration", "1s"}, ""},
		{[]string{"chaos", "--ttl", "1ms", "--duration", "1s"}, ""},
		{[]string{"chaos", "worker", "--server", "http://127.0.0.1:1"}, ""},
		{[]string{"chaos", "worker", "--log", "/dev/null", "--fencing", "maybe"}, `--fencing must be on or off, got "maybe"`},
		{[]string{"chaos", "worker", "--log", "/dev/null"}, ""},
		{[]string{"chaos", "etcd-member", "--state", "maybe"}, `--state must be new or existing, got "maybe"`},
		{[]string{"chaos", "etcd-member", "--name", "m0"}, ""},
		// fence chaos --matrix: refused before it starts anything.
		{[]string{"chaos", "--matrix", "--stores", "mongo"}, `unknown store "mongo"`},
		{[]string{"chaos", "--matrix", "--stores", "bolt,bolt"}, `store "bolt" given twice`},
		{[]string{"chaos", "--matrix", "--nemesis", "flood"}, `unknown nemesis "flood"`},
		{[]string{"chaos", "--matrix", "--stores", "bolt", "--nemesis", "failover"}, "none of the nemeses failover applies"},
		{[]string{"chaos", "--matrix", "--nemesis", "none"}, "--nemesis: want at least one"},
		{[]string{"chaos", "--matrix", "--store", "bolt"}, "--store does not go with --matrix"},
		{[]string{"chaos", "--matrix", "--fencing", "off"}, "--fencing does not go with --matrix"},
		{[]string{"chaos", "--matrix", "--workers", "1"}, "--workers 1: want 2 to 64 worker processes"},
		{[]string{"chaos", "--stores", "bolt"}, "--stores goes with --matrix"},
		{[]string{"chaos", "--matrix", "--control-duration", "-1s"}, "hold and duration must be positive"},
	} {
		r := runFence(t, cli.serve.url, nil, "", tc.args...)
		wantCode(t, fmt.Sprintf("fence %q", tc.args), r, exitUsage)
		if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; r.stderr == "" || lines != 1 {
			t.Fatalf("fence %q: want one line on stderr, got %q", tc.args, r.stderr)
		}
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("fence %q: want an error saying %s, got %q", tc.args, tc.want, r.stderr)
		}
	}
}

// A short fenced run with pauses: exit 0 and a JSON summary with no violation.
func TestChaos_FencedRunWithPauses_JSONSummaryExit0(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "", "-o", "json", "chaos", "--duration", "4s", "--nemesis", "pause",
		"--interval", "1s", "--workers", "3", "--seed", "3", "--results", t.TempDir())
	wantCode(t, "fence chaos (fencing on)", r, exitOK)
	var got struct {
		Fencing       bool           `json:"fencing"`
		Injected      map[string]int `json:"injected"`
		Acquisitions  int            `json:"acquisitions"`
		StaleAccepted int            `json:"stale_accepted"`
		Lost          int            `json:"lost"`
		Linearizable  string         `json:"linearizable"`
		Passed        bool           `json:"passed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	if !got.Fencing || !got.Passed || got.StaleAccepted != 0 || got.Lost != 0 || got.Linearizable != "Ok" {
		t.Errorf("summary = %+v; want fencing, passed, 0 stale accepted, 0 lost, Ok", got)
	}
	if got.Injected["pause"] < 1 || got.Acquisitions < 3 {
		t.Errorf("pauses, acquisitions = %d, %d; want >= 1, >= 3", got.Injected["pause"], got.Acquisitions)
	}
}

// A control run without faults (and a TTL far above any hold) cannot break anything,
// so it must say that it proved nothing and exit 1.
func TestChaos_ControlRunWithoutViolation_Exit1(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "", "chaos", "--fencing", "off", "--nemesis", "none", "--duration", "2s",
		"--workers", "2", "--ttl", "5s", "--results", t.TempDir())
	wantCode(t, "fence chaos --fencing off --nemesis none", r, exitError)
	if !strings.Contains(r.stderr, "proved nothing") || !strings.Contains(r.stdout, "backend") {
		t.Errorf("stderr %q, stdout %q: want the table and 'proved nothing'", r.stderr, r.stdout)
	}
}

// A small matrix that passes (kills on bolt, and bolt's control) exits 0 with a
// JSON cell per run; one whose cells cannot prove anything (no fault before the end,
// a TTL far above any hold) exits 1 with the table and the failed cells named.
func TestChaosMatrix_PassExit0_FailExit1(t *testing.T) {
	r := runFence(t, cli.serve.url, nil, "", "-o", "json", "chaos", "--matrix", "--stores", "bolt", "--nemesis", "kill",
		"--duration", "4s", "--control-duration", "8s", "--interval", "700ms", "--workers", "3", "--seed", "3", "--results", t.TempDir())
	wantCode(t, "fence chaos --matrix --stores bolt --nemesis kill", r, exitOK)
	var got struct {
		Passed bool `json:"passed"`
		Cells  []struct {
			Store         string `json:"store"`
			Nemesis       string `json:"nemesis"`
			Control       bool   `json:"control"`
			Fencing       bool   `json:"fencing"`
			Injected      int    `json:"injected_nemesis"`
			StaleAccepted int    `json:"stale_accepted"`
			Lost          int    `json:"lost"`
			Linearizable  string `json:"linearizable"`
			Passed        bool   `json:"passed"`
			Verdict       string `json:"verdict"`
		} `json:"cells"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	if !got.Passed || len(got.Cells) != 2 {
		t.Fatalf("matrix = %+v; want passed, 2 cells", got)
	}
	kill, control := got.Cells[0], got.Cells[1]
	if kill.Store != "bolt" || kill.Nemesis != "kill" || kill.Control || !kill.Fencing || kill.Injected < 1 ||
		kill.StaleAccepted != 0 || kill.Lost != 0 || kill.Linearizable != "Ok" || !kill.Passed || kill.Verdict != "PASS" {
		t.Errorf("kill cell = %+v; want bolt kill fenced, >= 1 kill, 0 stale accepted, 0 lost, Ok, PASS", kill)
	}
	if control.Store != "bolt" || control.Nemesis != "pause" || !control.Control || control.Fencing ||
		control.StaleAccepted+control.Lost == 0 || !control.Passed {
		t.Errorf("control cell = %+v; want bolt pause, fencing off, violations, passed", control)
	}

	r = runFence(t, cli.serve.url, nil, "", "chaos", "--matrix", "--stores", "bolt", "--nemesis", "pause", "--duration", "2s",
		"--interval", "10s", "--ttl", "5s", "--workers", "2", "--results", t.TempDir())
	wantCode(t, "fence chaos --matrix without a fault", r, exitError)
	for _, want := range []string{"matrix 1/2 start: bolt x pause", "matrix 2/2 end: bolt control", "FAIL: no pause fault injected",
		"FAIL: control run found no violation", "matrix: FAIL: 2 of 2 cells failed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "2 of 2 cells failed: bolt pause, bolt control") {
		t.Errorf("stderr = %q, want the failed cells named", r.stderr)
	}
}

// A cell that cannot run, here because redis-server is not to be found, is an error
// in its row and in the exit status that names what to install, never a skip.
func TestChaosMatrix_ServerMissing_Exit1NamesPackage(t *testing.T) {
	r := runFence(t, cli.serve.url, []string{"PATH=" + t.TempDir()}, "", "chaos", "--matrix", "--stores", "redis", "--nemesis", "kill",
		"--duration", "2s", "--results", t.TempDir())
	wantCode(t, "fence chaos --matrix --stores redis without redis-server", r, exitError)
	rows := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "redis ") && strings.Contains(line, "ERROR: chaos: redis primary: servers: redis-server not found: apt-get install redis-server") {
			rows++
		}
	}
	if rows != 2 {
		t.Errorf("the table has %d ERROR rows naming the package, want 2 (kill and control):\n%s", rows, r.stdout)
	}
	if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || !strings.Contains(r.stderr, "apt-get install redis-server") {
		t.Errorf("stderr = %q, want one line naming the package to install", r.stderr)
	}
}
