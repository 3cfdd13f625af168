package fencehttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// Failover between several servers (see Client): do sends a request to the
// server that last answered and moves it along the list when an attempt gets no
// answer or a 502, 503 or 504.

// parseServers returns the servers of baseURL (a comma-separated list of URLs)
// and of more, each as scheme://host[/path] without a trailing slash, or an
// error matching fence.ErrInvalid for a bad URL or none at all.
func parseServers(baseURL string, more []string) ([]string, error) {
	var all []string
	if baseURL != "" || len(more) == 0 {
		all = strings.Split(baseURL, ",")
	}
	all = append(all, more...)
	servers := make([]string, 0, len(all))
	for _, raw := range all {
		s := strings.TrimSpace(raw)
		badURL := &clientError{msg: fmt.Sprintf("invalid server URL %q: want http://HOST:PORT or https://HOST:PORT", s), causes: []error{fence.ErrInvalid}}
		u, err := url.Parse(s)
		if err != nil {
			return nil, badURL
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, badURL
		}
		servers = append(servers, strings.TrimSuffix(u.String(), "/"))
	}
	return servers, nil
}

// Servers returns the servers of the Client, in the order it tries them.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// current returns the server that last answered (the first, before any answer).
func (c *Client) current() string { return c.servers[c.cur.Load()] }

// failoverStatus reports whether an answer's status moves the request to the
// next server: the server cannot serve it now (503: a node cut off from the
// majority, a server draining), or a proxy in front of it could not reach it.
func failoverStatus(status int) bool {
	return status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout
}

// do sends one request for op on name (for messages) and reads the whole answer,
// failing over between the servers (see Client). A transport failure on every
// server is a *clientError matching fence.ErrUnavailable: "cannot reach the
// fence server at URL: REASON" (with "; at URL: REASON" for each further server
// tried), or, when ctx ended the request, "OP NAME: context canceled" matching
// ctx.Err() as well. When some server answered 502, 503 or 504 and none answered
// otherwise, the last such answer is returned.
func (c *Client) do(ctx context.Context, op, name, method, path string, header http.Header, body []byte, extra time.Duration) (*response, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout+extra)
	defer cancel()
	n := len(c.servers)
	first := int(c.cur.Load())
	var (
		fails     []string
		lastErr   error
		lastResp  *response
		uncertain bool
	)
	for i := 0; i < n; i++ {
		k := (first + i) % n
		base := c.servers[k]
		resp, err := c.attemptOn(rctx, base, method, path, header, body, extra)
		if err == nil && (!failoverStatus(resp.status) || n == 1) {
			c.cur.Store(int64(k))
			resp.uncertain = uncertain
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, c.transportError(ctx, op, name, nil, ctx.Err())
		}
		if err == nil {
			lastResp, uncertain = resp, true
			lastResp.uncertain = uncertain
			fails = append(fails, fmt.Sprintf("at %s: %d %s", base, resp.status, http.StatusText(resp.status)))
		} else {
			lastErr = err
			uncertain = uncertain || !notSent(err)
			fails = append(fails, fmt.Sprintf("at %s: %s", base, reachReason(err)))
		}
		if rctx.Err() != nil {
			break // RequestTimeout is over: no time for another server
		}
	}
	if lastResp != nil {
		return lastResp, nil
	}
	return nil, c.transportError(ctx, op, name, fails, lastErr)
}

// attemptOn sends the request to the server base, bounded by the attempt
// timeout (plus extra, the long poll) within ctx, and reads the whole answer.
func (c *Client) attemptOn(ctx context.Context, base, method, path string, header http.Header, body []byte, extra time.Duration) (*response, error) {
	actx, cancel := context.WithTimeout(ctx, c.attempt+extra)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if c.auth != "" {
		req.Header.Set("Authorization", "Bearer "+c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data, base: base}, nil
}

// notSent reports whether err is a failure to connect: the request never left,
// so nothing of it can have been applied.
func notSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
