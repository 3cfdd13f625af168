package fencehttp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Client defaults.
const (
	DefaultRequestTimeout = 30 * time.Second // bound of one request, beyond its long poll
	DefaultAttemptTimeout = 5 * time.Second  // bound of one attempt on one of several servers, beyond its long poll
	DefaultMaxPoll        = 30 * time.Second // longest wait asked of the server in one poll
	maxResponseBytes      = 64 << 20
)

// ClientOptions configures a Client. The zero value (or nil) is usable.
type ClientOptions struct {
	// AuthToken is sent as Authorization: Bearer AuthToken when not empty.
	AuthToken string
	// TLSConfig is used for https:// servers (e.g. RootCAs for a private CA); nil
	// means the system roots.
	TLSConfig *tls.Config
	// HTTPClient replaces the client's keep-alive transport; TLSConfig is then ignored.
	// The default client never follows redirects; an HTTPClient should not either.
	HTTPClient *http.Client
	// Clock measures the local deadlines of leases; nil means driver.SystemClock.
	Clock driver.Clock
	// RequestTimeout bounds each request, all its attempts on the servers
	// together, beyond the long poll of a waiting acquire or blocking query; 0
	// means 30s. The caller's context bounds it too.
	RequestTimeout time.Duration
	// Servers are more servers of the same cluster (or of one store), tried
	// after those of NewClient's baseURL: see Client for how a request fails over.
	// Each is an http:// or https:// URL, as baseURL.
	Servers []string
	// AttemptTimeout bounds one attempt of a request on one server, beyond its
	// long poll: when it passes, the request moves to the next server. 0 means
	// RequestTimeout with one server, and DefaultAttemptTimeout (or RequestTimeout,
	// if shorter) with several.
	AttemptTimeout time.Duration
	// MaxPoll is the longest wait asked of the server in one long poll; a longer wait
	// is several polls. 0 means 30s (below common proxy idle timeouts).
	MaxPoll time.Duration
	// H2C speaks HTTP/2 without TLS (prior knowledge) to an http:// server, as
	// `fence serve` accepts: every request of the Client then shares one
	// connection. An https:// server is spoken to over HTTP/2 whenever it offers
	// it (ALPN), with or without H2C. Ignored with HTTPClient.
	H2C bool
}

// Client is a fence.Locker, fence.Healer, fence.Revoker, fence.Inspector,
// fence.Watcher, fence.Guard and fence.KV that talks to a `fence serve` server
// (HTTP API v1) over keep-alive connections of a net/http Transport (HTTP/1.1,
// or HTTP/2 over TLS or with ClientOptions.H2C). It is safe for concurrent use;
// each call is one request. Leases it returns are fence.Lease values, so Done,
// Context and WithAutoRenew work over HTTP.
//
// Errors: an error the server answered is a *ServerError whose Error is the server's
// message verbatim (it names the operation and the lock or key: `release "job1":
// lease not held (expired, released, or never granted)`), matching the fence
// sentinel of its code with errors.Is and, where the answer carries detail, the typed
// fence error with errors.As. A server that cannot be reached gives an error
// matching fence.ErrUnavailable that reads `cannot reach the fence server at URL:
// REASON` (connection refused, timeout, connection reset, EOF, ...). Arguments the
// Client refuses before any request read as the server's would (`release "job1":
// invalid lease: is empty`) and match fence.ErrInvalid and *fence.InvalidError.
//
// # Several servers
//
// A Client given several servers (the nodes of a cluster, or several servers on
// one store) sends each request to the server that last answered, and moves it
// to the next server in the list, each server once per request, when the
// attempt cannot connect, fails without an answer (a reset connection, EOF),
// passes ClientOptions.AttemptTimeout, or is answered 502, 503 or 504 (503
// unavailable: a node cut off from the majority, or a server shutting down).
// Long polls (a waiting acquire, Watch's blocking queries) move the same way.
// When no server answers, the error names every server tried (`cannot reach the
// fence server at URL1: REASON; at URL2: REASON`), or is the last 503 answer.
//
// A request retried on another server may repeat work whose first answer was
// lost. That is safe: every acquire carries a request id (fence.WithRequestID:
// the caller's, or 128 random bits), the same on each attempt and each poll of
// one Acquire, so a store that keeps request ids (the embedded store, etcd,
// cluster mode) answers a retry with the grant the lost answer carried, never a second grant. A renewal
// twice is one renewal. A release whose earlier attempt's outcome is unknown
// and whose retry is answered 410 returns nil: the lease is not held either way
// (the lost attempt released it, or it had ended), and a release never touches
// another lease (it compares the lease id), so nothing is left to do. A retried
// revoke, delete or purge may likewise be answered 404 for its own first
// attempt's work; those errors are returned as they are.
//
// Every Put and Delete carries one attempt id on all its attempts
// (Fence-Attempt, see Put): a store that keeps attempt ids (every store of
// `fence serve` and inmem) applies the write once, answers a retried Delete
// 200 rather than 404, and never lets a slow first attempt land over a write
// the holder made after the retry (P3). A write whose retry is refused (409)
// after an earlier attempt's answer was lost returns an error matching
// fence.ErrUnavailable, not the refusal: the earlier attempt may have been
// applied before the key's fence moved on, so its outcome is unknown.
type Client struct {
	servers []string     // scheme://host[/path], without a trailing slash; at least one
	cur     atomic.Int64 // index in servers of the server that last answered
	attempt time.Duration
	hc      *http.Client
	auth    string
	clock   driver.Clock
	timeout time.Duration
	maxPoll time.Duration
	engine  driver.Engine // Acquire's wait and wording
}

