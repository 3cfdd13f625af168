package fencehttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// Client defaults.
const (
	DefaultRequestTimeout = 30 * time.Second // bound of one request, beyond its long poll
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
	HTTPClient *http.Client
	// Clock measures the local deadlines of leases; nil means fence.SystemClock.
	Clock fence.Clock
	// RequestTimeout bounds each request, beyond the long poll of a waiting acquire;
	// 0 means 30s. The caller's context bounds it too.
	RequestTimeout time.Duration
	// MaxPoll is the longest wait asked of the server in one long poll; a longer wait
	// is several polls. 0 means 30s (below common proxy idle timeouts).
	MaxPoll time.Duration
}

// Client is a fence.Locker, fence.Healer, fence.Inspector, fence.Guard and fence.KV that talks to a
// `fence serve` server (HTTP API v1) over keep-alive connections. It is safe for
// concurrent use. Leases it returns are fence.Lease values, so Done, Context and
// WithAutoRenew work over HTTP.
type Client struct {
	base    string // scheme://host[/path], without a trailing slash
	hc      *http.Client
	auth    string
	clock   fence.Clock
	timeout time.Duration
	maxPoll time.Duration
}

var (
	_ fence.Locker    = (*Client)(nil)
	_ fence.Healer    = (*Client)(nil)
	_ fence.Inspector = (*Client)(nil)
	_ fence.Guard     = (*Client)(nil)
	_ fence.KV        = (*Client)(nil)
)

// NewClient returns a client of the server at baseURL (e.g. http://127.0.0.1:7420).
// It returns an error matching fence.ErrInvalid if baseURL is not an absolute http
// or https URL without query or fragment.
func NewClient(baseURL string, opts *ClientOptions) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("fencehttp: server URL %q: %w: %v", baseURL, fence.ErrInvalid, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("fencehttp: server URL %q: %w: want http://HOST:PORT or https://HOST:PORT", baseURL, fence.ErrInvalid)
	}
	if opts == nil {
		opts = &ClientOptions{}
	}
	if opts.RequestTimeout < 0 || opts.MaxPoll < 0 {
		return nil, fmt.Errorf("fencehttp: new client: %w: negative timeout", fence.ErrInvalid)
	}
	c := &Client{
		base:    strings.TrimSuffix(u.String(), "/"),
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
		c.hc = &http.Client{Transport: t}
	}
	if c.clock == nil {
		c.clock = fence.SystemClock
	}
	if c.timeout == 0 {
		c.timeout = DefaultRequestTimeout
	}
	if c.maxPoll == 0 {
		c.maxPoll = DefaultMaxPoll
	}
	return c, nil
}

// CloseIdleConnections closes the keep-alive connections not in use.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// response is a read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request and reads the whole answer. Transport failures match
// fence.ErrUnavailable (and ctx.Err() when the context ended the request).
func (c *Client) do(ctx context.Context, method, path string, header http.Header, body []byte, extra time.Duration) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+extra)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%w: building the request: %v", fence.ErrInvalid, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if c.auth != "" {
		req.Header.Set("Authorization", "Bearer "+c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, transportError(ctx, err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

func transportError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%w)", fence.ErrUnavailable, cerr)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is in the caller's context already
	}
	return fmt.Errorf("%w: %v", fence.ErrUnavailable, err)
}

// doJSON posts in (if not nil) as JSON and decodes a 200 answer into out; any other
// status becomes the error the server reported.
func (c *Client) doJSON(ctx context.Context, method, path string, in, out any, extra time.Duration) error {
	var body []byte
	var h http.Header
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%w: %v", fence.ErrInvalid, err)
		}
		h = http.Header{"Content-Type": {"application/json"}}
	}
	resp, err := c.do(ctx, method, path, h, body, extra)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return resp.err()
	}
	if out != nil {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return fmt.Errorf("%w: malformed answer: %v", fence.ErrUnavailable, err)
		}
	}
	return nil
}

