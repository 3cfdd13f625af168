package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var nameSeq atomic.Int64

func uniqName(t testing.TB) string {
	return fmt.Sprintf("%s/%d", t.Name(), nameSeq.Add(1))
}

type leaseJSON struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
	Lease string `json:"lease"`
	TTLms int64  `json:"ttl_ms"`
}

func decode[T any](t testing.TB, what string, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%s: stdout is not the expected JSON: %v\nstdout: %s\nstderr: %s", what, err, r.stdout, r.stderr)
	}
	return v
}

func acquireJSON(t testing.TB, server, name string, args ...string) leaseJSON {
	t.Helper()
	r := runFence(t, server, nil, "", append([]string{"-o", "json", "acquire", name}, args...)...)
	wantCode(t, "acquire "+name, r, 0)
	l := decode[leaseJSON](t, "acquire", r)
	if l.Name != name || l.Token == 0 || len(l.Lease) < 32 {
		t.Fatalf("acquire: want {name:%q, token>0, lease of 128 bits}, got %+v", name, l)
	}
	return l
}

type statusJSON struct {
	Name      string `json:"name"`
	Held      bool   `json:"held"`
	Token     uint64 `json:"token"`
	LastToken uint64 `json:"last_token"`
}

func status(t testing.TB, server, name string) statusJSON {
	t.Helper()
	r := runFence(t, server, nil, "", "-o", "json", "status", name)
	wantCode(t, "status "+name, r, 0)
	return decode[statusJSON](t, "status", r)
}

func TestCLI_AcquireRenewStatusRelease(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	l := acquireJSON(t, srv, name, "--ttl", "1m")
	if l.TTLms != 60000 {
		t.Fatalf("acquire --ttl 1m: want ttl_ms 60000, got %d", l.TTLms)
	}
	wantCode(t, "second acquire", runFence(t, srv, nil, "", "acquire", name), exitNotAcquired)
	if s := status(t, srv, name); !s.Held || s.Token != l.Token {
		t.Fatalf("status: want held with token %d, got %+v", l.Token, s)
	}
	list := runFence(t, srv, nil, "", "-o", "json", "status", "--prefix", t.Name()+"/")
	wantCode(t, "status --prefix", list, 0)
	locks := decode[struct{ Locks []statusJSON }](t, "status --prefix", list).Locks
	if len(locks) != 1 || locks[0].Name != name {
		t.Fatalf("status --prefix: want just %q, got %+v", name, locks)
	}
	if strings.Contains(list.stdout, l.Lease) {
		t.Fatalf("status shows the lease id, a credential: %s", list.stdout)
	}
	wantCode(t, "renew", runFence(t, srv, nil, "", "renew", name, "--lease", l.Lease, "--ttl", "2m"), 0)
	wantCode(t, "renew with another lease id", runFence(t, srv, nil, "", "renew", name, "--lease", "0123456789abcdef0123456789abcdef"), exitError)
	wantCode(t, "release", runFence(t, srv, nil, "", "release", name, "--lease", l.Lease), 0)
	r := runFence(t, srv, nil, "", "release", name, "--lease", l.Lease)
	wantCode(t, "second release", r, exitError)
	if !strings.Contains(r.stderr, "not held") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("second release: want one line saying the lease is not held, got %q", r.stderr)
	}
	if s := status(t, srv, name); s.Held {
		t.Fatalf("status after release: want free, got %+v", s)
	}
	next := acquireJSON(t, srv, name)
	if next.Token <= l.Token {
		t.Fatalf("next token %d: want greater than %d", next.Token, l.Token)
	}
}

func TestCLI_Acquire_WaitWokenByRelease(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	l := acquireJSON(t, srv, name, "--ttl", "10m")
	f := startFence(t, srv, nil, "-o", "json", "acquire", name, "--wait", "5m")
	// Release once the waiter is at the server: its acquire is then a long poll.
	waitFor(t, "the waiter to reach the server", func() bool { return metric(t, srv, "fence_waits_total") >= 1 })
	wantCode(t, "release", runFence(t, srv, nil, "", "release", name, "--lease", l.Lease), 0)
	var next leaseJSON
	var err error
	f.within(t, "the waiter's lease", func() { err = json.NewDecoder(f.out).Decode(&next) })
	if err != nil {
		t.Fatalf("waiter's output: %v (stderr %q)", err, f.stderr)
	}
	if code := f.wait(t, "the waiter"); code != 0 {
		t.Fatalf("waiter: exit status %d (stderr %q)", code, f.stderr)
	}
	if next.Token <= l.Token {
		t.Fatalf("waiter's token %d: want greater than %d", next.Token, l.Token)
	}
}

