package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fence serve speaks HTTP/2 negotiated over TLS, and without TLS both
// HTTP/1.1 and HTTP/2 with prior knowledge (h2c).
func TestServe_SpeaksHTTP2_OverTLSAndH2C(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSignedCert(t, dir)
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tlsServe, err := startServe(filepath.Join(dir, "tls"), "--tls-cert", certFile, "--tls-key", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer tlsServe.stop()
	plain, err := startServe(filepath.Join(dir, "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.stop()

	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	for _, c := range []struct {
		what      string
		url       string
		transport *http.Transport
		major     int
	}{
		{"TLS", tlsServe.url, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}, 2},
		{"h2c", plain.url, &http.Transport{Protocols: h2c}, 2},
		{"HTTP/1.1", plain.url, &http.Transport{}, 1},
	} {
		hc := &http.Client{Transport: c.transport, Timeout: 10 * time.Second}
		resp, err := hc.Get(c.url + "/healthz")
		if err != nil {
			t.Fatalf("%s: GET /healthz: %v", c.what, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != c.major {
			t.Fatalf("%s: GET /healthz: want 200 over HTTP/%d, got %d over %s", c.what, c.major, resp.StatusCode, resp.Proto)
		}
		c.transport.CloseIdleConnections()
	}
}
