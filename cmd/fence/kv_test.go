package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The reproducer: a typo'd token, or a lock never granted, is refused in
// one line and writes nothing; the real holder writes, deletes (the fence stays)
// and an admin purges.
func TestCLI_KV_UnissuedRefused_DeleteKeepsFence_Purge(t *testing.T) {
	srv := cli.serve.url
	name, key := uniqName(t), uniqName(t)+"/brick"
	l := acquireJSON(t, srv, name, "--ttl", "1m")
	tok := fmt.Sprint(l.Token)

	r := runFence(t, srv, nil, "", "kv", "put", key, "--lock", name, "--token", "999999", "typo")
	wantCode(t, "kv put of a token never issued", r, exitError)
	if line := oneLineStderr(t, "kv put of a token never issued", r); !strings.Contains(line, "999999") || !strings.Contains(line, "never issued") || !strings.Contains(line, "last token issued is "+tok) {
		t.Fatalf("kv put of a token never issued: want one line naming 999999 and the last token %s, got %q", tok, line)
	}
	r = runFence(t, srv, nil, "", "kv", "put", key, "--lock", uniqName(t)+"-never", "--token", "42", "typo")
	wantCode(t, "kv put under a lock never granted", r, exitError)
	if line := oneLineStderr(t, "kv put under a lock never granted", r); !strings.Contains(line, "never granted") {
		t.Fatalf("kv put under a lock never granted: want a line saying so, got %q", line)
	}
	wantCode(t, "kv get after refused puts", runFence(t, srv, nil, "", "kv", "get", key), exitError)

	r = runFence(t, srv, nil, "", "kv", "put", key, "--lock", name, "--token", tok, "--lease", "0123456789abcdef0123456789abcdef", "forged")
	wantCode(t, "kv put under another lease", r, exitError)
	if line := oneLineStderr(t, "kv put under another lease", r); !strings.Contains(line, "issued to another lease") {
		t.Fatalf("kv put under another lease: want a line saying the token went to another lease, got %q", line)
	}

	env := []string{"FENCE_LOCK=" + name, "FENCE_TOKEN=" + tok, "FENCE_LEASE=" + l.Lease}
	wantCode(t, "kv put by the holder", runFence(t, srv, env, "", "kv", "put", key, "real"), 0)
	r = runFence(t, srv, env, "", "kv", "delete", key)
	wantCode(t, "kv delete", r, 0)
	if r.stdout != "deleted "+key+" (token "+tok+")\n" {
		t.Fatalf("kv delete: want %q, got %q", "deleted "+key+" (token "+tok+")\n", r.stdout)
	}
	r = runFence(t, srv, nil, "", "kv", "get", key)
	wantCode(t, "kv get of a deleted key", r, exitError)
	if line := oneLineStderr(t, "kv get of a deleted key", r); !strings.Contains(line, "no value") || !strings.Contains(line, fmt.Sprintf("lock %q at token %s", name, tok)) {
		t.Fatalf("kv get of a deleted key: want a line naming the fence it keeps, got %q", line)
	}
	r = runFence(t, srv, env, "", "kv", "delete", key)
	wantCode(t, "second kv delete", r, exitError)
	if line := oneLineStderr(t, "second kv delete", r); !strings.Contains(line, "not found") {
		t.Fatalf("second kv delete: want not found, got %q", line)
	}
	wantCode(t, "kv delete without a lock", runFence(t, srv, nil, "", "kv", "delete", key, "--token", tok), exitUsage)

	r = runFence(t, srv, nil, "", "-o", "json", "kv", "purge", key)
	wantCode(t, "kv purge", r, 0)
	if v := decode[map[string]any](t, "kv purge -o json", r); v["key"] != key || v["purged"] != true {
		t.Fatalf("kv purge -o json: want {key, purged: true}, got %v", v)
	}
	wantCode(t, "second kv purge", runFence(t, srv, nil, "", "kv", "purge", key), exitError)
	wantCode(t, "kv get of a purged key", runFence(t, srv, nil, "", "kv", "get", key), exitError)
}

