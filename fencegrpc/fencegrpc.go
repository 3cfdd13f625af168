// Package fencegrpc makes a gRPC service a fenced resource: server interceptors
// that admit each call's fence through a fence.Guard before the handler runs, and
// the client side that attaches a lease's fence to outgoing calls.
//
//	guard := inmem.NewGuard() // or a bolt.Store, a postgres.Guard, ...
//	srv := grpc.NewServer(
//		grpc.UnaryInterceptor(fencegrpc.UnaryServerInterceptor(guard, nil)),
//		grpc.StreamInterceptor(fencegrpc.StreamServerInterceptor(guard, nil)),
//	)
//
//	// client, holding lease:
//	ctx = fencegrpc.AppendToOutgoingContext(ctx, lease.Fence())
//	_, err := inventory.Put(ctx, req)
//	var stale *fence.StaleTokenError
//	if errors.As(fencegrpc.FenceError(err), &stale) { ... stale.Highest ... }
//
// # Metadata
//
// A call carries its fence in the metadata keys fence-token (decimal), fence-lock
// (the lock name, URL-path-escaped) and fence-lease (optional): the headers of the
// HTTP API, lower-cased, with the same rules (fencehttp.FenceFromRequest): token
// and lock required, each exactly once, lease at most once.
//
// # Status codes
//
//	InvalidArgument     fence metadata missing, repeated or malformed, or a resource
//	                    name the guard refuses (a BadRequest detail names the key)
//	Aborted             stale_token: the resource admitted a higher token, or the same
//	                    token under another lease
//	FailedPrecondition  wrong_lock: the resource is fenced by another lock's tokens;
//	                    unissued_token: a guard that also grants the lock (the
//	                    embedded bolt store) never issued the fence (P9);
//	                    lease_required: such a guard's live lease holds the token
//	                    and the call sent no fence-lease (P9)
//	Unavailable         the guard could not be reached or is closed
//	Canceled, DeadlineExceeded  the call's context ended first
//	Internal            any other error of the guard
//
// A stale token is Aborted, not FailedPrecondition: gRPC's guide names "a sequencer
// check failure" as Aborted's case, to be retried at a higher level, which here is
// what a fenced-off writer must do: take the lock again and get a new token, never
// resend the same call. A token of another lock is a caller's mistake that no retry
// fixes, hence FailedPrecondition.
//
// Every refusal carries a google.rpc.ErrorInfo detail with Domain "fence" and, as
// Reason, the code the HTTP API uses ("invalid", "stale_token", "wrong_lock",
// "unavailable", "internal"); its metadata holds the fields of the HTTP error body:
// "highest", "token", "key" and "same_token" for stale_token; "key", "lock" and
// "got" for wrong_lock; "key", "lock", "token", "last" and "other_lease" for
// unissued_token; "key", "lock" and "token" for lease_required; "field" for
// invalid. The message says the same in one line:
// `stale token 3 for "inventory/main", highest seen 5`. FenceError turns such a
// status back into the typed fence error.
//
// # Ordering
//
// As with fencehttp.Fenced, one interceptor runs the calls of one resource one at
// a time, from admission to the handler's return (for a stream, to the stream's
// end), so the handler's writes land in token order although the guard's Fence
// and the write are two steps. That is exact for a resource that lives in this
// process and is written only through this server. A resource shared by several
// processes needs the fence admitted in the write's own transaction: leave that
// method out of Options.Fenced, read the call's fence in the handler with
// FenceFromIncomingContext, write through the guard's Do (postgres.Guard.Do,
// sqlite.Guard.Do, ...), and return Status(resource, err).Err() for its error, so
// the caller sees the same codes and details.
//
// This package is the only one of fence that imports gRPC; `fence serve` does not
// link it.
package fencegrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/gate"
)

// Metadata keys of a fenced call.
const (
	MDToken = "fence-token" // the fencing token, in decimal
	MDLock  = "fence-lock"  // the lock name, URL-path-escaped
	MDLease = "fence-lease" // the lease id (optional)
)

