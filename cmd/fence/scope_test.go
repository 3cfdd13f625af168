package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Scoped tokens through the binary: fence serve reads rights and names from its
// token file, a client is refused (one line, exit 1) what its token does not
// cover, and a malformed file is a usage error that names its line.
func TestCLI_ScopedTokens(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops admin\nworker lock,write jobs/*\nviewer read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startServe(filepath.Join(dir, "data"), "--auth-token-file", tokens)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	as := func(tok string) []string { return []string{"FENCE_AUTH_TOKEN=" + tok} }
	name := "jobs/" + uniqName(t)

	wantCode(t, "worker locks jobs/*", runFence(t, p.url, as("worker"), "", "lock", name, "--", "true"), 0)
	r := runFence(t, p.url, as("worker"), "", "lock", "other-"+uniqName(t), "--", "true")
	wantCode(t, "worker locks a name outside jobs/*", r, exitError)
	if line := oneLineStderr(t, "refused lock", r); !strings.Contains(line, "may not hold lock") || !strings.Contains(line, "jobs/*") {
		t.Fatalf("refused lock: want the refusal and the token's scope named, got %q", line)
	}
	wantCode(t, "viewer reads", runFence(t, p.url, as("viewer"), "", "status", name), 0)
	r = runFence(t, p.url, as("viewer"), "", "acquire", name)
	wantCode(t, "viewer acquires", r, exitError)
	oneLineStderr(t, "viewer acquire", r)
	r = runFence(t, p.url, as("worker"), "", "revoke", name)
	wantCode(t, "worker revokes", r, exitError)
	if line := oneLineStderr(t, "worker revoke", r); !strings.Contains(line, "may not revoke or heal") {
		t.Fatalf("worker revoke: want the right named, got %q", line)
	}

	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("ops admin\nworker lokc jobs/*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runFence(t, "", nil, "", "serve", "--data", filepath.Join(dir, "data2"), "--listen", "127.0.0.1:0", "--auth-token-file", bad)
	wantCode(t, "serve with a malformed token file", r, exitUsage)
	if line := oneLineStderr(t, "malformed token file", r); !strings.Contains(line, "line 2") || !strings.Contains(line, `unknown right "lokc"`) {
		t.Fatalf("malformed token file: want line 2 and the bad right named, got %q", line)
	}
}