// The reproducer (P9): anyone who reads a live token (fence status shows
// it) sends it without the lease. kv put and kv delete are refused in one line
// that says what to give, nothing is written, and the holder still writes, its
// lease taken from FENCE_LEASE. Once the lease is released, the token alone is
// admitted as before.
func TestCLI_KV_LiveTokenWithoutLease_RefusedSayingWhatToGive(t *testing.T) {
	srv := cli.serve.url
	name, key := uniqName(t), uniqName(t)+"/ledger"
	l := acquireJSON(t, srv, name, "--ttl", "1m")
	tok := fmt.Sprint(l.Token)
	bare := []string{"FENCE_LOCK=" + name, "FENCE_TOKEN=" + tok}
	for _, args := range [][]string{{"kv", "put", key, "bare"}, {"kv", "delete", key}} {
		what := strings.Join(args[:2], " ") + " with a live token and no lease"
		r := runFence(t, srv, bare, "", args...)
		wantCode(t, what, r, exitError)
		want := fmt.Sprintf("token %s of lock %q belongs to a live lease", tok, name)
		if line := oneLineStderr(t, what, r); !strings.Contains(line, want) || !strings.HasSuffix(line, "; give --lease or set FENCE_LEASE") {
			t.Fatalf("%s: want one line saying %q and what to give, got %q", what, want, line)
		}
		r = runFence(t, srv, bare, "", append([]string{"-o", "json"}, args...)...)
		wantCode(t, what+" -o json", r, exitError)
		if !strings.Contains(r.stderr, `"code":"lease_required"`) {
			t.Fatalf("%s -o json: want code lease_required, got %q", what, r.stderr)
		}
	}
	wantCode(t, "kv get after the refused put", runFence(t, srv, nil, "", "kv", "get", key), exitError)
	holder := append(bare, "FENCE_LEASE="+l.Lease)
	wantCode(t, "kv put by the holder, the lease from FENCE_LEASE", runFence(t, srv, holder, "", "kv", "put", key, "mine"), 0)
	wantCode(t, "release", runFence(t, srv, nil, "", "release", name, "--lease", l.Lease), 0)
	wantCode(t, "kv put with the released lease's token alone", runFence(t, srv, bare, "", "kv", "put", key+"2", "token only"), 0)
}

