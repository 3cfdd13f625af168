package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fence/election"
	"github.com/fencelock/fence/inmem"
)

// The elect and leader tests run the built binary against the shared `fence serve`
// (bolt): real processes campaigning, paused with SIGSTOP, and fenced writes to the
// server's KV store.

// lines follows p's stdout a line at a time, from a goroutine, until p exits.
func lines(p *fenceProc) <-chan string {
	ch := make(chan string, 4096) // more than a test's jobs print
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(p.out)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// nextLine returns the first line from ch that starts with prefix, skipping the
// others, and fails the test if none comes within d.
func nextLine(t *testing.T, what string, p *fenceProc, ch <-chan string, prefix string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-ch:
			if !ok {
				t.Fatalf("%s: exited (status %v) before printing %q; stderr %q", what, p.cmd.ProcessState, prefix, p.stderr)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("%s: no line %q within %v; stderr %q", what, prefix, d, p.stderr)
		}
	}
}

// drain discards what ch holds until it has been quiet for 200ms (at most 5s).
func drain(ch <-chan string) {
	deadline := time.After(5 * time.Second)
	for {
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
			return
		case <-deadline:
			return
		}
	}
}

// numbers returns the words of line after its first, which must be n numbers.
func numbers(t *testing.T, line string, n int) []uint64 {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != n+1 {
		t.Fatalf("line %q: want a word and %d numbers", line, n)
	}
	var out []uint64
	for _, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("line %q: %q is not a number", line, s)
		}
		out = append(out, v)
	}
	return out
}

