package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/gate"
	"github.com/fencelock/fence/internal/httpbuf"
)

// This file is the resource side of fencing over HTTP: middleware that makes any
// net/http service a fenced resource, reading the headers of a fenced write as the
// server's PUT /v1/kv does and answering refusals with the same JSON bodies and
// codes. It lives in fencehttp, not a package of its own, so that the header rules
// and the error table exist once: a service behind Fenced and `fence serve` refuse
// the same request with the same status, code and message.

// ResourceOptions configure Fenced and FencedTx. The zero value (or nil) is usable.
type ResourceOptions struct {
	// Resource names the guarded resource a request writes: the key the guard keeps
	// the highest fence of. nil means the request's URL path (r.URL.Path), so that
	// PUT /inventory/main and PUT /inventory/spare are fenced apart. A name the guard
	// refuses (empty, too long, control characters) is answered 400.
	Resource func(*http.Request) string

	// Logger logs the requests answered 500 (an error the middleware does not know)
	// or 503. nil means slog.Default().
	Logger *slog.Logger
}

// begin reads what a fenced request starts with: its operation (the method, lower
// case), its resource and its fence. Without a valid fence it answers the request
// and returns ok false.
func (o *ResourceOptions) begin(w http.ResponseWriter, r *http.Request) (op, resource string, f fence.Fence, ok bool) {
	op, resource = strings.ToLower(r.Method), o.resource(r)
	f, err := FenceFromRequest(r)
	if err != nil {
		writeResourceError(w, r, o, op, resource, err)
		return op, resource, f, false
	}
	return op, resource, f, true
}

func (o *ResourceOptions) resource(r *http.Request) string {
	if o != nil && o.Resource != nil {
		return o.Resource(r)
	}
	return r.URL.Path
}

func (o *ResourceOptions) logger() *slog.Logger {
	if o != nil && o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// Fenced returns a handler that admits each request through g before calling next:
// it reads the request's fence from the Fence-Token, Fence-Lock (both required,
// each exactly once) and Fence-Lease (optional, at most once) headers, exactly as
// `fence serve` reads a PUT /v1/kv, calls g.Fence(ctx, resource, fence) and, if the
// guard admits it, calls next with the fence in the request's context (see
// FenceFromContext).
//
// Refusals are answered with the JSON error body of the HTTP API, and next is not
// called:
//
//	400 invalid      a header is missing, repeated or malformed ("field" names it),
//	                 or the resource name is not a valid key
//	409 stale_token  {"highest","token","key"}: the resource admitted a higher token,
//	                 or the same token under another lease ("same_token": true)
//	409 wrong_lock   {"lock","got","key"}: the resource is fenced by another lock
//	503 unavailable  the guard could not be reached or timed out, or the request's
//	                 context ended while it waited for its turn
//	500 internal     any other error of the guard (logged)
//
// Within one Fenced handler, the requests of one resource run one at a time, from
// admission to the end of next: a request admitted with token 5 finishes before a
// request with token 6 is admitted, so the writes next makes land in token order
// even though g.Fence and next's write are two steps. That makes Fenced exact for a
// resource that lives in this process and is written only through this handler (an
// in-memory structure, a local file), with any fence.Guard (inmem.Guard, a
// bolt.Store) keeping the highest fence. Route every write of a resource through
// one Fenced handler. For a resource shared by several processes (a database
// table), use FencedTx, which admits the fence in the write's own transaction.
func Fenced(g fence.Guard, next http.Handler, opts *ResourceOptions) http.Handler {
	var gt gate.Gate
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, resource, f, ok := opts.begin(w, r)
		if !ok {
			return
		}
		if g == nil {
			writeResourceError(w, r, opts, op, resource, errors.New("fencehttp: Fenced: nil guard"))
			return
		}
		unlock, err := gt.Lock(r.Context(), resource)
		if err != nil {
			writeResourceError(w, r, opts, op, resource, err)
			return
		}
		defer unlock()
		if err := g.Fence(r.Context(), resource, f); err != nil {
			writeResourceError(w, r, opts, op, resource, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(ContextWithFence(r.Context(), f)))
	})
}

// TxFunc is a handler of FencedTx: it serves r inside tx, the transaction in which
// the request's fence was admitted, and writes its answer to w. The answer is held
// back until tx commits: it is sent only if the fence, the handler's writes and the
// commit all succeeded.
//
// To refuse the request with an answer of its own (a 400 for a bad body, say), a
// TxFunc writes that answer and returns a non-nil error: tx is rolled back and the
// answer is sent. A TxFunc that returns an error without writing an error status
// gets the API's answer for the error (409 for a *fence.StaleTokenError of a
// second resource it fenced in tx, 503 for fence.ErrUnavailable, else 500).
type TxFunc[Tx any] func(w http.ResponseWriter, r *http.Request, tx Tx) error

// DoFunc runs write in a new transaction fenced by f, committing only if the fence
// was admitted and write returned nil. The Do methods of the SQL guards have this
// shape: postgres.Guard.Do (Tx = pgx.Tx), sqlite.Guard.Do and mysql.Guard.Do
// (Tx = *sql.Tx); pass the method value, guard.Do.
type DoFunc[Tx any] func(ctx context.Context, resource string, f fence.Fence, write func(tx Tx) error) error

