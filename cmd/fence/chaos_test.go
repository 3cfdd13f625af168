package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

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