var (
	_ fence.Locker        = (*Client)(nil)
	_ fence.FeatureLocker = (*Client)(nil)
	_ fence.Healer        = (*Client)(nil)
	_ fence.Revoker       = (*Client)(nil)
	_ fence.Inspector     = (*Client)(nil)
	_ fence.Watcher       = (*Client)(nil)
	_ fence.Guard         = (*Client)(nil)
	_ fence.KV            = (*Client)(nil)
	_ fence.Purger        = (*Client)(nil)
)

// NewClient returns a client of the server at baseURL (e.g. http://127.0.0.1:7420),
// or of several servers: baseURL may be a comma-separated list of URLs (as
// FENCE_SERVER is), and ClientOptions.Servers adds more (see Client). It returns
// an error matching fence.ErrInvalid if a URL is not an absolute http or https
// URL without query or fragment, or if there is none.
func NewClient(baseURL string, opts *ClientOptions) (*Client, error) {
	if opts == nil {
		opts = &ClientOptions{}
	}
	servers, err := parseServers(baseURL, opts.Servers)
	if err != nil {
		return nil, err
	}
	if opts.RequestTimeout < 0 || opts.MaxPoll < 0 || opts.AttemptTimeout < 0 {
		return nil, &clientError{msg: "invalid client options: negative timeout", causes: []error{fence.ErrInvalid}}
	}
	c := &Client{
		servers: servers,
		attempt: opts.AttemptTimeout,
		hc:      opts.HTTPClient,
		auth:    opts.AuthToken,
		clock:   opts.Clock,
		timeout: opts.RequestTimeout,
		maxPoll: opts.MaxPoll,
	}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256 // the default of 2 would reconnect under concurrency
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		if opts.TLSConfig != nil {
			t.TLSClientConfig = opts.TLSConfig.Clone()
		}
		if opts.H2C {
			t.Protocols = new(http.Protocols)
			t.Protocols.SetHTTP2(true)
			t.Protocols.SetUnencryptedHTTP2(true)
		}
		// Never follow a redirect: the server sends none, and one from elsewhere (a
		// proxy cleaning a path) could point a request at another lock.
		c.hc = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if c.clock == nil {
		c.clock = driver.SystemClock
	}
	if c.timeout == 0 {
		c.timeout = DefaultRequestTimeout
	}
	if c.attempt == 0 {
		c.attempt = c.timeout
		if len(c.servers) > 1 {
			c.attempt = min(c.timeout, DefaultAttemptTimeout)
		}
	}
	if c.maxPoll == 0 {
		c.maxPoll = DefaultMaxPoll
	}
	c.engine = driver.Engine{Backend: "fencehttp", Locker: c, Clock: c.clock, Features: c.Features()}
	return c, nil
}

// CloseIdleConnections closes the keep-alive connections not in use.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// response is a read answer.
type response struct {
	status int
	header http.Header
	body   []byte
	base   string // the server that answered
	// uncertain says an earlier attempt of the request, on another server, may
	// have been applied: it failed after it may have been sent, or was answered
	// 502, 503 or 504.
	uncertain bool
}

// opName is the "<op> "<name>"" that starts a message.
func opName(op, name string) string {
	if name == "" {
		return op
	}
	return fmt.Sprintf("%s %q", op, name)
}

