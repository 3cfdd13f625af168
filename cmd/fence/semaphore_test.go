package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
)

// The tests of -n and --shared run on two servers: `fence serve` on its embedded
// store (what users run) and, in process, one over the reference store (inmem).
func kindServers(t *testing.T) map[string]string {
	return map[string]string{"serve": cli.serve.url, "inmem": holdersServer(t, nil)}
}

// seq gives the tests' lock names on the shared `fence serve` a suffix of their own.
var semSeq int

func semName(what string) string {
	semSeq++
	return fmt.Sprintf("%s-%d-%d", what, os.Getpid(), semSeq)
}

type permitJSON struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
	Lease string `json:"lease"`
	Slot  *int   `json:"slot"`
}

// Item: `fence acquire -n N` prints a permit with its slot (text and -o json), the
// lowest free one; N+1 permits are not granted (75); another N while permits are
// live is refused naming both limits (1); -n with --shared, and -n out of range,
// are usage errors (2); `fence status` shows K/N and every holder, in text and in
// -o json.
func TestCLI_Acquire_Permits_SlotsAndStatus(t *testing.T) {
	for store, srv := range kindServers(t) {
		t.Run(store, func(t *testing.T) {
			name := semName("pool")
			var permits []permitJSON
			for i := range 3 {
				r := runFence(t, srv, nil, "", "-o", "json", "acquire", name, "-n", "3", "--ttl", "10m", "--owner", "w"+strconv.Itoa(i))
				wantCode(t, "acquire -n 3", r, 0)
				p := decode[permitJSON](t, "acquire -n 3", r)
				if p.Slot == nil || *p.Slot != i {
					t.Fatalf("permit %d of a free semaphore of 3: want slot %d, got %s", i+1, i, r.stdout)
				}
				permits = append(permits, p)
			}
			r := runFence(t, srv, nil, "", "acquire", name, "-n", "3")
			wantCode(t, "a fourth permit of 3", r, exitNotAcquired)
			r = runFence(t, srv, nil, "", "acquire", name, "-n", "5")
			wantCode(t, "acquire -n 5 of a semaphore of 3", r, exitError)
			if line := oneLineStderr(t, "acquire -n 5 of a semaphore of 3", r); !strings.Contains(line, "limit 3, not limit 5") {
				t.Fatalf("acquire -n 5 of a semaphore of 3: want both limits named, got %q", line)
			}

			// Text status: K/N, then a row per holder, in slot order.
			r = runFence(t, srv, nil, "", "status", name)
			wantCode(t, "status", r, 0)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			want := []string{`^NAME\s+HELD\s+TOKEN\s+LAST TOKEN\s+EXPIRES IN\s+OWNER$`, `^` + regexp.QuoteMeta(name) + `\s+3/3\s+-\s+\d+\s+-\s+-$`}
			for i, p := range permits {
				want = append(want, fmt.Sprintf(`^  slot %d\s+%d\s+\S+\s+w%d$`, i, p.Token, i))
			}
			if len(lines) != len(want) {
				t.Fatalf("status of a semaphore with 3 permits: want %d lines, got:\n%s", len(want), r.stdout)
			}
			for i, re := range want {
				if !regexp.MustCompile(re).MatchString(lines[i]) {
					t.Fatalf("status of a semaphore, line %d: want %s, got:\n%s", i+1, re, r.stdout)
				}
			}
			// JSON status: limit and the holders, never a lease id.
			r = runFence(t, srv, nil, "", "-o", "json", "status", name)
			wantCode(t, "status -o json", r, 0)
			st := decode[fencehttp.LockInfo](t, "status -o json", r)
			if st.Limit != 3 || len(st.Holders) != 3 {
				t.Fatalf("status -o json of a semaphore of 3: want limit 3 and 3 holders, got %s", r.stdout)
			}
			for i, h := range st.Holders {
				if h.Slot != i || uint64(h.Token) != permits[i].Token || h.Owner != "w"+strconv.Itoa(i) || h.ExpiresInMs <= 0 {
					t.Fatalf("status -o json, holder %d: want slot %d, token %d, owner w%d and time left, got %+v", i, i, permits[i].Token, i, h)
				}
			}
			for _, p := range permits {
				if strings.Contains(r.stdout, p.Lease) {
					t.Fatalf("status shows a lease id: %s", r.stdout)
				}
			}

			// Releasing slot 1 frees it for the next permit; text output shows the slot.
			wantCode(t, "release slot 1", runFence(t, srv, nil, "", "release", name, "--lease", permits[1].Lease), 0)
			r = runFence(t, srv, nil, "", "acquire", name, "-n", "3")
			wantCode(t, "acquire -n 3 after a release", r, 0)
			if !regexp.MustCompile(`(?m)^slot   1$`).MatchString(r.stdout) {
				t.Fatalf("acquire -n 3 after slot 1 was released: want \"slot   1\", got:\n%s", r.stdout)
			}
		})
	}
}

