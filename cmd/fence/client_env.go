package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	fencehttp "github.com/fencelock/fence/http"
)

// Environment of the client commands (acquire, renew, release, status, kv, lock).
const (
	envServer    = "FENCE_SERVER"     // server URL; default defaultServer
	envAuthToken = "FENCE_AUTH_TOKEN" // bearer token, if the server wants one
	envCACert    = "FENCE_CA_CERT"    // PEM file of the CA that signed the server's certificate
	envLock      = "FENCE_LOCK"       // set by `fence lock` for its child: the lock name
	envToken     = "FENCE_TOKEN"      // ... the fencing token
	envLease     = "FENCE_LEASE"      // ... the lease id

	defaultServer = "http://127.0.0.1:7420"
)

// Exit statuses of the client commands, beyond those of main.go.
const (
	// exitNotAcquired (EX_TEMPFAIL) is the status of `fence lock` and `fence acquire`
	// when the lock stayed held through --wait.
	exitNotAcquired = 75
	// exitLeaseLost is the status of `fence lock` when the lease was lost while the
	// command ran (it was sent SIGTERM, then SIGKILL after --grace).
	exitLeaseLost = 76
	// exitInterrupted is the status when SIGINT or SIGTERM ended a wait (128+SIGINT).
	exitInterrupted = 130
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	server string
	caCert string
}

func addClientFlags(cmd *cobra.Command) *clientFlags {
	cf := &clientFlags{}
	cmd.Flags().StringVar(&cf.server, "server", "", "server URL (default $"+envServer+", else "+defaultServer+")")
	cmd.Flags().StringVar(&cf.caCert, "ca-cert", "", "PEM file of the CA of an https server (default $"+envCACert+")")
	return cf
}

// serverURL returns the server the command talks to: --server, $FENCE_SERVER, or the
// default.
func (cf *clientFlags) serverURL() string {
	if cf.server != "" {
		return cf.server
	}
	if s := os.Getenv(envServer); s != "" {
		return s
	}
	return defaultServer
}

// client returns a client of serverURL with $FENCE_AUTH_TOKEN and the CA, if any.
func (cf *clientFlags) client() (*fencehttp.Client, error) {
	opts := &fencehttp.ClientOptions{AuthToken: os.Getenv(envAuthToken)}
	ca := cf.caCert
	if ca == "" {
		ca = os.Getenv(envCACert)
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usagef("CA certificate: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("CA certificate %s: no PEM certificate in it", ca)
		}
		opts.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c, err := fencehttp.NewClient(cf.serverURL(), opts)
	if err != nil {
		return nil, usagef("%s: %v", envServer, err)
	}
	return c, nil
}

// signalContext is the command's context, cancelled by SIGINT or SIGTERM so that a
// wait ends cleanly.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

// durationFlagValue checks a --ttl given on the command line.
func checkTTL(ttl time.Duration) error {
	if err := fence.ValidateTTL(ttl); err != nil {
		return usagef("--ttl %v: must be a whole number of milliseconds between %v and %v", ttl, fence.MinTTL, fence.MaxTTL)
	}
	return nil
}

func checkName(what, name string) error {
	if err := fence.ValidateName(name); err != nil {
		return usagef("%s: %v", what, err)
	}
	return nil
}

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// leaseOut is how the commands print a lease: the shape of the API's acquire answer.
type leaseOut struct {
	Name  string      `json:"name"`
	Token fence.Token `json:"token"`
	Lease string      `json:"lease"`
	TTLms int64       `json:"ttl_ms"`
}

func printLease(w io.Writer, l *fence.Lease) error {
	if output == "json" {
		return printJSON(w, leaseOut{Name: l.Name(), Token: l.Token(), Lease: l.ID(), TTLms: l.TTL().Milliseconds()})
	}
	_, err := fmt.Fprintf(w, "name   %s\ntoken  %d\nlease  %s\nttl    %v\n", l.Name(), l.Token(), l.ID(), l.TTL())
	return err
}