// transportError is the error of a request that got no answer. ctx is the caller's:
// if it ended, that is the reason; otherwise no server could be reached (or
// answered within the timeouts): fails says why, "at URL: REASON" for each
// server tried, and err is the last attempt's error.
func (c *Client) transportError(ctx context.Context, op, name string, fails []string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return &clientError{msg: fmt.Sprintf("%s: %v", opName(op, name), cerr), causes: []error{fence.ErrUnavailable, cerr}}
	}
	return &clientError{msg: "cannot reach the fence server " + strings.Join(fails, "; "), causes: []error{fence.ErrUnavailable, err}}
}

// reachReason says in a few words why a request got no answer, without the chain of
// *url.Error and *net.OpError around the cause.
func reachReason(err error) string {
	var (
		dns *net.DNSError
		cve *tls.CertificateVerificationError
		ne  net.Error
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.As(err, &dns) && dns.IsNotFound:
		return "no such host"
	case errors.As(err, &dns):
		return "DNS lookup failed: " + dns.Err
	case errors.As(err, &cve):
		return "TLS: " + strings.TrimPrefix(cve.Err.Error(), "x509: ")
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	}
	for {
		switch e := err.(type) {
		case *url.Error:
			err = e.Err
			continue
		case *net.OpError:
			err = e.Err
			continue
		case *os.SyscallError:
			err = e.Err
			continue
		}
		return err.Error()
	}
}

// doJSON sends in (if not nil) as JSON and decodes a 200 answer into out; any other
// status becomes the error the server reported (see ServerError).
func (c *Client) doJSON(ctx context.Context, op, name, method, path string, in, out any, extra time.Duration) error {
	var body []byte
	var h http.Header
	if in != nil {
		var err error
		if body, err = c.encode(op, name, in); err != nil {
			return err
		}
		h = http.Header{"Content-Type": {"application/json"}}
	}
	resp, err := c.do(ctx, op, name, method, path, h, body, extra)
	if err != nil {
		return err
	}
	return c.decodeAnswer(op, name, resp, out)
}

// encode returns in as JSON.
func (c *Client) encode(op, name string, in any) ([]byte, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, &clientError{msg: fmt.Sprintf("%s: cannot encode the request: %v", opName(op, name), err), causes: []error{fence.ErrInvalid, err}}
	}
	return body, nil
}

// decodeAnswer decodes a 200 answer into out (if not nil); any other status
// becomes the error the server reported (see ServerError).
func (c *Client) decodeAnswer(op, name string, resp *response, out any) error {
	if resp.status != http.StatusOK {
		return c.answerError(resp)
	}
	if out != nil {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return c.malformed(op, name)
		}
	}
	return nil
}

// malformed is the error of a 200 answer the Client cannot read.
func (c *Client) malformed(op, name string) error {
	return &clientError{msg: fmt.Sprintf("%s: malformed answer from the fence server at %s", opName(op, name), c.current()), causes: []error{fence.ErrUnavailable}}
}

// answerError decodes an error answer into a *ServerError. A body that is not fence's
// JSON (a proxy's page) still yields one, with the status: a 502, 503 or 504 then
// reads "cannot reach the fence server at URL: 502 Bad Gateway".
func (c *Client) answerError(r *response) error {
	var body errorResponse
	if json.Unmarshal(r.body, &body) == nil && body.Code != "" {
		return decodeError(r.status, body)
	}
	status := fmt.Sprintf("%d %s", r.status, http.StatusText(r.status))
	switch r.status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &ServerError{Status: r.status, Message: fmt.Sprintf("cannot reach the fence server at %s: %s", r.base, status)}
	}
	msg := strings.Join(strings.Fields(string(r.body)), " ")
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg != "" {
		status += ": " + msg
	}
	return &ServerError{Status: r.status, Message: fmt.Sprintf("unexpected answer from %s (not a fence server?): %s", r.base, status)}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Acquire asks the server for a lease on name (see fence.Locker), sending the owner
