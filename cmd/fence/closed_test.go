package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// P12 through the binary: --listen beyond loopback without auth tokens is refused,
// exit 2, one line naming both ways out, before the store is opened (no data
// directory is made); --allow-no-auth passes with a warning, a token file
// passes without one.
func TestServe_OffLoopbackListen_NeedsAuthOrAllowNoAuth(t *testing.T) {
	dir := t.TempDir()
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.invalid:0"} {
		data := filepath.Join(dir, "refused-data")
		r := runFence(t, "", nil, "", "serve", "--listen", listen, "--data", data)
		wantCode(t, "serve --listen "+listen+" without auth", r, exitUsage)
		line := oneLineStderr(t, "serve --listen "+listen+" without auth", r)
		if !strings.Contains(line, "--auth-token-file") || !strings.Contains(line, "--allow-no-auth") {
			t.Errorf("serve --listen %s without auth: want both --auth-token-file and --allow-no-auth named, got %q", listen, line)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("serve --listen %s was refused after it made its data directory (%v): the check must come before the store opens", listen, err)
		}
	}
	// Loopback needs nothing, as before.
	p, err := startServe(filepath.Join(dir, "loop"), "--listen", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.log(), "without auth tokens") {
		t.Errorf("serve on localhost warned of an open listener:\n%s", p.log())
	}
	p.stop()

	// --allow-no-auth: serves, and says at start what anyone who connects can do.
	p, err = startServe(filepath.Join(dir, "open"), "--listen", "0.0.0.0:0", "--allow-no-auth")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.log(), "without auth tokens (--allow-no-auth)") || !strings.Contains(p.log(), "back up the whole store") {
		t.Errorf("serve --allow-no-auth on 0.0.0.0: want a warning naming what is open, log:\n%s", p.log())
	}
	p.stop()

	// A token file: serves, no warning, and the token is required.
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = startServe(filepath.Join(dir, "auth"), "--listen", "0.0.0.0:0", "--auth-token-file", tokens)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if strings.Contains(p.log(), "without auth tokens") {
		t.Errorf("serve with --auth-token-file warned of an open listener:\n%s", p.log())
	}
	u, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://127.0.0.1:" + u.Port() + "/v1/locks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/locks without the token: got %d; want 401", resp.StatusCode)
	}
}

// P12 for peers: a peer address off loopback without peer TLS is refused, exit 2,
// one line naming --peer-cert and --allow-plain-peers, before the member starts
// (no data directory is made); any host name counts, localhost included, and so
// does another node's address, not only this node's own.
func TestServeCluster_PlainPeersOffLoopback_Refused(t *testing.T) {
	dir := t.TempDir()
	for _, peers := range []string{
		"a=10.0.0.1:7431",
		"a=localhost:7431",
		"a=node-a:7431",
		"a=0.0.0.0:7431",
		"a=127.0.0.1:7431,b=127.0.0.1:7432,c=10.0.0.3:7431",
		"a=127.0.0.1:7431,b=[fe80::1%eth0]:7431",
	} {
		data := filepath.Join(dir, "refused-data")
		r := runFence(t, "", nil, "", "serve", "--listen", "127.0.0.1:0", "--data", data, "--node", "a", "--peers", peers)
		wantCode(t, "serve --peers "+peers, r, exitUsage)
		line := oneLineStderr(t, "serve --peers "+peers, r)
		if !strings.Contains(line, "--peer-cert") || !strings.Contains(line, "--allow-plain-peers") {
			t.Errorf("serve --peers %s: want --peer-cert and --allow-plain-peers named, got %q", peers, line)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("serve --peers %s was refused after it made its data directory (%v)", peers, err)
		}
	}
	r := runFence(t, "", nil, "", "serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "x"), "--allow-plain-peers")
	wantCode(t, "--allow-plain-peers outside cluster mode", r, exitUsage)
	if line := oneLineStderr(t, "--allow-plain-peers outside cluster mode", r); !strings.Contains(line, "needs --node") {
		t.Errorf("--allow-plain-peers without --node: got %q; want it named as a cluster flag", line)
	}
}

// The ways past the refusal: --allow-plain-peers starts the node and warns at
// its start; loopback peers need nothing and warn of nothing.
func TestServeCluster_AllowPlainPeers_StartsWithWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cluster nodes")
	}
	port, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// A peer host name: the node listens on every interface for it.
	p, err := startServe(filepath.Join(t.TempDir(), "a"), "--node", "a", "--peers", fmt.Sprintf("a=localhost:%d", port), "--allow-plain-peers")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.log(), "peer traffic leaves loopback in plain HTTP (--allow-plain-peers)") {
		t.Errorf("node with --allow-plain-peers: want the warning at its start, log:\n%s", p.log())
	}
	p.stop()

	c := startCluster(t, 1)
	if log := c.node("n0").log(); strings.Contains(log, "plain HTTP") {
		t.Errorf("node with loopback peers warned of plain peers:\n%s", log)
	}
}

// P12's last sentence: with auth on, admin data (snapshots, member changes)
// needs the admin right on every name: no token is 401, a token with every
// other right, unscoped, is 403, and only an unscoped admin backs up.
func TestServeCluster_AdminData_NeedsAdminWhenAuthIsOn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster node")
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops admin\nworker read,lock,write\njobadmin admin jobs/*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 1, "--auth-token-file", tokens)
	base := c.node("n0").url
	for _, tc := range []struct {
		method, path, body string
	}{
		{http.MethodGet, "/v1/cluster/snapshot", ""},
		{http.MethodHead, "/v1/cluster/snapshot", ""},
		{http.MethodPost, "/v1/cluster/members", `{"name":"x","peer":"127.0.0.1:1"}`},
		{http.MethodDelete, "/v1/cluster/members/n0", ""},
	} {
		for _, who := range []struct {
			token string
			want  int
		}{{"", http.StatusUnauthorized}, {"worker", http.StatusForbidden}, {"jobadmin", http.StatusForbidden}} {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if who.token != "" {
				req.Header.Set("Authorization", "Bearer "+who.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != who.want {
				t.Errorf("%s %s with token %q: got %d; want %d", tc.method, tc.path, who.token, resp.StatusCode, who.want)
			}
		}
	}
	backup := filepath.Join(t.TempDir(), "backup.db")
	r := runFence(t, base, []string{"FENCE_AUTH_TOKEN=worker"}, "", "cluster", "backup", backup)
	wantCode(t, "fence cluster backup with a token without admin", r, exitError)
	r = runFence(t, base, []string{"FENCE_AUTH_TOKEN=ops"}, "", "cluster", "backup", backup)
	wantCode(t, "fence cluster backup with the admin token", r, 0)
	if fi, err := os.Stat(backup); err != nil || fi.Size() == 0 {
		t.Fatalf("backup with the admin token: %v", err)
	}
}