func TestCLI_Lock_ChildGetsEnvAndItsStatusIsOurs(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	r := runFence(t, srv, nil, "", "lock", name, "--", "sh", "-c", `echo "$FENCE_LOCK|$FENCE_TOKEN|$FENCE_LEASE|$FENCE_SERVER"; exit 7`)
	wantCode(t, "lock -- sh -c 'exit 7'", r, 7)
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(parts) != 4 || parts[0] != name || parts[1] == "" || len(parts[2]) < 32 || parts[3] != srv {
		t.Fatalf("child env: want %q|TOKEN|LEASE|%s, got %q", name, srv, r.stdout)
	}
	if s := status(t, srv, name); s.Held {
		t.Fatalf("after the child exited: want the lock released, got %+v", s)
	}
	// A child killed by a signal: 128+N, like a shell.
	r = runFence(t, srv, nil, "", "lock", name, "--", "sh", "-c", `kill -KILL $$`)
	wantCode(t, "child killed by SIGKILL", r, 128+9)
}

func TestCLI_Lock_FencedWriteFromChild_StaleWriteRefused(t *testing.T) {
	srv := cli.serve.url
	name, key := uniqName(t), uniqName(t)+"/report"
	r := runFence(t, srv, nil, "", "lock", name, "--", "sh", "-c", `fence kv put "`+key+`" "first run" && echo "$FENCE_TOKEN"`)
	wantCode(t, "lock -- fence kv put", r, 0)
	first := strings.TrimSpace(r.stdout[strings.LastIndex(strings.TrimSpace(r.stdout), "\n")+1:])
	r = runFence(t, srv, nil, "", "lock", name, "--", "sh", "-c", `fence kv put "`+key+`" "second run"`)
	wantCode(t, "second lock -- fence kv put", r, 0)
	// A zombie of the first run writes with its old token: refused, value kept.
	r = runFence(t, srv, []string{"FENCE_LOCK=" + name}, "", "kv", "put", key, "--token", first, "zombie")
	wantCode(t, "stale kv put", r, exitError)
	if !strings.Contains(r.stderr, "stale token "+first) || !strings.Contains(r.stderr, "highest seen") {
		t.Fatalf("stale kv put: want an error naming token %s and the highest seen, got %q", first, r.stderr)
	}
	g := runFence(t, srv, nil, "", "kv", "get", key)
	wantCode(t, "kv get", g, 0)
	if g.stdout != "second run" {
		t.Fatalf("kv get: want %q, got %q", "second run", g.stdout)
	}
	j := runFence(t, srv, nil, "", "-o", "json", "kv", "get", key)
	item := decode[map[string]any](t, "kv get -o json", j)
	if item["value"] != "second run" || item["lock"] != name {
		t.Fatalf("kv get -o json: want value %q lock %q, got %v", "second run", name, item)
	}
	// Value from stdin, binary, under a later grant.
	bin := "\x00\xff\xfe binary"
	l := acquireJSON(t, srv, name, "--ttl", "1m")
	r = runFence(t, srv, []string{"FENCE_LOCK=" + name}, bin, "kv", "put", key, "--token", fmt.Sprint(l.Token), "--lease", l.Lease, "-")
	wantCode(t, "kv put - (stdin)", r, 0)
	j = runFence(t, srv, nil, "", "-o", "json", "kv", "get", key)
	if item := decode[map[string]any](t, "kv get binary", j); item["value_base64"] == nil {
		t.Fatalf("kv get -o json of a binary value: want value_base64, got %v", item)
	}
}

func TestCLI_Lock_NotAcquiredWithinWait_75(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	acquireJSON(t, srv, name, "--ttl", "10m")
	r := runFence(t, srv, nil, "", "lock", name, "--wait", "50ms", "--", "sh", "-c", "echo ran")
	wantCode(t, "lock of a held name", r, exitNotAcquired)
	if strings.Contains(r.stdout, "ran") {
		t.Fatalf("the command ran without the lock: %q", r.stdout)
	}
}

