package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// Environment of the client commands (acquire, renew, release, status, kv, lock,
// elect, leader).
const (
	envServer    = "FENCE_SERVER"     // server URL, or a comma-separated list of a cluster's; default defaultServer
	envAuthToken = "FENCE_AUTH_TOKEN" // bearer token, if the server wants one
	envCACert    = "FENCE_CA_CERT"    // PEM file of the CA that signed the server's certificate
	envLock      = "FENCE_LOCK"       // set by `fence lock` and `fence elect` for their child: the lock name
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
	// command ran (it was sent SIGTERM, then SIGKILL after --grace), and of `fence
	// elect` when the term was (without --rejoin).
	exitLeaseLost = 76
	// exitInterrupted is the status when SIGINT ended a wait (128+SIGINT); SIGTERM
	// gives 143 (128+SIGTERM), like a shell reporting a job killed by the signal.
	exitInterrupted = 130
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	server        string
	caCert        string
	authTokenFile string
	// renewTTL, set by the commands that keep a lease renewed (lock, elect), is
	// its TTL: with several servers an attempt on one then gets at most a third
	// of it (see client).
	renewTTL time.Duration
}

func addClientFlags(cmd *cobra.Command) *clientFlags {
	cf := &clientFlags{}
	cmd.Flags().StringVar(&cf.server, "server", "", "server URL, or a bare HOST:PORT (http; https when a CA is given); a comma-separated list names the servers of one cluster, and requests fail over between them (default $"+envServer+", else "+defaultServer+")")
	cmd.Flags().StringVar(&cf.caCert, "ca-cert", "", "PEM file of the CA of an https server (default $"+envCACert+")")
	cmd.Flags().StringVar(&cf.authTokenFile, "auth-token-file", "", "file holding the bearer token (default $"+envAuthToken+")")
	return cf
}

// caFile returns --ca-cert, or $FENCE_CA_CERT.
func (cf *clientFlags) caFile() string {
	if cf.caCert != "" {
		return cf.caCert
	}
	return os.Getenv(envCACert)
}

// serverURL returns the server the command talks to: --server, $FENCE_SERVER, or the
// default. A bare HOST:PORT means http://HOST:PORT, or https://HOST:PORT when a CA
// certificate is given (it is only of use for https). A comma-separated list names
// several servers (the nodes of a cluster): it returns them normalised, in order,
// comma-separated, as fencehttp.NewClient takes them.
func (cf *clientFlags) serverURL() (string, error) {
	s, from := cf.server, "--server"
	if s == "" {
		s, from = os.Getenv(envServer), "$"+envServer
	}
	if s == "" {
		return defaultServer, nil
	}
	var out []string
	for _, one := range strings.Split(s, ",") {
		one = strings.TrimSpace(one)
		full := one
		if !strings.Contains(one, "://") {
			scheme := "http://"
			if cf.caFile() != "" {
				scheme = "https://"
			}
			full = scheme + one
		}
		u, err := url.Parse(full)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			if one != s {
				return "", usagef("%s %q: server %q: want http://HOST:PORT, https://HOST:PORT or HOST:PORT, comma-separated", from, s, one)
			}
			return "", usagef("%s %q: want http://HOST:PORT, https://HOST:PORT or HOST:PORT", from, s)
		}
		out = append(out, strings.TrimSuffix(full, "/"))
	}
	return strings.Join(out, ","), nil
}

// authToken returns the bearer token: the content of --auth-token-file (trimmed),
// else $FENCE_AUTH_TOKEN, else none. fromFile tells where it came from.
func (cf *clientFlags) authToken() (tok string, fromFile bool, err error) {
	if cf.authTokenFile == "" {
		return os.Getenv(envAuthToken), false, nil
	}
	b, err := os.ReadFile(cf.authTokenFile)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in our message already
		}
		return "", false, usagef("--auth-token-file %s: %v", cf.authTokenFile, err)
	}
	tok = strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", false, usagef("--auth-token-file %s: the file is empty; want the token in it", cf.authTokenFile)
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", false, usagef("--auth-token-file %s: want one token, the file holds several words or lines", cf.authTokenFile)
	}
	return tok, true, nil
}