// of fence.WithOwner if any (Inspect and List then report it). With WithWait the
// server long-polls; waits longer than MaxPoll are several polls. The lease's local
// deadline counts from when the granting request was sent, plus the time the server
// reports it held the request before the store started the grant (waited_ms), so it
// is never later than the store's expiry, and a grant at the end of a long poll still
// gets its whole TTL.
//
// fence.WithLimit and fence.WithShared are sent as "limit" and "shared" (Features
// declares both: what the server's store makes is known only by asking it); the
// lease of a permit has the slot the server answered. A store without the kind
// answers 501, returned as an error matching fence.ErrNotImplemented, and a limit
// other than the live leases' one a *fence.LimitError (fence.ErrInvalid).
//
// The wait, the held lock and the context are worded as every backend's are (see
// driver.Engine): it returns an error matching fence.ErrNotAcquired and a
// *fence.HeldError if the lock stayed held (`fencehttp: lock "job1" not acquired:
// held, expires in 1.2s`), one matching fence.ErrNotAcquired and ctx.Err() when the
// context ended the wait, and fence.ErrInvalid for a bad name or TTL. Other errors
// are the server's answer as it is, a *ServerError (ErrUnauthorized for a refused
// auth token, fence.ErrTokenExhausted, ...), or the Client's own, such as
// fence.ErrUnavailable when the server cannot be reached (the server may have
// granted a lease nobody will learn of; it expires after ttl). While a wait lasts,
// an unavailable or restarting server is retried with backoff (50ms to 1s), so a
// waiter survives a graceful restart of the server.
//
// Every call sends a request id ("request_id", fence.WithRequestID): the
// caller's, or 128 bits from crypto/rand, the same on every attempt and poll of
// the call, so that a store keeping request ids answers a retry whose first
// answer was lost (a failover to another server, a timeout) with the same grant
// instead of a second one. A call that gives up while an attempt's outcome is
// unknown (its context ended, or no server could be reached) sends a
// best-effort abandon (see abandonLost), so that a grant made for it after all
// is released at once instead of at its expiry.
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	rid := driver.ApplyOptions(opts...).RequestID
	if rid == "" {
		rid = driver.NewLeaseID() // an invalid one given by the caller is refused by the engine
	}
	var last *driver.Request // the last try's request, if one was sent
	lease, err := c.engine.Acquire(ctx, name, ttl, opts, func(ctx context.Context, r *driver.Request) (driver.Result, error) {
		last = r
		return c.try(ctx, r, rid)
	})
	if err != nil && last != nil {
		c.abandonLost(ctx, last, rid, err)
	}
	if err == nil || errors.Is(err, fence.ErrNotAcquired) {
		return lease, err
	}
	// The server's message names the operation and the lock already: the engine's
	// "fencehttp: acquire NAME:" before it would say both twice.
	var se *ServerError
	if errors.As(err, &se) {
		return nil, se
	}
	var ce *clientError
	if errors.As(err, &ce) {
		return nil, ce
	}
	return nil, err
}

// try sends one acquire request under request id rid (see driver.TryFunc). A
// waiting call asks the server to wait what is left of its wait, at most MaxPoll;
// when the server's wait ends before the call's, try reports the lock held with
// Again, and the engine polls again at once.
func (c *Client) try(ctx context.Context, r *driver.Request, rid string) (driver.Result, error) {
	const op = "acquire"
	var poll time.Duration
	if r.Waiting {
		poll = c.maxPoll
		if r.WaitLeft != fence.WaitForever {
			// At least 1ms: wait_ms 0 would be a single try, and a tight loop of them.
			poll = max(min(r.WaitLeft, poll), time.Millisecond)
		}
	}
	ttlMs := ms(r.TTL)
	var resp leaseResponse
	start := c.clock.Now()
	req := acquireRequest{TTLms: &ttlMs, WaitMs: ms(poll), Owner: r.Options.Owner, Shared: r.Options.Shared, RequestID: rid}
	if limit := r.Options.Limit; limit > 1 {
		req.Limit = &limit
	}
	err := c.doJSON(ctx, op, r.Name, http.MethodPost, "/v1/locks/"+EscapeName(r.Name)+"/acquire", req, &resp, poll)
	switch {
	case errors.Is(err, fence.ErrNotAcquired):
		res := driver.Result{}
		var held *fence.HeldError
		if errors.As(err, &held) {
			res.ExpiresIn = held.ExpiresIn
		}
		res.Again = r.Waiting && (r.WaitLeft == fence.WaitForever || c.clock.Now().Sub(start) < r.WaitLeft)
		return res, nil
	case errors.Is(err, fence.ErrUnavailable):
		// The server is restarting or draining (it ends long polls with 503): a
		// waiting call tries again, backing off, until its wait is over.
		return driver.Result{}, driver.Transient(err)
	case err != nil:
		return driver.Result{}, err
	}
	if resp.Name != r.Name || fence.ValidateToken(resp.Token) != nil || fence.ValidateLeaseID(resp.ID) != nil || resp.TTLms != ttlMs || resp.WaitedMs < 0 ||
		!slotFits(resp.Slot, r.Options.Limit) {
		return driver.Result{}, c.malformed(op, r.Name)
	}
	// The store started counting the TTL when the server's granting request to it
	// was sent: waited_ms (rounded down) after the server got this request, which
	// left here no later than start. Never date the lease after now, whatever the
	// server says.
	if waited := time.Duration(resp.WaitedMs) * time.Millisecond; waited > 0 {
		start = start.Add(waited)
		if now := c.clock.Now(); start.After(now) {
			start = now
		}
	}
	res := driver.Result{Token: resp.Token, Start: start, ID: resp.ID}
	if resp.Slot != nil {
		res.Slot = *resp.Slot
	}
	return res, nil
}