// lockLosingLease runs fence lock on a fresh name with flags and a child that
// releases its own lease behind fence lock's back, so the next renewal (at ttl/3) is
// answered 410: the lease is lost while the child runs. trap is the child's handling
// of SIGTERM (a trap command); the child then loops until it is ended.
func lockLosingLease(t *testing.T, trap string, flags ...string) result {
	t.Helper()
	script := trap + `
fence release "$FENCE_LOCK" >/dev/null
while :; do sleep 0.05; done`
	args := append(append([]string{"lock", uniqName(t)}, flags...), "--", "sh", "-c", script)
	return runFence(t, cli.serve.url, nil, "", args...)
}

func TestCLI_Lock_LeaseLost_SIGTERMThen76(t *testing.T) {
	r := lockLosingLease(t, `trap 'echo got-term; exit 0' TERM`, "--ttl", "600ms")
	wantCode(t, "lock whose lease is lost", r, exitLeaseLost)
	if !strings.Contains(r.stdout, "got-term") {
		t.Fatalf("the child did not get SIGTERM: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "lease lost") {
		t.Fatalf("stderr: want a line saying the lease was lost, got %q", r.stderr)
	}
}

func TestCLI_Lock_LeaseLost_SIGKILLAfterGrace(t *testing.T) {
	start := time.Now()
	r := lockLosingLease(t, `trap '' TERM`, "--ttl", "600ms", "--grace", "300ms")
	wantCode(t, "lock whose child ignores SIGTERM", r, exitLeaseLost)
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("fence lock took %v: the child was not killed after the grace", d)
	}
}

func TestCLI_Lock_ForwardsSIGTERMToChild(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	f := startFence(t, srv, nil, "lock", name, "--", "sh", "-c", `trap 'echo forwarded; exit 5' TERM; echo ready; while :; do sleep 0.05; done`)
	sc := bufio.NewScanner(f.out)
	var ready bool
	f.within(t, "the child's first line", func() { ready = sc.Scan() && sc.Text() == "ready" })
	if !ready {
		t.Fatalf("child did not start: %q", sc.Text())
	}
	if err := f.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	f.within(t, "the child's output after SIGTERM", func() {
		for sc.Scan() {
			rest = append(rest, sc.Text())
		}
	})
	if code := f.wait(t, "fence lock"); code != 5 || len(rest) != 1 || rest[0] != "forwarded" {
		t.Fatalf("SIGTERM to fence lock: want the child to get it (prints forwarded, exits 5), got status %d output %q", code, rest)
	}
	if s := status(t, srv, name); s.Held {
		t.Fatalf("after the forwarded signal: want the lock released, got %+v", s)
	}
}

func TestCLI_UsageErrors_Exit2(t *testing.T) {
	srv := cli.serve.url
	for _, args := range [][]string{
		{"acquire"},
		{"acquire", "a", "--ttl", "0s"},
		{"acquire", "a", "--ttl", "1.5ms"},
		{"acquire", "a", "--ttl", "48h"},
		{"acquire", "a", "--wait", "-1s"},
		{"acquire", "bad\x01name"},
		{"renew", "a"},
		{"renew", "a", "--lease", "has space"},
		{"release", "a"},
		{"status", "a", "--prefix", "b"},
		{"lock", "a", "--"},
		{"lock", "a", "b", "--", "c"},
		{"elect"},
		{"elect", "a"},
		{"elect", "a", "--"},
		{"elect", "--", "c"},
		{"elect", "a", "b", "--", "c"},
		{"elect", "a", "c"},
		{"elect", "a", "--ttl", "0s", "--", "true"},
		{"elect", "a", "--grace", "-1s", "--", "true"},
		{"elect", "a", "--owner", "two\nlines", "--", "true"},
		{"elect", "bad\x01name", "--", "true"},
		{"elect", "a", "--rejoin=maybe", "--", "true"},
		{"leader"},
		{"leader", "a", "b"},
		{"leader", ""},
		{"leader", "a", "--watch=maybe"},
		{"kv", "put", "k", "v"},
		{"kv", "put", "k", "--token", "0", "v"},
		{"kv", "put", "k", "--token", "x", "v"},
		{"kv", "put", "k", "--token", "1"},
		{"kv", "get"},
		{"kv"},
		{"-o", "yaml", "status"},
		{"status", "--server", "not a url"},
		{"serve", "--tls-cert", "x"},
		{"serve", "--store", "nosuch://x"},
		{"serve", "--auth-token-file", "/nonexistent/tokens"},
	} {
		r := runFence(t, srv, nil, "", args...)
		wantCode(t, fmt.Sprintf("fence %q", args), r, exitUsage)
		if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; r.stderr == "" || lines != 1 {
			t.Fatalf("fence %q: want one line on stderr, got %q", args, r.stderr)
		}
	}
}