// err decodes an error answer. A body that is not our JSON (a proxy's page) still
// yields a *ServerError with the status.
func (r *response) err() error {
	var body errorResponse
	if json.Unmarshal(r.body, &body) != nil || body.Code == "" {
		msg := strings.TrimSpace(string(r.body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &ServerError{Status: r.status, Code: "", Message: fmt.Sprintf("server answered %d: %s", r.status, msg)}
	}
	return decodeError(r.status, body)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Acquire asks the server for a lease on name (see fence.Locker). With WithWait the
// server long-polls; waits longer than MaxPoll are several polls. The lease's local
// deadline counts from when the granting request was sent.
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the lock
// stayed held, also matching ctx.Err() when the context ended the wait;
// fence.ErrInvalid for a bad name or TTL; fence.ErrUnavailable when the server
// cannot be reached (the server may have granted a lease nobody will learn of; it
// expires after ttl); ErrUnauthorized for a refused auth token. While a wait lasts,
// an unavailable or restarting server is retried with backoff (50ms to 1s), so a
// waiter survives a graceful restart of the server.
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	if err := fence.ValidateName(name); err != nil {
		return nil, fmt.Errorf("fencehttp: acquire: %w", err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return nil, fmt.Errorf("fencehttp: acquire %q: %w", name, err)
	}
	o := fence.ApplyAcquireOptions(opts...)
	path := "/v1/locks/" + EscapeName(name) + "/acquire"
	var waitEnd time.Time
	forever := o.Wait == fence.WaitForever
	if o.Wait > 0 && !forever {
		waitEnd = time.Now().Add(o.Wait)
	}
	backoff := minBackoff
	for {
		var poll time.Duration
		switch {
		case forever:
			poll = c.maxPoll
		case o.Wait > 0:
			poll = min(time.Until(waitEnd), c.maxPoll)
			if poll > 0 && poll < time.Millisecond {
				poll = time.Millisecond
			}
		}
		start := c.clock.Now()
		var resp leaseResponse
		ttlMs := ms(ttl)
		err := c.doJSON(ctx, http.MethodPost, path, acquireRequest{TTLms: &ttlMs, WaitMs: max(ms(poll), 0)}, &resp, max(poll, 0))
		if err == nil {
			if resp.Name != name || fence.ValidateToken(resp.Token) != nil || fence.ValidateLeaseID(resp.Lease) != nil || resp.TTLms <= 0 || resp.WaitedMs < 0 {
				return nil, fmt.Errorf("fencehttp: acquire %q: %w: malformed grant from the server", name, fence.ErrUnavailable)
			}
			// The server started counting the TTL no earlier than when this request
			// left plus the time the server held it: date the lease from there, so
			// the local deadline is never later than the server's, and a grant at the
			// end of a long poll still gets its whole TTL.
			if waited := time.Duration(resp.WaitedMs) * time.Millisecond; waited > 0 && waited <= poll {
				start = start.Add(waited)
			}
			return fence.NewLease(fence.LeaseConfig{
				Locker: c, Name: name, Token: resp.Token, ID: resp.Lease,
				TTL: time.Duration(resp.TTLms) * time.Millisecond, Start: start, Clock: c.clock, AutoRenew: o.AutoRenew,
			}), nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("fencehttp: acquire %q: %w", name, errors.Join(fence.ErrNotAcquired, cerr))
		}
		waitLeft := forever || (o.Wait > 0 && time.Until(waitEnd) > 0)
		switch {
		case errors.Is(err, fence.ErrNotAcquired) && waitLeft:
			backoff = minBackoff
			continue // the server's poll ended before our wait: poll again
		case errors.Is(err, fence.ErrUnavailable) && waitLeft:
			// The server is restarting or draining (it ends long polls with 503):
			// try again, backing off, until the wait is over.
			d := backoff
			if !forever {
				d = min(d, time.Until(waitEnd))
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("fencehttp: acquire %q: %w (after: %w)", name, errors.Join(fence.ErrNotAcquired, ctx.Err()), err)
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		return nil, fmt.Errorf("fencehttp: acquire %q: %w", name, err)
	}
}

// Backoff of a waiting Acquire while the server is unavailable.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// Renew extends the lease to ttl from now by the server's store (see fence.Locker).
// It returns fence.ErrNotHeld if the lease is gone (or not yours), fence.ErrInvalid
// for bad arguments, fence.ErrUnavailable when the server cannot be reached.
func (c *Client) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := validateLeaseArgs(name, leaseID); err != nil {
		return fmt.Errorf("fencehttp: renew %q: %w", name, err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("fencehttp: renew %q: %w", name, err)
	}
	ttlMs := ms(ttl)
	if err := c.doJSON(ctx, http.MethodPost, "/v1/locks/"+EscapeName(name)+"/renew", renewRequest{Lease: leaseID, TTLms: &ttlMs}, nil, 0); err != nil {
		return fmt.Errorf("fencehttp: renew %q: %w", name, err)
	}
	return nil
}

// Release ends the lease and wakes the server's waiters (see fence.Locker). It
// returns fence.ErrNotHeld if the lease is no longer held (or not yours),
// fence.ErrInvalid for bad arguments, fence.ErrUnavailable when the server cannot be
// reached (retrying is safe).
func (c *Client) Release(ctx context.Context, name, leaseID string) error {
	if err := validateLeaseArgs(name, leaseID); err != nil {
		return fmt.Errorf("fencehttp: release %q: %w", name, err)
	}
	if err := c.doJSON(ctx, http.MethodPost, "/v1/locks/"+EscapeName(name)+"/release", releaseRequest{Lease: leaseID}, nil, 0); err != nil {
		return fmt.Errorf("fencehttp: release %q: %w", name, err)
	}
	return nil
}

// Heal reports to the server that a guard saw token seen for lock name, so the next
// grant's token is above it (see fence.Healer, P4). It returns fence.ErrInvalid for a
// bad name or token, ErrNotImplemented if the server's store has no Healer (its
// counters cannot go backwards), fence.ErrUnavailable when the server cannot be
// reached (healing again is safe: it never lowers a counter).
func (c *Client) Heal(ctx context.Context, name string, seen fence.Token) error {
	if err := fence.ValidateName(name); err != nil {
		return fmt.Errorf("fencehttp: heal: %w", err)
	}
	if err := fence.ValidateToken(seen); err != nil {
		return fmt.Errorf("fencehttp: heal %q: %w", name, err)
	}
	if err := c.doJSON(ctx, http.MethodPost, "/v1/locks/"+EscapeName(name)+"/heal", healRequest{Seen: seen}, nil, 0); err != nil {
		return fmt.Errorf("fencehttp: heal %q: %w", name, err)
	}
	return nil
}

func validateLeaseArgs(name, leaseID string) error {
	if err := fence.ValidateName(name); err != nil {
		return err
	}
	return fence.ValidateLeaseID(leaseID)
}

// Inspect returns the state of one lock (see fence.Inspector). It returns
// fence.ErrInvalid for a bad name, ErrNotImplemented if the server's store cannot
// report state, fence.ErrUnavailable when the server cannot be reached.
func (c *Client) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := fence.ValidateName(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("fencehttp: inspect: %w", err)
	}
	var li lockInfo
	if err := c.doJSON(ctx, http.MethodGet, "/v1/locks/"+EscapeName(name), nil, &li, 0); err != nil {
		return fence.LockInfo{}, fmt.Errorf("fencehttp: inspect %q: %w", name, err)
	}
	return li.toFence(), nil
}

// List returns the locks whose names start with prefix (see fence.Inspector), at
// most limit (the server caps it at 10000; limit <= 0 means the store's default).
// Errors are those of Inspect.
func (c *Client) List(ctx context.Context, prefix string, limit int) ([]fence.LockInfo, error) {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(min(limit, maxListLimit)))
	}
	path := "/v1/locks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var resp listResponse
	if err := c.doJSON(ctx, http.MethodGet, path, nil, &resp, 0); err != nil {
		return nil, fmt.Errorf("fencehttp: list %q: %w", prefix, err)
	}
	out := make([]fence.LockInfo, 0, len(resp.Locks))
	for _, li := range resp.Locks {
		out = append(out, li.toFence())
	}
	return out, nil
}

func (li lockInfo) toFence() fence.LockInfo {
	return fence.LockInfo{Name: li.Name, Held: li.Held, Token: li.Token, LastToken: li.LastToken,
		ExpiresIn: time.Duration(li.ExpiresInMs) * time.Millisecond}
}

// fenceHeader returns the headers of a fenced write. An empty f.Name leaves out
// Fence-Lock (the server then uses the key's lock).
func fenceHeader(f fence.Fence) http.Header {
	h := http.Header{HeaderToken: {f.Token.String()}}
	if f.Name != "" {
		h.Set(HeaderLock, url.PathEscape(f.Name))
	}
	if f.LeaseID != "" {
		h.Set(HeaderLease, f.LeaseID)
	}
	return h
}

// Put stores value under key if the server's KV admits f (see fence.KV). It returns
// a *fence.StaleTokenError (fence.ErrStaleToken) carrying the highest token, or a
// *fence.NamespaceError (fence.ErrNamespace), when the write is refused and changed
// nothing; fence.ErrInvalid for a bad key or fence or a value over the server's
// limit; ErrNotImplemented if the server has no KV; fence.ErrUnavailable when the
// server cannot be reached (the write may or may not have happened).
func (c *Client) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("fencehttp: put %q: %w", key, err)
	}
	return c.put(ctx, key, value, f)
}