// Domain is the Domain of the google.rpc.ErrorInfo detail of every refusal.
const Domain = "fence"

// Options configure the interceptors. The zero value (or nil) is usable.
type Options struct {
	// Fenced reports whether calls of the method fullMethod ("/pkg.Service/Method")
	// must carry a fence. nil means every method. A method that is not fenced runs
	// without admission, whatever metadata it carries.
	Fenced func(fullMethod string) bool

	// Resource names the guarded resource of a call: the key the guard keeps the
	// highest fence of. nil means fullMethod. For a unary call, req is the decoded
	// request, so a resource can be named from a field of it; for a stream, req is
	// nil.
	Resource func(ctx context.Context, fullMethod string, req any) string

	// Logger logs the calls answered Internal or Unavailable. nil means
	// slog.Default().
	Logger *slog.Logger
}

func (o *Options) fenced(method string) bool {
	return o == nil || o.Fenced == nil || o.Fenced(method)
}

func (o *Options) resource(ctx context.Context, method string, req any) string {
	if o != nil && o.Resource != nil {
		return o.Resource(ctx, method, req)
	}
	return method
}

func (o *Options) logger() *slog.Logger {
	if o != nil && o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// admitter is what both interceptors share: the guard and the per-resource turn.
type admitter struct {
	g    fence.Guard
	opts *Options
	gate gate.Gate
}

// admit reads ctx's fence, waits for resource's turn and admits the fence. It
// returns the context for the handler (with the fence, see FenceFromContext) and
// the function that ends the turn, or a status error.
func (a *admitter) admit(ctx context.Context, method, resource string) (context.Context, func(), error) {
	f, err := FenceFromIncomingContext(ctx)
	if err != nil {
		return nil, nil, a.statusOf(method, resource, err)
	}
	if a.g == nil {
		return nil, nil, a.statusOf(method, resource, errors.New("fencegrpc: nil guard"))
	}
	unlock, err := a.gate.Lock(ctx, resource)
	if err != nil {
		return nil, nil, a.statusOf(method, resource, err)
	}
	if err := a.g.Fence(ctx, resource, f); err != nil {
		unlock()
		return nil, nil, a.statusOf(method, resource, err)
	}
	return fencehttp.ContextWithFence(ctx, f), unlock, nil
}

func (a *admitter) statusOf(method, resource string, err error) error {
	st := Status(resource, err)
	if c := st.Code(); c == codes.Internal || c == codes.Unavailable {
		a.opts.logger().Error("fenced call failed", "method", method, "resource", resource, "code", c.String(), "err", err)
	}
	return st.Err()
}

// UnaryServerInterceptor returns an interceptor that admits each unary call of a
// fenced method (Options.Fenced) through g before calling the handler: it reads the
// call's fence from the incoming metadata (see the package doc), calls g.Fence with
// the call's resource (Options.Resource) and runs the handler only if the guard
// admitted it, with the fence in the context (FenceFromContext). A refusal is a
// status error with the codes of the package doc; the handler is not called.
func UnaryServerInterceptor(g fence.Guard, opts *Options) grpc.UnaryServerInterceptor {
	a := &admitter{g: g, opts: opts}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !opts.fenced(info.FullMethod) {
			return handler(ctx, req)
		}
		resource := opts.resource(ctx, info.FullMethod, req)
		ctx, unlock, err := a.admit(ctx, info.FullMethod, resource)
		if err != nil {
			return nil, err
		}
		defer unlock()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that admits each stream of a
// fenced method once, when it opens, as UnaryServerInterceptor admits a call: the
// fence is read from the stream's metadata, and the handler runs only if the guard
// admitted it, with the fence in the stream's context. The stream holds its
// resource's turn until the handler returns, so keep fenced streams short.
func StreamServerInterceptor(g fence.Guard, opts *Options) grpc.StreamServerInterceptor {
	a := &admitter{g: g, opts: opts}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !opts.fenced(info.FullMethod) {
			return handler(srv, ss)
		}
		resource := opts.resource(ss.Context(), info.FullMethod, nil)
		ctx, unlock, err := a.admit(ss.Context(), info.FullMethod, resource)
		if err != nil {
			return err
		}
		defer unlock()
		return handler(srv, &fencedStream{ServerStream: ss, ctx: ctx})
	}
}

// fencedStream is a ServerStream whose context carries the admitted fence.
type fencedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fencedStream) Context() context.Context { return s.ctx }