func TestServe_StoreUnreachable_OneLineErrorWithoutPassword(t *testing.T) {
	for _, store := range []string{"redis://:pw@127.0.0.1:1", "etcd://127.0.0.1:1,127.0.0.1:2", "postgres://u:pw@127.0.0.1:1/db"} {
		r := runFence(t, "", nil, "", "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--store", store)
		wantCode(t, "serve --store "+store, r, exitError)
		if msg := strings.TrimSpace(r.stderr); msg == "" || strings.Contains(msg, "\n") {
			t.Fatalf("serve --store %s: want one line on stderr, got %q", store, r.stderr)
		}
		if strings.Contains(r.stderr, "pw") {
			t.Fatalf("serve --store %s: the error shows the password: %q", store, r.stderr)
		}
	}
}

func TestServe_SIGTERM_GracefulShutdownThenReopen(t *testing.T) {
	data := t.TempDir()
	p, err := startServe(data, "--shutdown-timeout", "5s")
	if err != nil {
		t.Fatal(err)
	}
	name := uniqName(t)
	l := acquireJSON(t, p.url, name, "--ttl", "10m")
	// A long poll in flight when SIGTERM comes ends at once (503), it does not hold
	// the shutdown up until the timeout cuts it.
	waiter := exec.Command(cli.bin, "acquire", name, "--wait", "10m")
	waiter.Env = append(cleanEnv(), "FENCE_SERVER="+p.url)
	var werr strings.Builder
	waiter.Stderr = &werr
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiter to reach the server", func() bool { return metric(t, p.url, "fence_waits_total") >= 1 })
	if err := p.stop(); err != nil {
		t.Fatalf("fence serve after SIGTERM: want exit 0, got %v\n%s", err, p.log())
	}
	if !strings.Contains(p.log(), "stopped") {
		t.Fatalf("log: want a clean stop, got:\n%s", p.log())
	}
	if strings.Contains(p.log(), "were cut") {
		t.Fatalf("the long poll held the shutdown up until it was cut:\n%s", p.log())
	}
	// The waiter keeps retrying the server within its wait; it is not needed any more.
	_ = waiter.Process.Kill()
	_ = waiter.Wait()
	// A clean close keeps the leases: the reopened store honours the lease at once.
	p2, err := startServe(data)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.stop()
	if s := status(t, p2.url, name); !s.Held || s.Token != l.Token {
		t.Fatalf("after a graceful restart: want %q held with token %d, got %+v", name, l.Token, s)
	}
	wantCode(t, "renew after a graceful restart", runFence(t, p2.url, nil, "", "renew", name, "--lease", l.Lease), 0)
}

func TestServe_Kill9Restart_KeepsTokenOrderAndLeases(t *testing.T) {
	data := t.TempDir()
	p, err := startServe(data)
	if err != nil {
		t.Fatal(err)
	}
	short, long := uniqName(t), uniqName(t)
	const shortTTL = 4 * time.Second
	before := time.Now() // the server's expiry of the short lease is later than before+shortTTL
	ls := acquireJSON(t, p.url, short, "--ttl", shortTTL.String())
	ll := acquireJSON(t, p.url, long, "--ttl", "2m") // a long lease, renewed after the restart below
	p.kill()

	p2, err := startServe(data)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.stop()
	// P6: the short lease granted before the crash is still honoured right after it.
	// On a machine so slow that the restart outlived the lease, this is inconclusive.
	r := runFence(t, p2.url, nil, "", "-o", "json", "acquire", short)
	var next leaseJSON
	switch {
	case time.Since(before) < shortTTL:
		wantCode(t, "acquire of a lease held before kill -9", r, exitNotAcquired)
	case r.code == 0:
		t.Logf("restart took longer than the %v lease: its exclusivity after kill -9 was not checked", shortTTL)
		next = decode[leaseJSON](t, "acquire after the lease", r)
	}
	// P6: the long lease survived and its holder can still renew it.
	wantCode(t, "renew of a long lease after kill -9", runFence(t, p2.url, nil, "", "renew", long, "--lease", ll.Lease, "--ttl", "2m"), 0)
	wantCode(t, "acquire of the long lease's name", runFence(t, p2.url, nil, "", "acquire", long), exitNotAcquired)
	// P1: once the short lease is over, the next grant's token is greater.
	if next.Token == 0 {
		next = acquireJSON(t, p2.url, short, "--wait", "30s")
	}
	if next.Token <= ls.Token || next.Token <= ll.Token {
		t.Fatalf("token after kill -9: want greater than %d and %d, got %d", ls.Token, ll.Token, next.Token)
	}
}