// slotFits reports whether an acquire's answer has the slot its limit calls for:
// one in [0, limit) for a permit (limit > 1), none otherwise.
func slotFits(slot *int, limit int) bool {
	if limit > 1 {
		return slot != nil && *slot >= 0 && *slot < limit
	}
	return slot == nil
}

// Features returns both kinds of grant beyond locks: the Client sends what the
// caller asks for, and the server answers 501 (fence.ErrNotImplemented) when its
// store lacks the kind. It does not declare RequestIDs: the Client sends one with
// every acquire, but whether a retry finds its grant depends on the server's
// store, which ignores the id if it cannot keep it.
func (c *Client) Features() fence.Features { return fence.Features{Semaphores: true, Shared: true} }

// Renew extends the lease to ttl from now by the server's store (see fence.Locker).
// It returns fence.ErrNotHeld if the lease is gone (or not yours), fence.ErrInvalid
// for bad arguments, fence.ErrUnavailable when the server cannot be reached.
func (c *Client) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	const op = "renew"
	if err := validateLeaseArgs(op, name, leaseID); err != nil {
		return err
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return invalidArg(op, name, err)
	}
	ttlMs := ms(ttl)
	return c.doJSON(ctx, op, name, http.MethodPost, "/v1/locks/"+EscapeName(name)+"/renew", renewRequest{Lease: leaseID, TTLms: &ttlMs}, nil, 0)
}

// Release ends the lease and wakes the server's waiters (see fence.Locker). It
// returns fence.ErrNotHeld if the lease is no longer held (or not yours),
// fence.ErrInvalid for bad arguments, fence.ErrUnavailable when the server cannot be
// reached (retrying is safe). With several servers, a release whose earlier
// attempt may have been applied and whose retry on another server is answered
// 410 returns nil (see Client): the lease is not held either way.
func (c *Client) Release(ctx context.Context, name, leaseID string) error {
	const op = "release"
	if err := validateLeaseArgs(op, name, leaseID); err != nil {
		return err
	}
	body, err := c.encode(op, name, releaseRequest{Lease: leaseID})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, op, name, http.MethodPost, "/v1/locks/"+EscapeName(name)+"/release", http.Header{"Content-Type": {"application/json"}}, body, 0)
	if err != nil {
		return err
	}
	if resp.status == http.StatusGone && resp.uncertain {
		return nil
	}
	return c.decodeAnswer(op, name, resp, nil)
}

// Heal reports to the server that a guard saw token seen for lock name, so the next
// grant's token is above it (see fence.Healer, P4). It returns fence.ErrInvalid for a
// bad name or token, ErrNotImplemented if the server's store has no Healer (its
// counters cannot go backwards), fence.ErrUnavailable when the server cannot be
// reached (healing again is safe: it never lowers a counter).
func (c *Client) Heal(ctx context.Context, name string, seen fence.Token) error {
	const op = "heal"
	if err := fence.ValidateName(name); err != nil {
		return invalidArg(op, "", err)
	}
	if err := fence.ValidateToken(seen); err != nil {
		return invalidArg(op, name, err)
	}
	return c.doJSON(ctx, op, name, http.MethodPost, "/v1/locks/"+EscapeName(name)+"/heal", healRequest{Seen: seen}, nil, 0)
}

// Revoke ends the current lease on name now, whoever holds it, and wakes the
// server's waiters (see fence.Revoker): the next grant's token is higher, so fenced
// resources refuse the revoked holder once the next holder writes or fences. It
// returns fence.ErrNotHeld if no unexpired lease holds name (404), fence.ErrInvalid
// for a bad name, ErrNotImplemented if the server's store cannot revoke,
// ErrUnauthorized for a refused auth token, fence.ErrUnavailable when the server
// cannot be reached (the lease may or may not have ended; a retry may end a lease
// granted since, which fencing keeps as safe as the first).
func (c *Client) Revoke(ctx context.Context, name string) error {
	const op = "revoke"
	if err := fence.ValidateName(name); err != nil {
		return invalidArg(op, "", err)
	}
	return c.doJSON(ctx, op, name, http.MethodPost, "/v1/locks/"+EscapeName(name)+"/revoke", revokeRequest{}, nil, 0)
}