// Item: -n and --shared together, and -n out of [1, 1024], are usage errors (exit
// 2, one line) on `fence lock` and `fence acquire`; nothing is asked of the server.
func TestCLI_KindFlags_UsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lock", "x", "-n", "2", "--shared", "--", "true"}, "fence: -n and --shared cannot be combined: a semaphore's permits are not shared\n"},
		{[]string{"acquire", "x", "--shared", "-n", "2"}, "fence: -n and --shared cannot be combined: a semaphore's permits are not shared\n"},
		{[]string{"lock", "x", "-n", "0", "--", "true"}, "fence: -n 0: must be 1 to 1024\n"},
		{[]string{"acquire", "x", "-n", "1025"}, "fence: -n 1025: must be 1 to 1024\n"},
		{[]string{"acquire", "x", "-n", "two"}, "fence: acquire: --limit \"two\": want a whole number\n"},
	} {
		r := runFence(t, "http://127.0.0.1:1", nil, "", tc.args...)
		wantCode(t, strings.Join(tc.args, " "), r, exitUsage)
		if r.stderr != tc.want {
			t.Errorf("fence %s:\nwant %q\ngot  %q", strings.Join(tc.args, " "), tc.want, r.stderr)
		}
	}
}

// records is a directory where the commands run by `fence lock` write what they
// saw; release files tell them to end.
type records struct{ dir string }

// script is the command of one `fence lock` under test, named id: it records
// "SLOT ENDED" in started.ID when it starts (FENCE_SLOT, or "-", and how many
// commands had ended by then), waits for release.ID, and records ended.ID as it
// ends. Every wait is bounded (30s).
func (rc records) script(id string) []string {
	return []string{"sh", "-c", `d="$1"; id="$2"
n=$(ls "$d" | grep -c '^ended\.')
echo "${FENCE_SLOT:--} $n" > "$d/started.$id.tmp" && mv "$d/started.$id.tmp" "$d/started.$id"
i=0; while [ ! -e "$d/release.$id" ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done
touch "$d/ended.$id"`, "sh", rc.dir, id}
}

// lockAll starts a `fence lock NAME FLAGS... -- script(id)` for each of ids, at
// once, and returns them in the order of ids.
func (rc records) lockAll(t *testing.T, srv, name string, ids []string, flags ...string) []*fenceProc {
	t.Helper()
	var procs []*fenceProc
	for _, id := range ids {
		args := append(append([]string{"lock", name, "--ttl", "20s"}, flags...), "--")
		procs = append(procs, startFence(t, srv, nil, append(args, rc.script(id)...)...))
	}
	return procs
}

// startRecorded starts a `fence lock NAME FLAGS...` of a recorded command for
// each of ids, in a records directory of its own, and waits for all of them to
// have started their command.
func startRecorded(t *testing.T, srv, name string, ids []string, flags ...string) (records, []*fenceProc) {
	t.Helper()
	rc := records{t.TempDir()}
	procs := rc.lockAll(t, srv, name, ids, flags...)
	rc.waitStarted(t, fmt.Sprintf("fence lock %s %v", name, flags), ids, procs)
	return rc, procs
}

