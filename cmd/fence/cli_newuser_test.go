package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With -o json every error is one JSON line on stderr, {"error","code"}, with the
// exit status of the same error in text.
func TestCLI_JSONOutput_ErrorsAreOneJSONLine_SameExitCodes(t *testing.T) {
	srv := cli.serve.url
	held := uniqName(t)
	acquireJSON(t, srv, held, "--ttl", "10m")
	for _, tc := range []struct {
		server string
		args   []string
		code   int
		ecode  string // the JSON "code"
		text   string // in the text error and the JSON "error"
	}{
		{srv, []string{"lock", "x", "--bogus"}, exitUsage, "usage", "lock: unknown flag --bogus"},
		{srv, []string{"acquire", ""}, exitUsage, "usage", `lock name "": is empty`},
		{srv, []string{"acquire", held}, exitNotAcquired, "held", fmt.Sprintf("lock %q is held", held)},
		{srv, []string{"release", uniqName(t), "--lease", "0123456789abcdef0123456789abcdef"}, exitError, "not_held", "lease not held"},
		{"http://" + freeAddr(t), []string{"status", "x"}, exitError, "unavailable", "cannot reach the fence server"},
	} {
		text := runFence(t, tc.server, nil, "", tc.args...)
		what := fmt.Sprintf("fence %q", tc.args)
		wantCode(t, what, text, tc.code)
		if line := oneLineStderr(t, what, text); !strings.HasPrefix(line, "fence: ") || !strings.Contains(line, tc.text) {
			t.Errorf("%s: want `fence: ...%s...`, got %q", what, tc.text, line)
		}
		for _, args := range [][]string{append([]string{"-o", "json"}, tc.args...), append(tc.args, "--output=json")} {
			r := runFence(t, tc.server, nil, "", args...)
			what := fmt.Sprintf("fence %q", args)
			wantCode(t, what, r, tc.code)
			line := jsonLineStderr(t, what, r)
			var got map[string]string
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Errorf("%s: want a JSON error line, got %q (%v)", what, line, err)
				continue
			}
			if len(got) != 2 || got["code"] != tc.ecode || !strings.Contains(got["error"], tc.text) || strings.HasPrefix(got["error"], "fence:") {
				t.Errorf("%s: want {\"error\": \"...%s...\", \"code\": %q}, got %s", what, tc.text, tc.ecode, line)
			}
		}
	}
}

// jsonLineStderr returns the one line of r's stderr, failing the test if there
// are more or none.
func jsonLineStderr(t testing.TB, what string, r result) string {
	t.Helper()
	line := strings.TrimSuffix(r.stderr, "\n")
	if line == "" || strings.Contains(line, "\n") || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("%s: want one line on stderr, got %q", what, r.stderr)
	}
	return line
}