// FencedTx returns a handler that serves each request in a transaction whose first
// statement admits the request's fence: it reads the fence from the headers as
// Fenced does (400 if they are bad), then calls do (a guard's Do method) with the
// resource name, the fence and a write function that runs h with the transaction.
// The fence and every write h makes through tx commit together or not at all, and
// the guard's row lock makes concurrent requests of one resource wait for each
// other until commit, across processes: that is what makes a resource shared by
// several service instances safe.
//
// A refused fence never runs h and is answered as by Fenced (409 stale_token or
// wrong_lock, with the highest token); so is a *fence.StaleTokenError that h
// returns. h's answer is buffered and sent only after the commit (see TxFunc), so
// h must not stream or flush. The fence is also in the request's context
// (FenceFromContext), for code that h calls.
//
//	guard := postgres.NewGuard(pool, nil)
//	http.Handle("PUT /inventory/{id}", fencehttp.FencedTx(guard.Do, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
//		_, err := tx.Exec(r.Context(), `UPDATE inventory_snapshot SET data = $1 WHERE id = $2`, body, r.PathValue("id"))
//		return err
//	}, nil))
func FencedTx[Tx any](do DoFunc[Tx], h TxFunc[Tx], opts *ResourceOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, resource, f, ok := opts.begin(w, r)
		if !ok {
			return
		}
		if do == nil || h == nil {
			writeResourceError(w, r, opts, op, resource, errors.New("fencehttp: FencedTx: nil do or handler function"))
			return
		}
		r = r.WithContext(ContextWithFence(r.Context(), f))
		var (
			buf      *httpbuf.Response
			panicked any
		)
		err := do(r.Context(), resource, f, func(tx Tx) (err error) {
			// A retried transaction (a guard may retry a serialization failure) starts
			// its answer afresh.
			buf = httpbuf.New()
			defer func() {
				// Turn a panic into an error so that do rolls back and frees the
				// transaction's connection, then re-raise it below.
				if p := recover(); p != nil {
					panicked = p
					err = fmt.Errorf("fencehttp: handler panicked: %v", p)
				}
			}()
			return h(buf, r, tx)
		})
		if panicked != nil {
			panic(panicked)
		}
		switch {
		case err == nil && buf == nil:
			writeResourceError(w, r, opts, op, resource, errors.New("fencehttp: FencedTx: do returned without running the handler"))
		case err == nil:
			buf.SendTo(w)
		case buf != nil && buf.Status() >= 400 && !isFenceRefusal(err):
			buf.SendTo(w) // the handler's own refusal; tx rolled back
		default:
			writeResourceError(w, r, opts, op, resource, err)
		}
	})
}

// isFenceRefusal reports whether err is a guard's refusal of a fence.
func isFenceRefusal(err error) bool {
	return errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrNamespace)
}

// FenceFromRequest returns the fence a request carries in its headers: Fence-Token
// (a decimal token) and Fence-Lock (the lock name, URL-path-escaped), each exactly
// once, and Fence-Lease (the lease id) at most once. These are the rules of `fence
// serve`'s PUT /v1/kv.
//
// It returns an *fence.InvalidError matching fence.ErrInvalid, whose Field is the
// header's name, if a header is missing, repeated or malformed.
func FenceFromRequest(r *http.Request) (fence.Fence, error) {
	f, err := fenceFromHeaders(r)
	if err != nil {
		return fence.Fence{}, err
	}
	return f, nil
}

// SetHeaders sets the fence headers of a fenced write of f on req: Fence-Token,
// Fence-Lock (URL-path-escaped, as FenceFromRequest and the server expect) and,
// if f has a lease id, Fence-Lease. Existing values of those headers are replaced.
// Send lease.Fence() with every write made under a lease:
//
//	req, _ := http.NewRequestWithContext(ctx, "PUT", url, body)
//	fencehttp.SetHeaders(req, lease.Fence())
func SetHeaders(req *http.Request, f fence.Fence) {
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	req.Header.Del(HeaderLease)
	for k, vs := range fenceHeader(f) {
		req.Header[k] = vs
	}
}

type fenceKey struct{}

// ContextWithFence returns a copy of ctx that carries f, for FenceFromContext.
// Fenced and FencedTx call it for the handlers they run.
func ContextWithFence(ctx context.Context, f fence.Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFromContext returns the fence a request was admitted with, and true, in a
// handler run by Fenced or FencedTx (or under a context made by ContextWithFence);
// otherwise the zero Fence and false.
func FenceFromContext(ctx context.Context) (fence.Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(fence.Fence)
	return f, ok
}

func writeResourceError(w http.ResponseWriter, r *http.Request, opts *ResourceOptions, op, resource string, err error) {
	status, body := errorBody(op, resource, err)
	if status >= 500 {
		opts.logger().Error("fenced request failed", "method", r.Method, "resource", resource, "status", status, "err", err)
	}
	writeJSON(w, status, body)
}