func validateLeaseArgs(op, name, leaseID string) error {
	if err := fence.ValidateName(name); err != nil {
		return invalidArg(op, "", err)
	}
	if err := fence.ValidateLeaseID(leaseID); err != nil {
		return invalidArg(op, name, err)
	}
	return nil
}

// Inspect returns the state of one lock (see fence.Inspector), with the holder's
// owner (never the lease id), and a semaphore's or shared lock's limit, kind and
// holders. It returns
// fence.ErrInvalid for a bad name, ErrNotImplemented if the server's store cannot
// report state, fence.ErrUnavailable when the server cannot be reached.
func (c *Client) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	const op = "inspect"
	if err := fence.ValidateName(name); err != nil {
		return fence.LockInfo{}, invalidArg(op, "", err)
	}
	var li LockInfo
	if err := c.doJSON(ctx, op, name, http.MethodGet, "/v1/locks/"+EscapeName(name), nil, &li, 0); err != nil {
		return fence.LockInfo{}, err
	}
	return li.toFence(), nil
}

// Watch follows the state of name on the server (see fence.Watcher) by blocking
// queries, as a Consul client follows an index: GET /v1/locks/{name}?index=N&
// wait_ms=W, where N is the Fence-Index of the last answer (0 at first, so the
// first answer comes at once) and W is MaxPoll. The server answers when the
// lock's index differs from N (an acquire, release, expiry, revoke or heal: its
// store's Watch wakes it) or when W is over, with the state unchanged; Watch
// then asks again. It yields the first state, then each state whose index
// differs from the last one yielded. One watch is one request at a time on a
// keep-alive connection, and no goroutine of its own.
//
// It yields an error matching fence.ErrInvalid for a bad name, and ends. While
// the server cannot be reached, or answers 503 (its store is unavailable, it is
// restarting or draining), it yields an error matching fence.ErrUnavailable
// (`cannot reach the fence server at URL: REASON`) and asks again, backing off
// from 50ms to 1s, so a watch rides out a restart of the server. Any other
// error answer is yielded and ends the watch: ErrNotImplemented (a store that
// cannot watch answers 501, and a server older than blocking queries is
// recognised by its answer without a Fence-Index header), ErrUnauthorized, and
// so on. When ctx ends, the watch ends without an error.
func (c *Client) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	return func(yield func(fence.LockInfo, error) bool) {
		if err := fence.ValidateName(name); err != nil {
			yield(fence.LockInfo{}, invalidArg("watch", "", err))
			return
		}
		var (
			index   uint64 // the last index yielded; 0 before the first (every index is at least 1)
			backoff time.Duration
		)
		for ctx.Err() == nil {
			info, next, err := c.blockingQuery(ctx, name, index)
			switch {
			case err == nil:
				backoff = 0
				if next != index {
					index = next
					if !yield(info, nil) {
						return
					}
				}
				continue
			case ctx.Err() != nil:
				return
			case !errors.Is(err, fence.ErrUnavailable):
				yield(fence.LockInfo{}, err)
				return
			}
			if !yield(fence.LockInfo{}, err) {
				return
			}
			backoff = min(max(2*backoff, minWatchBackoff), maxWatchBackoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// Backoff of a watch whose blocking queries fail with fence.ErrUnavailable.
const (
	minWatchBackoff = 50 * time.Millisecond
	maxWatchBackoff = time.Second
)

// blockingQuery sends one blocking query of Watch and returns the state the
// server answered with and its Fence-Index.
func (c *Client) blockingQuery(ctx context.Context, name string, index uint64) (fence.LockInfo, uint64, error) {
	const op = "watch"
	q := url.Values{"index": {strconv.FormatUint(index, 10)}, "wait_ms": {strconv.FormatInt(ms(c.maxPoll), 10)}}
	resp, err := c.do(ctx, op, name, http.MethodGet, "/v1/locks/"+EscapeName(name)+"?"+q.Encode(), nil, nil, c.maxPoll)
	if err != nil {
		return fence.LockInfo{}, 0, err
	}
	if resp.status != http.StatusOK {
		return fence.LockInfo{}, 0, c.answerError(resp)
	}
	var li LockInfo
	if err := json.Unmarshal(resp.body, &li); err != nil || li.Name != name {
		return fence.LockInfo{}, 0, c.malformed(op, name)
	}
	v := resp.header.Get(HeaderIndex)
	if v == "" {
		// A server older than blocking queries ignores index and answers at once:
		// asking again would be a busy loop.
		return fence.LockInfo{}, 0, &clientError{
			msg:    fmt.Sprintf("%s: the fence server at %s does not answer blocking queries (no %s header): it is older than this client", opName(op, name), resp.base, HeaderIndex),
			causes: []error{ErrNotImplemented},
		}
	}
	next, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fence.LockInfo{}, 0, c.malformed(op, name)
	}
	return li.toFence(), next, nil
}

// List returns the locks opts selects (see fence.Inspector): GET /v1/locks with
// opts.Prefix, opts.Limit (the server caps it at 10000; <= 0 means the store's
// default) and all=true when opts.All, else the held locks only. Errors are those
// of Inspect.
func (c *Client) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	q := url.Values{}
	if opts.Prefix != "" {
		q.Set("prefix", opts.Prefix)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(min(opts.Limit, maxListLimit)))
	}
	if opts.All {
		q.Set("all", "true")
	}
	path := "/v1/locks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var resp LockList
	if err := c.doJSON(ctx, "list", opts.Prefix, http.MethodGet, path, nil, &resp, 0); err != nil {
		return nil, err
	}
	out := make([]fence.LockInfo, 0, len(resp.Locks))
	for _, li := range resp.Locks {
		out = append(out, li.toFence())
	}
	return out, nil
}