// started returns what command id recorded at its start, and whether it started.
func (rc records) started(id string) (slot string, endedBefore int, ok bool) {
	b, err := os.ReadFile(filepath.Join(rc.dir, "started."+id))
	if err != nil {
		return "", 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "", 0, false
	}
	n, _ := strconv.Atoi(f[1])
	return f[0], n, true
}

func (rc records) release(t *testing.T, id string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(rc.dir, "release."+id), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitStarted waits up to 30s for the commands ids, run by procs, to have
// started; a `fence lock` that exits first fails the test at once.
func (rc records) waitStarted(t *testing.T, what string, ids []string, procs []*fenceProc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { _, _, ok := rc.started(id); return ok })
		if len(missing) == 0 {
			return
		}
		for i, p := range procs {
			if _, _, ok := rc.started(ids[i]); !ok && !p.alive() {
				t.Fatalf("%s: fence lock of command %s exited (%d) before it started it: %s", what, ids[i], p.cmd.ProcessState.ExitCode(), p.stderr)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: commands %v did not start within 30s", what, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitingFor is how long a test lets a waiting `fence lock` run to show that it
// does not start its command: long enough that a grant would have been made (a
// grant takes milliseconds), never so long that a slow machine matters.
const waitingFor = 500 * time.Millisecond

// Item: N+1 concurrent `fence lock -n N` commands: N run at once with distinct
// FENCE_SLOT values in [0, N), the last one waits until a permit is released and
// then runs in the freed slot. Shown by what the commands record: the N each saw
// no command ended when they started; the last one saw one.
func TestCLI_Lock_Semaphore_NRunOneWaits(t *testing.T) {
	const n = 3
	for store, srv := range kindServers(t) {
		t.Run(store, func(t *testing.T) {
			name, ids := semName("workers"), []string{"0", "1", "2"}
			rc, procs := startRecorded(t, srv, name, ids, "-n", strconv.Itoa(n))
			slots := map[string]string{}
			for _, id := range ids {
				slot, ended, _ := rc.started(id)
				if ended != 0 {
					t.Fatalf("command %s: started after %d others ended; want all %d running at once", id, ended, n)
				}
				if s, err := strconv.Atoi(slot); err != nil || s < 0 || s >= n {
					t.Fatalf("command %s: FENCE_SLOT %q, want one in [0, %d)", id, slot, n)
				}
				if other, dup := slots[slot]; dup {
					t.Fatalf("commands %s and %s both got FENCE_SLOT %s", other, id, slot)
				}
				slots[slot] = id
			}
			last := rc.lockAll(t, srv, name, []string{"last"}, "-n", strconv.Itoa(n))[0]
			time.Sleep(waitingFor)
			if _, _, ok := rc.started("last"); ok {
				t.Fatalf("command N+1 started while the %d permits were held", n)
			}
			freed := ids[1]
			freedSlot, _, _ := rc.started(freed)
			rc.release(t, freed)
			if code := procs[1].wait(t, "the released command"); code != 0 {
				t.Fatalf("the released command: want exit 0, got %d (stderr %q)", code, procs[1].stderr)
			}
			rc.waitStarted(t, "command N+1 after a release", []string{"last"}, []*fenceProc{last})
			slot, ended, _ := rc.started("last")
			if ended != 1 || slot != freedSlot {
				t.Fatalf("command N+1: want it started after the release, in the freed slot %s; it recorded slot %s, %d ended before", freedSlot, slot, ended)
			}
			for i, id := range ids {
				if i != 1 {
					rc.release(t, id)
				}
			}
			rc.release(t, "last")
			for i, p := range append(procs, last) {
				if code := p.wait(t, "fence lock -n"); code != 0 {
					t.Fatalf("fence lock -n, command %d: want exit 0, got %d (stderr %q)", i, code, p.stderr)
				}
			}
		})
	}
}

// Item: several `fence lock --shared` commands run at once (without FENCE_SLOT);
// an exclusive `fence lock` waits until all of them have released, then runs.
func TestCLI_Lock_Shared_SeveralRunExclusiveWaits(t *testing.T) {
	const n = 3
	for store, srv := range kindServers(t) {
		t.Run(store, func(t *testing.T) {
			name, ids := semName("docs"), []string{"shared0", "shared1", "shared2"}
			rc, procs := startRecorded(t, srv, name, ids, "--shared")
			for _, id := range ids {
				if slot, ended, _ := rc.started(id); ended != 0 || slot != "-" {
					t.Fatalf("shared command %s: recorded slot %q with %d ended before; want all running at once, without FENCE_SLOT", id, slot, ended)
				}
			}
			excl := rc.lockAll(t, srv, name, []string{"exclusive"})[0]
			for i, id := range ids {
				time.Sleep(waitingFor / n)
				if _, _, ok := rc.started("exclusive"); ok {
					t.Fatalf("the exclusive command started while %d shared holders held the lock", n-i)
				}
				rc.release(t, id)
				if code := procs[i].wait(t, "a shared command"); code != 0 {
					t.Fatalf("shared command %s: want exit 0, got %d (stderr %q)", id, code, procs[i].stderr)
				}
			}
			rc.waitStarted(t, "the exclusive command", []string{"exclusive"}, []*fenceProc{excl})
			if _, ended, _ := rc.started("exclusive"); ended != n {
				t.Fatalf("the exclusive command: want it started after the %d shared ones ended, it saw %d", n, ended)
			}
			rc.release(t, "exclusive")
			if code := excl.wait(t, "the exclusive command"); code != 0 {
				t.Fatalf("the exclusive command: want exit 0, got %d (stderr %q)", code, excl.stderr)
			}
		})
	}
}

// Item (issue 36, 7): a limit other than the live permits' is refused naming both
// limits (exit 1) also when the name has a queued waiter: the server's fair queue
// answers an acquire that does not wait at once, without a try of the store, and
// that answer must be limit_mismatch, not held (75). Likewise a lock (limit 1).
func TestCLI_Lock_WrongLimitWithQueuedWaiter_LimitMismatchNotHeld(t *testing.T) {
	for store, srv := range kindServers(t) {
		t.Run(store, func(t *testing.T) {
			name := semName("queued-pool")
			for range 2 {
				wantCode(t, "acquire -n 2", runFence(t, srv, nil, "", "acquire", name, "-n", "2", "--ttl", "10m"), 0)
			}
			before := metric(t, srv, "fence_waits_total")
			w := startFence(t, srv, nil, "lock", name, "-n", "2", "--wait", "30s", "--", "true")
			waitFor(t, "the waiter to queue at the server", func() bool { return metric(t, srv, "fence_waits_total") > before || !w.alive() })
			if !w.alive() {
				t.Fatalf("the waiting fence lock -n 2 exited (%d): %s", w.cmd.ProcessState.ExitCode(), w.stderr)
			}
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"lock", name, "-n", "3", "--wait", "0", "--", "true"}, "held with limit 2, not limit 3"},
				{[]string{"acquire", name, "-n", "3"}, "held with limit 2, not limit 3"},
				{[]string{"lock", name, "--wait", "0", "--", "true"}, "held with limit 2, not limit 1 (a lock)"},
			} {
				what := strings.Join(tc.args, " ") + " on a live -n 2 with a queued waiter"
				r := runFence(t, srv, nil, "", tc.args...)
				wantCode(t, what, r, exitError)
				if line := oneLineStderr(t, what, r); !strings.Contains(line, tc.want) {
					t.Fatalf("%s: want %q, got %q", what, tc.want, line)
				}
			}
		})
	}
}