// `fence lock -- sh -c 'fence kv ...'`: the child's kv commands carry the lease
// (FENCE_LEASE), which the server checks against the live lease of the token.
func TestCLI_Lock_ChildKVSendsLease(t *testing.T) {
	srv := cli.serve.url
	name, key := uniqName(t), uniqName(t)+"/report"
	script := `fence kv put "` + key + `" mine || exit 10
FENCE_LEASE=0123456789abcdef0123456789abcdef fence kv put "` + key + `" forged 2>&1 && exit 11
fence kv delete "` + key + `" || exit 12
exit 0`
	r := runFence(t, srv, nil, "", "lock", name, "--", "sh", "-c", script)
	wantCode(t, "lock -- kv put, forged put, kv delete", r, 0)
	if !strings.Contains(r.stdout, "issued to another lease") {
		t.Fatalf("the child's put under another lease id: want it refused as issued to another lease, got stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// kv put and kv delete send Fence-Lease whenever a lease is given, by flag or by
// $FENCE_LEASE; kv purge sends no fence and asks for a purge.
func TestCLI_KV_SendsLeaseAndPurgeQuery(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got = append(got, req.Clone(req.Context()))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	defer ts.Close()
	const lease = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		env          []string
		args         []string
		method, want string // want: the Fence-Lease sent
		query        string
	}{
		{[]string{"FENCE_LOCK=job", "FENCE_TOKEN=5", "FENCE_LEASE=" + lease}, []string{"kv", "put", "k", "v"}, "PUT", lease, ""},
		{nil, []string{"kv", "put", "k", "--lock", "job", "--token", "5", "--lease", lease, "v"}, "PUT", lease, ""},
		{[]string{"FENCE_LOCK=job", "FENCE_TOKEN=5", "FENCE_LEASE=" + lease}, []string{"kv", "delete", "k"}, "DELETE", lease, ""},
		{nil, []string{"kv", "delete", "k", "--lock", "job", "--token", "5"}, "DELETE", "", ""},
		{[]string{"FENCE_LOCK=job", "FENCE_TOKEN=5", "FENCE_LEASE=" + lease}, []string{"kv", "purge", "k"}, "DELETE", "", "purge=true"},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		r := runFence(t, ts.URL, tc.env, "", tc.args...)
		wantCode(t, fmt.Sprintf("fence %q (env %q)", tc.args, tc.env), r, 0)
		mu.Lock()
		if len(got) != 1 || got[0].Method != tc.method || got[0].Header.Get("Fence-Lease") != tc.want || got[0].URL.RawQuery != tc.query {
			t.Errorf("fence %q (env %q): want one %s with Fence-Lease %q and query %q, got %d requests", tc.args, tc.env, tc.method, tc.want, tc.query, len(got))
		} else if tc.query != "" && (got[0].Header.Get("Fence-Token") != "" || got[0].Header.Get("Fence-Lock") != "") {
			t.Errorf("fence %q: a purge sent fence headers %v", tc.args, got[0].Header)
		}
		mu.Unlock()
	}
}

// fence serve --external-locks: the embedded store takes tokens it never issued
// (the clients lock elsewhere) by the guard rule alone; any other store refuses
// the flag.
func TestCLI_Serve_ExternalLocks(t *testing.T) {
	p, err := startServe(t.TempDir(), "--external-locks")
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	wantCode(t, "kv put of a foreign token", runFence(t, p.url, nil, "", "kv", "put", "k", "--lock", "redis-lock", "--token", "999999", "v"), 0)
	r := runFence(t, p.url, nil, "", "kv", "put", "k", "--lock", "redis-lock", "--token", "5", "old")
	wantCode(t, "kv put of a lower foreign token", r, exitError)
	if !strings.Contains(r.stderr, "stale token 5") {
		t.Fatalf("kv put of a lower foreign token: want it refused as stale, got %q", r.stderr)
	}
	r = runFence(t, "", nil, "", "serve", "--external-locks", "--store", "redis://127.0.0.1:1", "--listen", "127.0.0.1:0", "--data", t.TempDir())
	wantCode(t, "serve --external-locks --store redis://", r, exitUsage)
	if line := oneLineStderr(t, "serve --external-locks --store redis://", r); !strings.Contains(line, "--external-locks") {
		t.Fatalf("serve --external-locks with another store: want a line naming the flag, got %q", line)
	}
}

// A script that runs `fence kv put` again for the same write names it with
// --attempt: a run of write 1 after write 2 (its first run landing late, or a
// retry after "cannot reach") changes nothing. A malformed --attempt is a usage
// error and writes nothing.
func TestCLI_KV_Attempt_RunAgainAfterLaterWrite_ChangesNothing(t *testing.T) {
	srv := cli.serve.url
	name, key := uniqName(t), uniqName(t)+"/ledger"
	l := acquireJSON(t, srv, name, "--ttl", "1m")
	env := []string{"FENCE_LOCK=" + name, "FENCE_TOKEN=" + fmt.Sprint(l.Token), "FENCE_LEASE=" + l.Lease}
	wantCode(t, "kv put v1 --attempt w1", runFence(t, srv, env, "", "kv", "put", key, "--attempt", "w1", "v1"), 0)
	wantCode(t, "kv put v2 --attempt w2", runFence(t, srv, env, "", "kv", "put", key, "--attempt", "w2", "v2"), 0)
	wantCode(t, "kv put v1 --attempt w1 again", runFence(t, srv, env, "", "kv", "put", key, "--attempt", "w1", "v1"), 0)
	if r := runFence(t, srv, nil, "", "kv", "get", key); r.code != 0 || r.stdout != "v2" {
		t.Fatalf("kv get after write 1 ran again: want v2 (exit 0), got %q (exit %d, %s)", r.stdout, r.code, r.stderr)
	}
	r := runFence(t, srv, env, "", "kv", "put", key, "--attempt", "has space", "bad")
	wantCode(t, "kv put --attempt 'has space'", r, exitUsage)
	if line := oneLineStderr(t, "kv put --attempt 'has space'", r); !strings.Contains(line, "--attempt") {
		t.Fatalf("kv put with a malformed --attempt: want one line naming --attempt, got %q", line)
	}
	wantCode(t, "kv delete --attempt d1", runFence(t, srv, env, "", "kv", "delete", key, "--attempt", "d1"), 0)
	wantCode(t, "kv delete --attempt d1 again", runFence(t, srv, env, "", "kv", "delete", key, "--attempt", "d1"), 0)
}