// fenceHeader returns the headers of a fenced write of f (validated).
func fenceHeader(f fence.Fence) http.Header {
	h := http.Header{HeaderToken: {f.Token.String()}, HeaderLock: {url.PathEscape(f.Name)}}
	if f.LeaseID != "" {
		h.Set(HeaderLease, f.LeaseID)
	}
	return h
}

// setAttempt sets the Fence-Attempt header of a write (Put, Delete) to the
// attempt id ctx names it with (fence.WithWriteAttempt), or to 128 random bits:
// one id for every attempt of the call, on every server it is sent to. It
// returns fence.ErrInvalid for a malformed id.
func setAttempt(ctx context.Context, h http.Header, op, key string) error {
	id := fence.WriteAttempt(ctx)
	if id == "" {
		id = driver.NewLeaseID()
	} else if err := fence.ValidateAttemptID(id); err != nil {
		return invalidArg(op, key, err)
	}
	h.Set(HeaderAttempt, id)
	return nil
}

// validateWrite checks the key and fence of a fenced write (Put, Fence) before any
// request: a fence must name its lock (the namespace of its token).
func validateWrite(op, key string, f fence.Fence) error {
	if err := fence.ValidateKey(key); err != nil {
		return invalidArg(op, "", err)
	}
	if err := f.Validate(); err != nil {
		return invalidArg(op, key, err)
	}
	return nil
}

// Put stores value under key if the server's KV admits f (see fence.KV); f must name
// its lock (f.Name), which the server checks the token against. It returns a
// *fence.StaleTokenError (fence.ErrStaleToken) carrying the highest token, or a
// *fence.NamespaceError (fence.ErrNamespace) when key is fenced by another lock,
// when the write is refused and changed nothing; fence.ErrInvalid for a bad key or
// fence (an empty lock name included) or a value over the server's limit;
// ErrNotImplemented if the server has no KV; fence.ErrUnavailable when the server
// cannot be reached (the write may or may not have happened).
//
// Every attempt of one Put, on each server it is sent to, carries one attempt id
// (Fence-Attempt): the one ctx names (fence.WithWriteAttempt), or 128 random
// bits. A server whose store keeps attempt ids applies the attempt that reaches
// it first and answers a later one as its success with nothing written, so a
// slow first attempt never replaces a write the holder made after the retry
// (P3). To retry a Put across calls or processes, name it with
// fence.WithWriteAttempt and send the same id each time.
func (c *Client) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	const op = "put"
	if err := validateWrite(op, key, f); err != nil {
		return err
	}
	h := fenceHeader(f)
	if err := setAttempt(ctx, h, op, key); err != nil {
		return err
	}
	h.Set("Content-Type", "application/octet-stream")
	if value == nil {
		value = []byte{}
	}
	resp, err := c.do(ctx, op, key, http.MethodPut, "/v1/kv/"+EscapeName(key), h, value, 0)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return c.writeAnswerError(resp)
	}
	return nil
}

// Fence advances key's fence to f without writing a value (see fence.Guard). Errors
// are those of Put, and ErrNotImplemented if the server's store cannot fence
// without writing.
func (c *Client) Fence(ctx context.Context, key string, f fence.Fence) error {
	const op = "fence"
	if err := validateWrite(op, key, f); err != nil {
		return err
	}
	resp, err := c.do(ctx, op, key, http.MethodPost, "/v1/fences/"+EscapeName(key), fenceHeader(f), nil, 0)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return c.writeAnswerError(resp)
	}
	return nil
}