// A server that refuses the auth token (401) gets a hint at FENCE_AUTH_TOKEN, in
// text and in JSON.
func TestCLI_Unauthorized_HintsAtFenceAuthToken(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("client-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startServe(filepath.Join(dir, "data"), "--auth-token-file", tokens)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	const hint = "; set FENCE_AUTH_TOKEN to a token the server accepts"
	for _, env := range [][]string{nil, {"FENCE_AUTH_TOKEN=nope"}} {
		r := runFence(t, p.url, env, "", "status", "x")
		wantCode(t, fmt.Sprintf("status with env %q", env), r, exitError)
		if line := oneLineStderr(t, "status refused", r); !strings.HasPrefix(line, "fence: unauthorized") || !strings.HasSuffix(line, hint) {
			t.Errorf("status with env %q: want `fence: ...%s`, got %q", env, hint, line)
		}
	}
	r := runFence(t, p.url, nil, "", "-o", "json", "status", "x")
	wantCode(t, "status -o json refused", r, exitError)
	var got struct{ Error, Code string }
	if err := json.Unmarshal([]byte(jsonLineStderr(t, "status -o json refused", r)), &got); err != nil || got.Code != "unauthorized" || !strings.HasSuffix(got.Error, hint) {
		t.Errorf("status -o json refused: want {\"error\":\"...%s\",\"code\":\"unauthorized\"}, got %q", hint, r.stderr)
	}
}

// fence kv put of one byte says "1 byte".
func TestCLI_KVPut_OneByte_SaysByteNotBytes(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	l := acquireJSON(t, srv, name)
	for value, size := range map[string]string{"x": "1 byte", "xy": "2 bytes"} {
		r := runFence(t, srv, []string{"FENCE_LEASE=" + l.Lease}, "", "kv", "put", name+"/"+value, "--lock", name, "--token", fmt.Sprint(l.Token), value)
		wantCode(t, "kv put "+value, r, 0)
		if want := fmt.Sprintf("stored %s/%s (%s, token %d)\n", name, value, size, l.Token); r.stdout != want {
			t.Errorf("kv put %q: want %q, got %q", value, want, r.stdout)
		}
	}
}

// A bad --workers is refused naming the flag, for every command that has one.
func TestCLI_WorkersOutOfRange_ErrorNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"chaos", "--workers", "1", "--duration", "1s"}, "--workers 1: want 2 to 64 worker processes"},
		{[]string{"chaos", "--workers", "65", "--duration", "1s"}, "--workers 65: want 2 to 64 worker processes"},
		{[]string{"chaos", "--matrix", "--workers", "1"}, "--workers 1: want 2 to 64 worker processes"},
		{[]string{"simulate", "--scenario", "random", "--workers", "30"}, "simulate: --workers: workers must be 1 to 26, got 30"},
		{[]string{"simulate", "--scenario", "semaphore-pause", "--workers", "1"}, "simulate: --workers: semaphore-pause needs 2 to 25 permits (workers), got 1"},
	} {
		r := runFence(t, cli.serve.url, nil, "", tc.args...)
		what := fmt.Sprintf("fence %q", tc.args)
		wantCode(t, what, r, exitUsage)
		if line := oneLineStderr(t, what, r); line != "fence: "+tc.want {
			t.Errorf("%s: want %q, got %q", what, "fence: "+tc.want, line)
		}
	}
}

// fence chaos --duration 0 or negative is refused at once, naming the flag.
func TestChaos_DurationNotPositive_RefusedAtOnce(t *testing.T) {
	for _, d := range []string{"0", "0s", "-1s"} {
		for _, matrix := range []bool{false, true} {
			args := []string{"chaos", "--duration", d, "--nemesis", "none"}
			if matrix {
				args = []string{"chaos", "--matrix", "--duration", d, "--stores", "bolt"}
			}
			start := time.Now()
			r := runFence(t, cli.serve.url, nil, "", args...)
			what := fmt.Sprintf("fence %q", args)
			wantCode(t, what, r, exitUsage)
			if line := oneLineStderr(t, what, r); !strings.Contains(line, "--duration") || !strings.Contains(line, "want a positive duration") {
				t.Errorf("%s: want a line naming --duration, got %q", what, line)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("%s: took %v to be refused", what, took)
			}
		}
	}
}