type leaderOut struct {
	Name        string `json:"name"`
	Leader      bool   `json:"leader"`
	Owner       string `json:"owner"`
	Epoch       uint64 `json:"epoch"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

func leaderNow(t *testing.T, server, name string) leaderOut {
	t.Helper()
	r := runFence(t, server, nil, "", "-o", "json", "leader", name)
	wantCode(t, "leader -o json", r, 0)
	return decode[leaderOut](t, "leader -o json", r)
}

// Issue 15 item 4: two `fence elect` on one name, each running a job that writes
// its epoch to the server's KV, fenced by it. The leader and its job are paused
// with SIGSTOP: the other takes over within TTL + 1s and writes. The paused job,
// woken first, writes with its old epoch: refused (409: exit 1, stale token, the
// highest seen). The paused `fence elect`, woken, finds its term lost, stops its
// job and exits 76.
func TestCLI_Elect_LeaderStopped_OtherTakesOver_StaleWriteRefused_76(t *testing.T) {
	srv := cli.serve.url
	name, key := uniqName(t), uniqName(t)+"/work"
	const ttl = 2 * time.Second
	// "leader EPOCH PGID", then "wrote EPOCH" or "refused EPOCH STATUS: ERROR" each
	// 50ms. The job is sh, the leader of CMD's process group.
	script := `echo "leader $FENCE_TOKEN $$"
while :; do
  if out=$(fence kv put "` + key + `" "$FENCE_TOKEN" 2>&1); then echo "wrote $FENCE_TOKEN"; else echo "refused $FENCE_TOKEN $?: $out"; fi
  sleep 0.05
done`
	elect := []string{"elect", name, "--ttl", ttl.String(), "--", "sh", "-c", script}
	// A watcher sees every term of the run, in order.
	watch := startFence(t, srv, nil, "-o", "json", "leader", name, "--watch")
	watchOut := lines(watch)
	if got := nextLeader(t, watch, watchOut); got.Leader {
		t.Fatalf("leader --watch before any candidate: want no leader first, got %+v", got)
	}

	a := startFence(t, srv, nil, elect...)
	aOut := lines(a)
	first := numbers(t, nextLine(t, "the first candidate", a, aOut, "leader ", 30*time.Second), 2)
	epochA, pgidA := first[0], int(first[1])
	t.Cleanup(func() { // a job left stopped or orphaned by a failure
		_ = syscall.Kill(-pgidA, syscall.SIGKILL)
		_ = syscall.Kill(-pgidA, syscall.SIGCONT)
	})
	nextLine(t, "the first leader's job", a, aOut, fmt.Sprintf("wrote %d", epochA), 30*time.Second)

	before := metric(t, srv, "fence_waits_total")
	b := startFence(t, srv, nil, elect...)
	bOut := lines(b)
	waitFor(t, "the second candidate to campaign", func() bool { return metric(t, srv, "fence_waits_total") > before || !b.alive() })

	stopped := time.Now()
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pgidA, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT) })

	second := numbers(t, nextLine(t, "the second candidate", b, bOut, "leader ", 30*time.Second), 2)
	takeover := time.Since(stopped)
	epochB, pgidB := second[0], int(second[1])
	t.Cleanup(func() { _ = syscall.Kill(-pgidB, syscall.SIGKILL) })
	t.Logf("leader SIGSTOPped with --ttl %v: the other led %v later", ttl, takeover.Round(time.Millisecond))
	if takeover > ttl+time.Second {
		t.Fatalf("takeover after the leader stopped: want within TTL + 1s = %v, took %v", ttl+time.Second, takeover)
	}
	if epochB <= epochA {
		t.Fatalf("new leader's epoch %d: want greater than the stopped leader's %d", epochB, epochA)
	}
	nextLine(t, "the new leader's job", b, bOut, fmt.Sprintf("wrote %d", epochB), 30*time.Second)

	// The stopped job wakes (its fence elect still stopped) and writes as leader.
	drain(aOut)
	if err := syscall.Kill(-pgidA, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var refused string
	for wrote := 0; refused == ""; {
		line := nextLine(t, "the stale leader's job", a, aOut, "", 30*time.Second)
		switch {
		case strings.HasPrefix(line, "refused "):
			refused = line
		case line == fmt.Sprintf("wrote %d", epochA):
			// One write sent before the stop may be answered after it.
			if wrote++; wrote > 1 {
				t.Fatalf("the stale leader's job wrote again after waking: %q", line)
			}
		default:
			t.Fatalf("the stale leader's job: unexpected line %q", line)
		}
	}
	if want := fmt.Sprintf("refused %d 1: fence: put %q: stale token %d, highest seen %d", epochA, key, epochA, epochB); refused != want {
		t.Fatalf("the stale leader's write:\nwant %q\ngot  %q", want, refused)
	}
	g := runFence(t, srv, nil, "", "-o", "json", "kv", "get", key)
	wantCode(t, "kv get", g, 0)
	if item := decode[map[string]any](t, "kv get", g); item["token"] != float64(epochB) {
		t.Fatalf("the key after the stale write: want written with epoch %d, got %v", epochB, item)
	}

	// The stopped fence elect wakes: its term is over, its job is stopped, 76.
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, "the stale leader's fence elect"); code != exitLeaseLost {
		t.Fatalf("the stale leader's fence elect after SIGCONT: want exit %d, got %d (stderr %q)", exitLeaseLost, code, a.stderr)
	}
	if want := fmt.Sprintf("fence: election %q: term lost (", name); !strings.Contains(a.stderr.String(), want) {
		t.Fatalf("the stale leader's stderr: want %q, got %q", want, a.stderr)
	}
	// Killed with its group; a process of it may take a moment to be reaped.
	waitFor(t, "the stale leader's job to be gone", func() bool { return syscall.Kill(-pgidA, 0) != nil })

	if ld := leaderNow(t, srv, name); !ld.Leader || ld.Epoch != epochB {
		t.Fatalf("leader: want the second candidate, epoch %d, got %+v", epochB, ld)
	}
	// SIGTERM to the leader goes to its job (killed by it: 143), then it resigns.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, "the leader's fence elect"); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("SIGTERM to the leading fence elect: want its job's status %d, got %d (stderr %q)", 128+int(syscall.SIGTERM), code, b.stderr)
	}
	if ld := leaderNow(t, srv, name); ld.Leader {
		t.Fatalf("leader after the leader was stopped: want none (it resigned), got %+v", ld)
	}

	// The watcher saw the first term, the second (perhaps a vacancy between, at the
	// expiry), and the vacancy after the resign; SIGTERM ends it, exit 0.
	var epochs []uint64
	for ld := nextLeader(t, watch, watchOut); ld.Leader || len(epochs) < 2; ld = nextLeader(t, watch, watchOut) {
		if ld.Leader {
			epochs = append(epochs, ld.Epoch)
		}
	}
	if fmt.Sprint(epochs) != fmt.Sprint([]uint64{epochA, epochB}) {
		t.Fatalf("leader --watch: want the terms %d then %d, then no leader; got the terms %v", epochA, epochB, epochs)
	}
	if err := watch.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := watch.wait(t, "leader --watch"); code != 0 || watch.stderr.String() != "" {
		t.Fatalf("SIGTERM to leader --watch: want exit 0 and nothing on stderr, got %d and %q", code, watch.stderr)
	}
}

// nextLeader reads the next JSON line of a `fence -o json leader --watch`.
func nextLeader(t *testing.T, p *fenceProc, ch <-chan string) leaderOut {
	t.Helper()
	line := nextLine(t, "leader --watch", p, ch, "", 30*time.Second)
	var ld leaderOut
	if err := json.Unmarshal([]byte(line), &ld); err != nil {
		t.Fatalf("leader --watch -o json: want a JSON object a line, got %q", line)
	}
	return ld
}

// Issue 15 item 4: `fence leader --watch` in text: the header and the leader, then
// a row per change; SIGINT ends it with exit 0. A server that cannot be reached at
// the start is an error at once (exit 1), in one line naming it.
func TestCLI_Leader_Watch_TextRowsExit0OnSIGINT_UnreachableExit1(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	watch := startFence(t, srv, nil, "leader", name, "--watch")
	out := lines(watch)
	nextLine(t, "leader --watch", watch, out, "NAME ", 30*time.Second)
	if row := nextLine(t, "leader --watch", watch, out, "", 30*time.Second); !regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `\s+false\s+-\s+-\s+-$`).MatchString(row) {
		t.Fatalf("leader --watch: want a row with no leader first, got %q", row)
	}
	r := runFence(t, srv, nil, "", "elect", name, "--owner", "ops", "--", "sh", "-c", `echo "$FENCE_TOKEN"; sleep 0.3`)
	wantCode(t, "elect", r, 0)
	epoch := strings.TrimSpace(r.stdout)
	for _, want := range []string{`\s+true\s+` + epoch + `\s+\S+\s+ops$`, `\s+false\s+-\s+-\s+-$`} {
		if row := nextLine(t, "leader --watch", watch, out, "", 30*time.Second); !regexp.MustCompile(`^` + regexp.QuoteMeta(name) + want).MatchString(row) {
			t.Fatalf("leader --watch: want a row matching %s, got %q", want, row)
		}
	}
	if err := watch.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := watch.wait(t, "leader --watch"); code != 0 || watch.stderr.String() != "" {
		t.Fatalf("SIGINT to leader --watch: want exit 0 and nothing on stderr, got %d and %q", code, watch.stderr)
	}

	addr := freeAddr(t)
	start := time.Now()
	r = runFence(t, "http://"+addr, nil, "", "leader", name, "--watch")
	wantCode(t, "leader --watch with no server", r, exitError)
	if want := fmt.Sprintf("fence: cannot reach the fence server at http://%s: connection refused\n", addr); r.stderr != want {
		t.Fatalf("leader --watch with no server:\nwant %q\ngot  %q", want, r.stderr)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("leader --watch took %v to report an unreachable server", d)
	}
}

// Issue 15 item 4: a job that exits while its fence elect leads ends the term at
// once (resign): a waiting candidate with a TTL of a minute leads within seconds,
// and each fence elect exits with its job's status.
func TestCLI_Elect_JobExits_StatusPassedThrough_ResignHandsOverAtOnce(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	gate := filepath.Join(t.TempDir(), "go")
	a := startFence(t, srv, []string{"GATE=" + gate}, "elect", name, "--ttl", "1m", "--",
		"sh", "-c", `echo "leader $FENCE_TOKEN"; while [ ! -e "$GATE" ]; do sleep 0.02; done; exit 7`)
	aOut := lines(a)
	epochA := numbers(t, nextLine(t, "the first candidate", a, aOut, "leader ", 30*time.Second), 1)[0]

	before := metric(t, srv, "fence_waits_total")
	b := startFence(t, srv, nil, "elect", name, "--ttl", "1m", "--", "sh", "-c", `echo "leader $FENCE_TOKEN"; exit 3`)
	bOut := lines(b)
	waitFor(t, "the second candidate to campaign", func() bool { return metric(t, srv, "fence_waits_total") > before || !b.alive() })

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, "the first fence elect"); code != 7 {
		t.Fatalf("job exited 7 while leading: want fence elect to exit 7, got %d (stderr %q)", code, a.stderr)
	}
	resigned := time.Now()
	epochB := numbers(t, nextLine(t, "the second candidate", b, bOut, "leader ", 30*time.Second), 1)[0]
	handoff := time.Since(resigned)
	t.Logf("handoff after the leader's job exited: %v", handoff.Round(time.Millisecond))
	if handoff > 10*time.Second {
		t.Fatalf("handoff took %v with a TTL of 1m: the first fence elect did not resign", handoff)
	}
	if epochB <= epochA {
		t.Fatalf("second leader's epoch %d: want greater than %d", epochB, epochA)
	}
	if code := b.wait(t, "the second fence elect"); code != 3 {
		t.Fatalf("job exited 3 while leading: want fence elect to exit 3, got %d (stderr %q)", code, b.stderr)
	}
	if a.stderr.String() != "" || b.stderr.String() != "" {
		t.Fatalf("fence elect whose job exited while leading: want nothing on stderr, got %q and %q", a.stderr, b.stderr)
	}
	if ld := leaderNow(t, srv, name); ld.Leader {
		t.Fatalf("after both jobs: want no leader, got %+v", ld)
	}
}

// Issue 15 item 4: with --rejoin a lost term (revoked here) stops the job and
// campaigns again; the job runs again with the new term's epoch. -o json sums the
// run up on stderr.
func TestCLI_Elect_Rejoin_CampaignsAgainWithTheNewEpoch(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	mark := filepath.Join(t.TempDir(), "ran")
	// The first term's job runs until stopped; the second's exits 9.
	f := startFence(t, srv, []string{"MARK=" + mark}, "-o", "json", "elect", name, "--ttl", "1s", "--rejoin", "--",
		"sh", "-c", `echo "term $FENCE_TOKEN"; [ -e "$MARK" ] && exit 9; : >"$MARK"; while :; do sleep 0.05; done`)
	out := lines(f)
	first := numbers(t, nextLine(t, "fence elect --rejoin", f, out, "term ", 30*time.Second), 1)[0]
	wantCode(t, "revoke", runFence(t, srv, nil, "", "revoke", name), 0)
	second := numbers(t, nextLine(t, "fence elect --rejoin after the revoke", f, out, "term ", 30*time.Second), 1)[0]
	if second <= first {
		t.Fatalf("epoch of the term after rejoining: want greater than %d, got %d", first, second)
	}
	if code := f.wait(t, "fence elect --rejoin"); code != 9 {
		t.Fatalf("fence elect --rejoin whose second job exits 9: want exit 9, got %d (stderr %q)", code, f.stderr)
	}
	stderr := f.stderr.String()
	for _, want := range []string{
		fmt.Sprintf("fence: election %q: term lost (the server refused to renew it: not held any more); sending SIGTERM to sh", name),
		fmt.Sprintf("fence: election %q: sh exited with status 143 after the term was lost; campaigning again\n", name),
	} {
		if !strings.Contains(stderr, want) {
			t.Fatalf("fence elect --rejoin: want %q on stderr, got %q", want, stderr)
		}
	}
	var sum map[string]any
	if i := strings.Index(stderr, "{"); i < 0 || json.Unmarshal([]byte(stderr[i:]), &sum) != nil {
		t.Fatalf("fence -o json elect: want the summary on stderr, got %q", stderr)
	}
	want := map[string]any{"name": name, "epoch": float64(second), "terms": float64(2), "exit_code": float64(9), "term_lost": false}
	if fmt.Sprint(sum) != fmt.Sprint(want) {
		t.Fatalf("fence -o json elect summary:\nwant %v\ngot  %v", want, sum)
	}
	if ld := leaderNow(t, srv, name); ld.Leader {
		t.Fatalf("after the job exited: want no leader, got %+v", ld)
	}
}

// Issue 15 item 4: `fence leader NAME` with no leader says so (LEADER false, exit
// 0); under `fence elect` it shows the term: its epoch (the job's FENCE_TOKEN), the
// time left and the owner, "HOST:PID COMMAND" by default. -o json has exactly
// {"name","leader","owner","epoch","expires_in_ms"}.
func TestCLI_Leader_NoLeaderThenLeader_TextAndJSON(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	r := runFence(t, srv, nil, "", "leader", name)
	wantCode(t, "leader with no leader", r, 0)
	noLeader := regexp.MustCompile(`^NAME\s+LEADER\s+EPOCH\s+EXPIRES IN\s+OWNER\n` + regexp.QuoteMeta(name) + `\s+false\s+-\s+-\s+-\n$`)
	if !noLeader.MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("leader with no leader: want the header and a row with LEADER false, got stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = runFence(t, srv, nil, "", "-o", "json", "leader", name)
	wantCode(t, "leader -o json with no leader", r, 0)
	var keys map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &keys); err != nil {
		t.Fatalf("leader -o json: not JSON: %v: %q", err, r.stdout)
	}
	var got []string
	for k := range keys {
		got = append(got, k)
	}
	sort.Strings(got)
	if fmt.Sprint(got) != "[epoch expires_in_ms leader name owner]" {
		t.Fatalf("leader -o json: want the keys epoch, expires_in_ms, leader, name, owner, got %v", got)
	}
	if ld := decode[leaderOut](t, "leader -o json", r); ld != (leaderOut{Name: name}) {
		t.Fatalf("leader -o json with no leader: want {name, leader:false, owner:\"\", epoch:0, expires_in_ms:0}, got %+v", ld)
	}

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// The job reports fence elect's pid ($PPID), its epoch, and the leader as
	// fence leader shows it, in JSON and in text.
	const script = `echo "$PPID $FENCE_TOKEN"; fence -o json leader "$FENCE_LOCK" | tr -d '\n'; echo; fence leader "$FENCE_LOCK"`
	r = runFence(t, srv, nil, "", "elect", name, "--ttl", "20s", "--", "sh", "-c", script)
	wantCode(t, "elect -- fence leader", r, 0)
	out := strings.SplitN(r.stdout, "\n", 3)
	if len(out) != 3 {
		t.Fatalf("the job's output: want its pid and epoch, the JSON and the text, got %q", r.stdout)
	}
	pid, epoch, _ := strings.Cut(out[0], " ")
	var ld leaderOut
	if err := json.Unmarshal([]byte(out[1]), &ld); err != nil {
		t.Fatalf("leader -o json under fence elect: %v: %q", err, out[1])
	}
	owner := host + ":" + pid + " sh -c " + script
	if !ld.Leader || ld.Name != name || fmt.Sprint(ld.Epoch) != epoch || ld.Owner != owner || ld.ExpiresInMs <= 0 || ld.ExpiresInMs > 20000 {
		t.Fatalf("leader -o json under fence elect: want leader %q with epoch %s (FENCE_TOKEN), owner %q, 0 < expires_in_ms <= 20000, got %+v", name, epoch, owner, ld)
	}
	row := regexp.MustCompile(`^NAME\s+LEADER\s+EPOCH\s+EXPIRES IN\s+OWNER\n` + regexp.QuoteMeta(name) + `\s+true\s+` + epoch + `\s+\d+(\.\d+)?(ms|s)\s+` + regexp.QuoteMeta(owner) + `\n$`)
	if !row.MatchString(out[2]) {
		t.Fatalf("leader under fence elect: want a row with LEADER true, epoch %s and the owner last, got %q", epoch, out[2])
	}
	if ld := leaderNow(t, srv, name); ld.Leader {
		t.Fatalf("leader after the job exited: want none, got %+v", ld)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in two goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(b.buf.String(), "\n"), "\n")
}

// watchLeader, the loop of `fence leader --watch`, on an election over the
// reference locker (in process: the HTTP client's watch is tested with the
// binary): the leader first, then a line per change (a term, a vacancy, the
// next term), rows under one header or JSON lines, and nil once ctx ends.
func TestWatchLeader_ALinePerChange_NilWhenCancelled(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			defer func(o string) { output = o }(output)
			output = format
			l := inmem.NewLocker(inmem.Options{})
			a, err := election.New(l, "jobs", election.WithTTL(time.Minute), election.WithOwner("ops-1:77 cron"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := election.New(l, "jobs", election.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			var out syncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- watchLeader(ctx, a, &leaderPrinter{w: &out, lines: true}) }()
			header := 0
			if format == "text" {
				header = 1
			}
			printed := func(n int) func() bool { return func() bool { return len(out.lines()) >= header+n } }
			waitFor(t, "the first state", printed(1))
			t1, err := a.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the first term", printed(2))
			if err := t1.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the vacancy", printed(3))
			t2, err := b.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the second term", printed(4))
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("watchLeader after its context ended: want nil, got %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("watchLeader did not return within 30s of its context's end")
			}
			got := out.lines()
			want := []string{
				`^jobs\s+false\s+-\s+-\s+-$`,
				fmt.Sprintf(`^jobs\s+true\s+%d\s+\d\S*s\s+ops-1:77 cron$`, t1.Epoch()),
				`^jobs\s+false\s+-\s+-\s+-$`,
				fmt.Sprintf(`^jobs\s+true\s+%d\s+\d\S*s\s+-$`, t2.Epoch()),
			}
			if format == "json" {
				want = []string{
					`^{"name":"jobs","leader":false,"owner":"","epoch":0,"expires_in_ms":0}$`,
					fmt.Sprintf(`^{"name":"jobs","leader":true,"owner":"ops-1:77 cron","epoch":%d,"expires_in_ms":\d+}$`, t1.Epoch()),
					`^{"name":"jobs","leader":false,"owner":"","epoch":0,"expires_in_ms":0}$`,
					fmt.Sprintf(`^{"name":"jobs","leader":true,"owner":"","epoch":%d,"expires_in_ms":\d+}$`, t2.Epoch()),
				}
			} else {
				want = append([]string{`^NAME\s+LEADER\s+EPOCH\s+EXPIRES IN\s+OWNER$`}, want...)
			}
			if len(got) != len(want) {
				t.Fatalf("watch output: want %d lines, got %d:\n%s", len(want), len(got), strings.Join(got, "\n"))
			}
			for i, w := range want {
				if !regexp.MustCompile(w).MatchString(got[i]) {
					t.Errorf("watch output line %d: want %s, got %q", i+1, w, got[i])
				}
			}
			// In text the rows line up under the header.
			if format == "text" {
				col := strings.Index(got[0], "OWNER")
				for _, row := range got[1:] {
					if !strings.HasPrefix(row[col:], "-") && !strings.HasPrefix(row[col:], "ops-1") {
						t.Errorf("watch output: want OWNER at column %d in every row, got %q", col, row)
					}
				}
			}
		})
	}
}
