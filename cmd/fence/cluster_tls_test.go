package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its certificate, PEM
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a peer certificate for 127.0.0.1 (server and client use) and its
// key, returning their files.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestServeCluster_PeerTLS_FormsAndRefusesAnotherCA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	certs := t.TempDir()
	ca, other := newTestCA(t, certs, "fence"), newTestCA(t, certs, "other")
	tlsFlags := func(ca *testCA, name string) []string {
		cert, key := ca.issue(t, certs, name)
		return []string{"--peer-cert", cert, "--peer-key", key, "--peer-ca", ca.file}
	}
	// n0 and n1 form the cluster's majority with the cluster's CA; n2 has a
	// certificate of another CA, then (restarted) one of the cluster's.
	c := &testCluster{t: t, dir: t.TempDir(), procs: map[string]*serveProc{}}
	c.peers, c.names = clusterPeers(t, 3)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.procs {
			p.kill()
		}
	})

	// n2 first, with a certificate of another CA: it must not join.
	bad := exec.Command(cli.bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(c.dir, "n2"),
		"--node", "n2", "--peers", c.peers}, tlsFlags(other, "n2-other")...)...)
	badLog, err := os.Create(filepath.Join(c.dir, "n2-bad.log"))
	if err != nil {
		t.Fatal(err)
	}
	bad.Stderr = badLog
	if err := bad.Start(); err != nil {
		t.Fatal(err)
	}
	badDone := make(chan struct{})
	go func() { _ = bad.Wait(); close(badDone) }()
	t.Cleanup(func() { _ = bad.Process.Kill(); <-badDone })

	c.extraFor = map[string][]string{"n0": tlsFlags(ca, "n0"), "n1": tlsFlags(ca, "n1")}
	c.start("n0", "n1")
	url := c.node("n0").url
	ms := waitMembers(t, url, func(ms []fencehttp.ClusterMember) bool {
		h := 0
		for _, m := range ms {
			if m.Healthy {
				h++
			}
		}
		return len(ms) == 3 && h == 2 && leaderOf(ms) != ""
	})
	for _, m := range ms {
		if !strings.HasPrefix(m.Peer, "https://") {
			t.Errorf("member %s: peer %q; want https", m.Name, m.Peer)
		}
	}
	// Give n2 time to try: it stays out, unhealthy, never serving.
	time.Sleep(3 * time.Second)
	for _, m := range clusterStatus(t, url) {
		if m.Name == "n2" && m.Healthy {
			t.Fatalf("n2, with another CA's certificate, is healthy: %+v", m)
		}
	}
	badLog.Close()
	logged, _ := os.ReadFile(badLog.Name())
	if strings.Contains(string(logged), "listening") {
		t.Fatalf("n2 with another CA's certificate serves:\n%s", logged)
	}
	// n0's peer port verifies the client's certificate: one of the cluster's CA
	// is answered, one of another CA is refused in the handshake.
	n0Peer := strings.Split(strings.Split(c.peers, ",")[0], "=")[1]
	for _, tc := range []struct {
		ca     *testCA
		wantOK bool
	}{{ca, true}, {other, false}} {
		cert, key := tc.ca.issue(t, certs, "client")
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca.cert)
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots}}}
		resp, err := hc.Get("https://" + n0Peer + "/version")
		if err == nil {
			resp.Body.Close()
		}
		if ok := err == nil && resp.StatusCode == http.StatusOK; ok != tc.wantOK {
			t.Errorf("GET /version on n0's peer port with a client certificate of CA %s: got %v (err %v); want success %v",
				tc.ca.cert.Subject.CommonName, ok, err, tc.wantOK)
		}
	}
	_ = bad.Process.Kill()
	<-badDone

	// n2 restarted on its data with the cluster's CA joins.
	c.extraFor["n2"] = tlsFlags(ca, "n2")
	c.start("n2")
	waitMembers(t, url, healthy(3))
	mustAcquire(t, c.node("n2").url, "over-tls")
}
