package fencehttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// ClusterStatus returns the members of the cluster the server is a node of, as
// that node sees them (GET /v1/cluster). It returns an error matching
// fence.ErrNotFound if the server is not in cluster mode, ErrUnauthorized for a
// refused auth token, and fence.ErrUnavailable if the server cannot be reached.
func (c *Client) ClusterStatus(ctx context.Context) ([]ClusterMember, error) {
	var st ClusterStatus
	if err := c.doJSON(ctx, "cluster status", "", http.MethodGet, "/v1/cluster", nil, &st, 0); err != nil {
		return nil, err
	}
	return st.Members, nil
}

// AddMember adds a member named name with peer address peer (HOST:PORT) to the
// server's cluster (POST /v1/cluster/members, admin) and returns the members
// afterwards; the new member's node is then started with --join. It returns an
// error matching fence.ErrInvalid for a bad or taken name or address,
// fence.ErrNotFound if the server is not in cluster mode, ErrForbidden for a
// token without admin on every name, and fence.ErrUnavailable if the cluster
// cannot take the change (or the server cannot be reached).
func (c *Client) AddMember(ctx context.Context, name, peer string) ([]ClusterMember, error) {
	var st ClusterStatus
	if err := c.doJSON(ctx, "add member", name, http.MethodPost, "/v1/cluster/members", addMemberRequest{Name: name, Peer: peer}, &st, 0); err != nil {
		return nil, err
	}
	return st.Members, nil
}

// RemoveMember removes the member named name from the server's cluster (DELETE
// /v1/cluster/members/{name}, admin) and returns the members afterwards. It
// returns an error matching fence.ErrNotFound for an unknown member or a server
// not in cluster mode, ErrForbidden for a token without admin on every name,
// and fence.ErrUnavailable if the cluster cannot take the change.
func (c *Client) RemoveMember(ctx context.Context, name string) ([]ClusterMember, error) {
	var st ClusterStatus
	if err := c.doJSON(ctx, "remove member", name, http.MethodDelete, "/v1/cluster/members/"+EscapeName(name), nil, &st, 0); err != nil {
		return nil, err
	}
	return st.Members, nil
}

// Snapshot writes a snapshot of the cluster's store (GET /v1/cluster/snapshot,
// admin; etcd's snapshot format, which ends in its own checksum) to w and
// returns the bytes written. Only ctx bounds it: a snapshot may be large. It
// returns the errors of RemoveMember's kinds, or an error matching
// fence.ErrUnavailable if the answer breaks off (what w holds is then not a
// whole snapshot).
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	const op = "snapshot"
	// One server, the one that last answered: a snapshot broken off halfway is not
	// retried on another.
	base := c.current()
	fail := func(err error) error {
		return c.transportError(ctx, op, "", []string{"at " + base + ": " + reachReason(err)}, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/cluster/snapshot", nil)
	if err != nil {
		return 0, fail(err)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", "Bearer "+c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		if err != nil {
			return 0, fail(err)
		}
		return 0, c.answerError(&response{status: resp.StatusCode, header: resp.Header, body: data})
	}
	body := &readErr{r: resp.Body}
	n, err := io.Copy(w, body)
	switch {
	case body.err != nil:
		return n, fmt.Errorf("%s: broken off after %d bytes: %w", op, n, fail(body.err))
	case err != nil:
		return n, fmt.Errorf("%s: writing: %w", op, err)
	}
	return n, nil
}

// readErr keeps the error of its reader other than io.EOF, to tell a broken
// answer from a failed write.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}