// SIGINT ends fence chaos as it ends every command: exit 130 and "interrupted",
// naming where the results are; without --results they are in a new temporary
// directory (of $TMPDIR), not the working directory.
func TestChaos_SIGINT_Exit130Interrupted_ResultsInATempDir(t *testing.T) {
	tmp := t.TempDir()
	// It runs in the package directory, where it must leave no chaos-results.
	p := startFence(t, cli.serve.url, []string{"TMPDIR=" + tmp}, "chaos", "--duration", "5m", "--nemesis", "none", "--workers", "2")
	var line string
	var err error
	p.within(t, "chaos's first progress line", func() { line, err = p.out.ReadString('\n') })
	if err != nil || !strings.HasPrefix(line, "chaos fenced") {
		t.Fatalf("chaos: want a progress line first, got %q (%v); stderr: %s", line, err, p.stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t, "chaos after SIGINT")
	errLine := strings.TrimSuffix(p.stderr.String(), "\n")
	m := regexp.MustCompile(`^fence: chaos: interrupted \(SIGINT\) while running; results in (\S+)$`).FindStringSubmatch(errLine)
	if code != exitInterrupted || m == nil {
		t.Fatalf("chaos after SIGINT: want exit 130 and `fence: chaos: interrupted (SIGINT) while running; results in DIR`, got %d and %q", code, errLine)
	}
	if filepath.Dir(m[1]) != tmp || !strings.HasPrefix(filepath.Base(m[1]), "fence-chaos-") {
		t.Errorf("chaos results: want a new fence-chaos-* directory in $TMPDIR %s, got %s", tmp, m[1])
	}
	if runs, _ := filepath.Glob(filepath.Join(m[1], "fenced-*", "worker-0.jsonl")); len(runs) != 1 {
		t.Errorf("chaos results: want the run's folder with its worker logs in %s, got %v", m[1], runs)
	}
	if _, err := os.Stat("chaos-results"); err == nil {
		t.Errorf("chaos without --results made chaos-results in the working directory")
	}
}

// fence serve --listen PORT listens on 127.0.0.1:PORT.
func TestServe_ListenBarePort_MeansLoopback(t *testing.T) {
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	p, err := startServe(filepath.Join(t.TempDir(), "data"), "--listen", port)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if p.url != "http://127.0.0.1:"+port {
		t.Fatalf("serve --listen %s: want it to listen on http://127.0.0.1:%s, got %s", port, port, p.url)
	}
	if body, err := httpGet(p.url + "/healthz"); err != nil {
		t.Fatalf("GET /healthz of serve --listen %s: %v %s", port, err, body)
	}
	if r := runFence(t, "", nil, "", "serve", "--help"); !strings.Contains(r.stdout, "a bare PORT means 127.0.0.1:PORT") {
		t.Errorf("serve --help: want --listen's help to say what a bare PORT means, got:\n%s", r.stdout)
	}
}

// fence serve checks its flags before it opens the store: a bad one is a usage
// error naming it, even where the store is held by another server (the shared
// test server's data directory).
func TestServe_BadFlags_Exit2NamingTheFlag_BeforeTheStoreIsOpened(t *testing.T) {
	busy := cli.serve.data
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", ":abc"}, `--listen ":abc": port "abc": want a number from 0 to 65535`},
		{[]string{"--listen", "70000"}, `--listen "70000": port "70000": want a number from 0 to 65535`},
		{[]string{"--listen", "127.0.0.1:-1"}, `--listen "127.0.0.1:-1": port "-1": want a number from 0 to 65535`},
		{[]string{"--listen", "localhost"}, `--listen "localhost": want HOST:PORT, :PORT (every interface) or PORT (127.0.0.1:PORT)`},
		{[]string{"--listen", ""}, `--listen "": want HOST:PORT`},
		{[]string{"--tls-cert", missing}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", missing, "--tls-key", missing}, "--tls-cert/--tls-key: open " + missing},
		{[]string{"--auth-token-file", missing}, "--auth-token-file: open " + missing},
		{[]string{"--max-wait", "0s"}, "--max-wait"},
	} {
		args := append([]string{"serve", "--data", busy}, tc.args...)
		r := runFence(t, "", nil, "", args...)
		what := fmt.Sprintf("fence %q (its store held by another server)", args)
		wantCode(t, what, r, exitUsage)
		if line := oneLineStderr(t, what, r); !strings.Contains(line, tc.want) || strings.Contains(line, "locked") {
			t.Errorf("%s: want a line saying %q, got %q", what, tc.want, line)
		}
	}
}