// PutToken is Put without a lock name: the server checks token against the lock that
// already fences key (no Fence-Lock header). A key that no lock fences yet is refused
// with fence.ErrInvalid. Prefer Put, which also refuses a token of another lock.
func (c *Client) PutToken(ctx context.Context, key string, value []byte, token fence.Token, leaseID string) error {
	f := fence.Fence{Token: token, LeaseID: leaseID}
	if err := fence.ValidateToken(token); err != nil {
		return fmt.Errorf("fencehttp: put %q: %w", key, err)
	}
	if leaseID != "" {
		if err := fence.ValidateLeaseID(leaseID); err != nil {
			return fmt.Errorf("fencehttp: put %q: %w", key, err)
		}
	}
	return c.put(ctx, key, value, f)
}

func (c *Client) put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("fencehttp: put: %w", err)
	}
	h := fenceHeader(f)
	h.Set("Content-Type", "application/octet-stream")
	if value == nil {
		value = []byte{}
	}
	resp, err := c.do(ctx, http.MethodPut, "/v1/kv/"+EscapeName(key), h, value, 0)
	if err == nil && resp.status != http.StatusOK {
		err = resp.err()
	}
	if err != nil {
		return fmt.Errorf("fencehttp: put %q: %w", key, err)
	}
	return nil
}