// FenceFromIncomingContext returns the fence in the incoming metadata of ctx (a
// server's context): fence-token and fence-lock each exactly once, fence-lease at
// most once, with the rules of fencehttp.FenceFromRequest. It returns an
// *fence.InvalidError matching fence.ErrInvalid, whose Field is the metadata key,
// if one is missing, repeated or malformed.
func FenceFromIncomingContext(ctx context.Context) (fence.Fence, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := http.Header{}
	for key, header := range map[string]string{MDToken: fencehttp.HeaderToken, MDLock: fencehttp.HeaderLock, MDLease: fencehttp.HeaderLease} {
		if vs := md.Get(key); len(vs) > 0 {
			h[header] = vs
		}
	}
	f, err := fencehttp.FenceFromRequest(&http.Request{Header: h})
	if err != nil {
		var inv *fence.InvalidError
		if errors.As(err, &inv) {
			return fence.Fence{}, &fence.InvalidError{Field: mdKeyOf(inv.Field), Value: inv.Value, Reason: inv.Reason}
		}
		return fence.Fence{}, err
	}
	return f, nil
}

// mdKeyOf returns the metadata key of a fence header's name.
func mdKeyOf(field string) string {
	switch field {
	case fencehttp.HeaderToken:
		return MDToken
	case fencehttp.HeaderLock:
		return MDLock
	case fencehttp.HeaderLease:
		return MDLease
	}
	return field
}

// FenceFromContext returns the fence a call was admitted with, and true, in a
// handler run by the interceptors; otherwise the zero Fence and false. It is
// fencehttp.FenceFromContext: code shared by HTTP and gRPC handlers reads either.
func FenceFromContext(ctx context.Context) (fence.Fence, bool) {
	return fencehttp.FenceFromContext(ctx)
}

// AppendToOutgoingContext returns ctx with f's metadata appended for outgoing
// calls: fence-token, fence-lock (URL-path-escaped) and, if f has a lease id,
// fence-lease. Attach lease.Fence() to every call made under a lease.
func AppendToOutgoingContext(ctx context.Context, f fence.Fence) context.Context {
	kv := []string{MDToken, f.Token.String(), MDLock, url.PathEscape(f.Name)}
	if f.LeaseID != "" {
		kv = append(kv, MDLease, f.LeaseID)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// Status returns the gRPC status that answers err, met while admitting a fence for
// resource: the code of the package doc, a one-line message, and an ErrorInfo
// detail (Domain "fence") with the fields of the HTTP API's error body. An error
// it does not know is Internal with the message "internal error" only. A lease id
// is never part of it.
func Status(resource string, err error) *status.Status {
	var (
		stale *fence.StaleTokenError
		ns    *fence.NamespaceError
		inv   *fence.InvalidError
		unis  *fence.UnissuedTokenError
		lreq  *fence.LeaseRequiredError
	)
	var (
		code   codes.Code
		reason string
		msg    string
		md     = map[string]string{}
	)
	switch {
	case errors.As(err, &stale):
		code, reason = codes.Aborted, "stale_token"
		msg = fmt.Sprintf("stale token %d for %q, highest seen %d", stale.Token, stale.Resource, stale.Highest)
		if stale.SameToken {
			msg += " (accepted under another lease)"
			md["same_token"] = "true"
		}
		md["key"], md["token"], md["highest"] = stale.Resource, stale.Token.String(), stale.Highest.String()
	case errors.As(err, &unis):
		code, reason = codes.FailedPrecondition, "unissued_token"
		msg = strings.TrimPrefix(unis.Error(), "fence: ") + fmt.Sprintf(" (for %q)", resource)
		md["key"], md["lock"], md["token"], md["last"] = resource, unis.Lock, unis.Token.String(), unis.Last.String()
		if unis.OtherLease {
			md["other_lease"] = "true"
		}
	case errors.As(err, &lreq):
		code, reason = codes.FailedPrecondition, "lease_required"
		msg = strings.TrimPrefix(lreq.Error(), "fence: ") + fmt.Sprintf(" (for %q)", resource)
		md["key"], md["lock"], md["token"] = resource, lreq.Lock, lreq.Token.String()
	case errors.As(err, &ns):
		code, reason = codes.FailedPrecondition, "wrong_lock"
		msg = fmt.Sprintf("token of lock %q, but %q is fenced by lock %q", ns.Got, ns.Resource, ns.Want)
		md["key"], md["lock"], md["got"] = ns.Resource, ns.Want, ns.Got
	case errors.As(err, &inv):
		code, reason = codes.InvalidArgument, "invalid"
		msg = invalidMessage(inv)
		md["field"] = inv.Field
	case errors.Is(err, fence.ErrInvalid):
		code, reason, msg = codes.InvalidArgument, "invalid", fmt.Sprintf("invalid fence for %q", resource)
	case errors.Is(err, context.Canceled):
		code, reason, msg = codes.Canceled, "unavailable", "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		code, reason, msg = codes.DeadlineExceeded, "unavailable", "guard unavailable (timed out)"
	case errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrClosed):
		code, reason, msg = codes.Unavailable, "unavailable", "guard unavailable"
	default:
		code, reason, msg = codes.Internal, "internal", "internal error"
	}
	st := status.New(code, msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: md}}
	if inv != nil {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: inv.Field, Description: inv.Reason}}})
	}
	if with, err := st.WithDetails(details...); err == nil { // fails only for a nil or unmarshalable detail
		st = with
	}
	return st
}