func TestServe_AuthTokenAndTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSignedCert(t, dir)
	tokFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokFile, []byte("# comment\n\nfirst-token\nsecond-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startServe(filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile, "--auth-token-file", tokFile)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if !strings.HasPrefix(p.url, "https://") {
		t.Fatalf("serve with --tls-cert: want an https URL, got %s", p.url)
	}
	ca := "FENCE_CA_CERT=" + certFile
	name := uniqName(t)
	r := runFence(t, p.url, []string{ca}, "", "acquire", name)
	wantCode(t, "acquire without a token", r, exitError)
	if !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("acquire without a token: want unauthorized, got %q", r.stderr)
	}
	wantCode(t, "acquire with a wrong token", runFence(t, p.url, []string{ca, "FENCE_AUTH_TOKEN=nope"}, "", "acquire", name), exitError)
	wantCode(t, "acquire with the second token", runFence(t, p.url, []string{ca, "FENCE_AUTH_TOKEN=second-token"}, "", "acquire", name), 0)
	r = runFence(t, p.url, []string{"FENCE_AUTH_TOKEN=first-token"}, "", "status", name)
	wantCode(t, "status without trusting the CA", r, exitError)
	if !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("status without the CA: want a certificate error, got %q", r.stderr)
	}
	r = runFence(t, p.url, []string{ca, "FENCE_AUTH_TOKEN=first-token"}, "", "-o", "json", "status", name)
	wantCode(t, "status with token and CA", r, 0)
	if s := decode[statusJSON](t, "status", r); !s.Held {
		t.Fatalf("status over TLS: want held, got %+v", s)
	}
}

// writeSelfSignedCert writes a certificate for 127.0.0.1 (its own CA) and its key.
func writeSelfSignedCert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fence test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// metric reads one series of the server's /metrics.
func metric(t testing.TB, server, name string) float64 {
	t.Helper()
	resp, err := httpGet(server + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	for _, line := range strings.Split(resp, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCLI_Acquire_InterruptedWhileWaiting_130(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	acquireJSON(t, srv, name, "--ttl", "10m")
	before := metric(t, srv, "fence_waits_total")
	cmd := exec.Command(cli.bin, "acquire", name, "--wait", "5m")
	cmd.Env = append(cleanEnv(), "FENCE_SERVER="+srv)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiter to reach the server", func() bool { return metric(t, srv, "fence_waits_total") > before })
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("SIGINT during acquire --wait: want exit %d saying interrupted, got %d %q", exitInterrupted, code, stderr.String())
	}
}

func TestServe_StoreBoltPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "custom.db")
	p, err := startServe(t.TempDir(), "--store", "bolt:"+path)
	if err != nil {
		t.Fatal(err)
	}
	acquireJSON(t, p.url, uniqName(t))
	if err := p.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("--store bolt:%s: want the store there: %v\n%s", path, err, p.log())
	}
}

func TestCLI_Lock_RenewsWhileTheCommandRuns(t *testing.T) {
	srv := cli.serve.url
	name := uniqName(t)
	// The command outlives three TTLs, then checks that the lock is still held
	// (renewed): its own acquire must find it held (75).
	r := runFence(t, srv, nil, "", "lock", name, "--ttl", "600ms", "--", "sh", "-c", `sleep 2; fence acquire "$FENCE_LOCK" >/dev/null 2>&1; echo "inner=$?"`)
	wantCode(t, "lock over three TTLs", r, 0)
	if strings.TrimSpace(r.stdout) != "inner=75" {
		t.Fatalf("after 3 TTLs under fence lock: want the lock still held (inner acquire exit 75), got %q (stderr %q)", r.stdout, r.stderr)
	}
}