// Fence advances key's fence to f without writing a value (see fence.Guard). Errors
// are those of Put.
func (c *Client) Fence(ctx context.Context, key string, f fence.Fence) error {
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("fencehttp: fence: %w", err)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("fencehttp: fence %q: %w", key, err)
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/fences/"+EscapeName(key), fenceHeader(f), nil, 0)
	if err == nil && resp.status != http.StatusOK {
		err = resp.err()
	}
	if err != nil {
		return fmt.Errorf("fencehttp: fence %q: %w", key, err)
	}
	return nil
}

// Get returns the value under key and the fence that wrote it (see fence.KV). The
// fence has the lock name and token but never the lease id, which the server does
// not disclose. It returns fence.ErrNotFound if key was never written,
// fence.ErrInvalid for a bad key, fence.ErrUnavailable when the server cannot be
// reached.
func (c *Client) Get(ctx context.Context, key string) (fence.Item, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, fmt.Errorf("fencehttp: get: %w", err)
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/kv/"+EscapeName(key), nil, nil, 0)
	if err == nil && resp.status != http.StatusOK {
		err = resp.err()
	}
	if err != nil {
		return fence.Item{}, fmt.Errorf("fencehttp: get %q: %w", key, err)
	}
	tok, terr := fence.ParseToken(resp.header.Get(HeaderToken))
	name, nerr := url.PathUnescape(resp.header.Get(HeaderLock))
	if terr != nil || nerr != nil {
		return fence.Item{}, fmt.Errorf("fencehttp: get %q: %w: malformed %s or %s header in the answer", key, fence.ErrUnavailable, HeaderToken, HeaderLock)
	}
	return fence.Item{Value: resp.body, Fence: fence.Fence{Name: name, Token: tok}}, nil
}
