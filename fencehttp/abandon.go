package fencehttp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Abandon: POST /v1/locks/{name}/release with "request_id" instead of "lease"
// ends the grant of an acquire whose client gave up before it learned the
// lease id, if that acquire was granted after all (the service's rules: see
// its abandon). Its Client sends one, best effort, when it gives up.

// abandonTimeout bounds the Client's abandon of an acquire it gave up on: it
// is best effort, and the caller is waiting for Acquire's error.
const abandonTimeout = time.Second

// abandonLost sends, best effort, the abandon of an acquire (its last try r,
// under request id rid) that ended with err while one of its attempts may have
// been granted without the Client learning it: when ctx ended (a wait given up
// mid-poll) or no server answered (fence.ErrUnavailable: the attempts timed out
// or lost their connections). A server's definite answer (held, invalid, ...)
// leaves nothing to abandon: a grant made by an earlier attempt would have been
// returned to the later one, found by its request id. The abandon's own errors
// are dropped: whatever it could not free expires.
func (c *Client) abandonLost(ctx context.Context, r *driver.Request, rid string, err error) {
	if ctx.Err() == nil && !errors.Is(err, fence.ErrUnavailable) {
		return
	}
	ttlMs := ms(r.TTL)
	req := releaseRequest{RequestID: rid, TTLms: &ttlMs, Shared: r.Options.Shared}
	if limit := r.Options.Limit; limit > 1 {
		req.Limit = &limit
	}
	body, berr := c.encode("release", r.Name, req)
	if berr != nil {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(abandonTimeout, c.attempt))
	defer cancel()
	_, _ = c.do(actx, "release", r.Name, http.MethodPost, "/v1/locks/"+EscapeName(r.Name)+"/release", http.Header{"Content-Type": {"application/json"}}, body, 0)
}