// Delete removes key's value if f is admitted, keeping the key's fence (see
// fence.KV): DELETE /v1/kv/{key} with the fence headers (Fence-Lease whenever
// f has a lease id). It returns fence.ErrNotFound if key holds no value, a
// *fence.UnissuedTokenError, *fence.StaleTokenError or *fence.NamespaceError (in
// a *ServerError) if f is refused, fence.ErrInvalid for a bad key or fence,
// ErrForbidden if the auth token may not write key, and fence.ErrUnavailable
// when the server cannot be reached. Its attempts carry one attempt id, as Put's
// do: a late one removes nothing the holder wrote after the retry, and a retry
// of an applied Delete returns nil rather than fence.ErrNotFound.
func (c *Client) Delete(ctx context.Context, key string, f fence.Fence) error {
	const op = "delete"
	if err := validateWrite(op, key, f); err != nil {
		return err
	}
	h := fenceHeader(f)
	if err := setAttempt(ctx, h, op, key); err != nil {
		return err
	}
	resp, err := c.do(ctx, op, key, http.MethodDelete, "/v1/kv/"+EscapeName(key), h, nil, 0)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return c.writeAnswerError(resp)
	}
	return nil
}

// Purge removes key's value and its fence (fence.Purger): DELETE
// /v1/kv/{key}?purge=true, which needs an admin auth token. It is the one way a
// key's fence goes back, for a key fenced by the wrong lock. It returns
// fence.ErrNotFound if key has neither value nor fence, fence.ErrInvalid for a
// bad key, ErrForbidden without the admin right, ErrNotImplemented if the
// server's store cannot purge, and fence.ErrUnavailable when the server cannot
// be reached.
func (c *Client) Purge(ctx context.Context, key string) error {
	const op = "purge"
	if err := fence.ValidateKey(key); err != nil {
		return invalidArg(op, "", err)
	}
	resp, err := c.do(ctx, op, key, http.MethodDelete, "/v1/kv/"+EscapeName(key)+"?purge=true", nil, nil, 0)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return c.answerError(resp)
	}
	return nil
}

// Get returns the value under key and the fence that wrote it (see fence.KV). The
// fence has the lock name and token but never the lease id, which the server does
// not disclose. A key holding no value (only fenced, or deleted), which the
// server answers 404 with the fence headers, is returned as it is by every
// fence.KV: a nil value and the fence. It returns fence.ErrNotFound if key was
// never written nor fenced, fence.ErrInvalid for a bad key,
// fence.ErrUnavailable when the server cannot be reached.
func (c *Client) Get(ctx context.Context, key string) (fence.Item, error) {
	const op = "get"
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, invalidArg(op, "", err)
	}
	resp, err := c.do(ctx, op, key, http.MethodGet, "/v1/kv/"+EscapeName(key), nil, nil, 0)
	if err != nil {
		return fence.Item{}, err
	}
	noValue := resp.status == http.StatusNotFound && resp.header.Get(HeaderToken) != ""
	if resp.status != http.StatusOK && !noValue {
		return fence.Item{}, c.answerError(resp)
	}
	switch {
	case noValue:
		resp.body = nil
	case resp.body == nil:
		resp.body = []byte{} // an empty value is a value
	}
	tok, terr := fence.ParseToken(resp.header.Get(HeaderToken))
	name, nerr := url.PathUnescape(resp.header.Get(HeaderLock))
	if terr != nil || nerr != nil {
		return fence.Item{}, c.malformed(op, key)
	}
	return fence.Item{Value: resp.body, Fence: fence.Fence{Name: name, Token: tok}}, nil
}

// writeAnswerError is answerError for a fenced write (Put, Delete, Fence). A
// refusal (409) of a retry whose earlier attempt may have been applied (its
// answer was lost: resp.uncertain) does not say the write changed nothing: the
// earlier attempt may have landed before the key's fence moved on. Its outcome
// is unknown, so the error matches fence.ErrUnavailable (as when no server
// answers), never the refusal's sentinel, and its message says both.
func (c *Client) writeAnswerError(resp *response) error {
	err := c.answerError(resp)
	if !resp.uncertain || resp.status != http.StatusConflict {
		return err
	}
	return &clientError{
		msg:    err.Error() + "; outcome unknown: an earlier attempt, whose answer was lost, may have been applied",
		causes: []error{fence.ErrUnavailable},
	}
}