// invalidMessage is the one line of an InvalidError: the field, its value (never a
// lease id's) and the reason.
func invalidMessage(inv *fence.InvalidError) string {
	if inv.Value == "" || inv.Field == MDLease || inv.Field == "lease" {
		return fmt.Sprintf("invalid %s: %s", inv.Field, inv.Reason)
	}
	v := inv.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("invalid %s %q: %s", inv.Field, v, inv.Reason)
}

// FenceError returns the typed fence error that a status error of these
// interceptors describes: a *fence.StaleTokenError (carrying Highest) for
// stale_token, a *fence.NamespaceError for wrong_lock, a *fence.InvalidError for
// invalid, each wrapped so that errors.Is also finds err's status; fence.ErrUnavailable
// joined with err for unavailable. Any other error (nil included) is returned as is.
func FenceError(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok && i.GetDomain() == Domain {
			info = i
			break
		}
	}
	if info == nil {
		return err
	}
	md := info.GetMetadata()
	tok := func(k string) fence.Token {
		n, _ := strconv.ParseUint(md[k], 10, 64)
		return fence.Token(n)
	}
	var typed error
	switch info.GetReason() {
	case "stale_token":
		typed = &fence.StaleTokenError{Resource: md["key"], Token: tok("token"), Highest: tok("highest"), SameToken: md["same_token"] == "true"}
	case "wrong_lock":
		typed = &fence.NamespaceError{Resource: md["key"], Want: md["lock"], Got: md["got"]}
	case "unissued_token":
		typed = &fence.UnissuedTokenError{Lock: md["lock"], Token: tok("token"), Last: tok("last"), OtherLease: md["other_lease"] == "true"}
	case "lease_required":
		typed = &fence.LeaseRequiredError{Lock: md["lock"], Token: tok("token")}
	case "invalid":
		typed = &fence.InvalidError{Field: md["field"], Reason: st.Message()}
	case "unavailable":
		typed = fence.ErrUnavailable
	default:
		return err
	}
	return &refusal{msg: st.Message(), causes: []error{typed, err}}
}

// refusal is FenceError's result: the status's message, unwrapping to the typed
// fence error and the status error.
type refusal struct {
	msg    string
	causes []error
}

func (e *refusal) Error() string   { return e.msg }
func (e *refusal) Unwrap() []error { return e.causes }