// client returns a client of serverURL with the auth token and the CA, if any.
func (cf *clientFlags) client() (*fencehttp.Client, error) {
	server, err := cf.serverURL()
	if err != nil {
		return nil, err
	}
	tok, _, err := cf.authToken()
	if err != nil {
		return nil, err
	}
	opts := &fencehttp.ClientOptions{AuthToken: tok}
	if cf.renewTTL > 0 && strings.Contains(server, ",") {
		// A renewal is sent at a third of the TTL with two thirds left; a node
		// that hangs must leave time for the next one: two attempts fit in that.
		opts.AttemptTimeout = max(min(fencehttp.DefaultAttemptTimeout, cf.renewTTL/3), minRenewedTTL/3)
	}
	if ca := cf.caFile(); ca != "" {
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
	c, err := fencehttp.NewClient(server, opts)
	if err != nil {
		return nil, usagef("server %q: %v", server, err)
	}
	return c, nil
}

// childEnv is what a child of `fence lock` or `fence elect` needs to reach the same
// server as we do: FENCE_SERVER always (normalised), FENCE_CA_CERT and
// FENCE_AUTH_TOKEN when they came from flags rather than from the environment it
// inherits.
func (cf *clientFlags) childEnv() []string {
	server, _ := cf.serverURL() // checked by client() already
	env := []string{envServer + "=" + server}
	if cf.caCert != "" {
		env = append(env, envCACert+"="+cf.caCert)
	}
	if tok, fromFile, _ := cf.authToken(); fromFile {
		env = append(env, envAuthToken+"="+tok)
	}
	return env
}

// call runs do with the client of the flags, under a context that SIGINT and
// SIGTERM cancel: one request of a command, and its error.
func (f *clientFlags) call(cmd *cobra.Command, do func(context.Context, *fencehttp.Client) error) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, stop := signalContext(cmd)
	defer stop()
	return do(ctx, c)
}

// signalContext is the command's context, cancelled by SIGINT or SIGTERM so that a
// wait ends cleanly.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

// checkTTL returns a usage error if --ttl is not a TTL the server grants.
func checkTTL(ttl time.Duration) error {
	if err := fence.ValidateTTL(ttl); err != nil {
		return usagef("--ttl %v: must be a whole number of milliseconds between %v and %v", ttl, fence.MinTTL, fence.MaxTTL)
	}
	return nil
}

// checkName returns a usage error naming what if name is not a valid lock name.
func checkName(what, name string) error {
	return invalidUsage(what, fence.ValidateName(name))
}

// checkLockAndTTL checks the lock NAME argument and the --ttl of the commands that
// take both (acquire, renew, lock): a usage error about the first that is invalid.
func checkLockAndTTL(name string, ttl time.Duration) error {
	if err := checkName("lock name", name); err != nil {
		return err
	}
	return checkTTL(ttl)
}

// invalidUsage turns a validation error about what (a flag or an argument) into a
// usage error that names it once: `lock name "": is empty`.
func invalidUsage(what string, err error) error {
	if err == nil {
		return nil
	}
	var inv *fence.InvalidError
	if errors.As(err, &inv) {
		if inv.Field == "lease" { // a credential: not echoed
			return usagef("%s: %s", what, inv.Reason)
		}
		v := inv.Value
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		return usagef("%s %q: %s", what, v, inv.Reason)
	}
	return usagef("%s: %v", what, err)
}

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printLease(w io.Writer, l fencehttp.Lease) error {
	if output == "json" {
		return printJSON(w, l)
	}
	_, err := fmt.Fprintf(w, "name   %s\ntoken  %d\nlease  %s\nttl    %v\n", l.Name, l.Token, l.ID, time.Duration(l.TTLms)*time.Millisecond)
	if err == nil && l.Slot != nil {
		_, err = fmt.Fprintf(w, "slot   %d\n", *l.Slot)
	}
	return err
}
