package fencegrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencegrpc"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/fencedtest"
)

// inventory is a tiny gRPC service without generated code: Put (unary) stores a
// string, Sync (bidirectional stream) stores every string the client sends, and
// Get (unary) is read-only and left unfenced. It records the tokens it ran with.
type inventory struct {
	mu     sync.Mutex
	tokens []fence.Token
	calls  atomic.Int64
	delay  time.Duration
}

func (s *inventory) record(ctx context.Context) error {
	s.calls.Add(1)
	f, ok := fencegrpc.FenceFromContext(ctx)
	if !ok {
		return status.Error(codes.Internal, "no fence in the handler's context")
	}
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	s.mu.Lock()
	s.tokens = append(s.tokens, f.Token)
	s.mu.Unlock()
	return nil
}

func (s *inventory) stored() []fence.Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fence.Token(nil), s.tokens...)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "test.Inventory",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Put", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				if err := srv.(*inventory).record(ctx); err != nil {
					return nil, err
				}
				return wrapperspb.String("stored " + req.(*wrapperspb.StringValue).GetValue()), nil
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Inventory/Put"}, h)
		}},
		{MethodName: "Get", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) { return wrapperspb.String("read"), nil }
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Inventory/Get"}, h)
		}},
	},
	Streams: []grpc.StreamDesc{{
		StreamName: "Sync", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			if err := srv.(*inventory).record(ss.Context()); err != nil {
				return err
			}
			for {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if err := ss.SendMsg(wrapperspb.String("stored " + in.GetValue())); err != nil {
					return err
				}
			}
		},
	}},
}

var syncDesc = &grpc.StreamDesc{StreamName: "Sync", ServerStreams: true, ClientStreams: true}

// startServer serves an inventory behind the interceptors on a real TCP listener
// of 127.0.0.1 and returns a client connection to it.
func startServer(t *testing.T, g fence.Guard, svc *inventory, opts *fencegrpc.Options) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(fencegrpc.UnaryServerInterceptor(g, opts)),
		grpc.StreamInterceptor(fencegrpc.StreamServerInterceptor(g, opts)),
	)
	srv.RegisterService(&serviceDesc, svc)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func put(t *testing.T, conn *grpc.ClientConn, ctx context.Context, f *fence.Fence, value string) (string, error) {
	t.Helper()
	if f != nil {
		ctx = fencegrpc.AppendToOutgoingContext(ctx, *f)
	}
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, "/test.Inventory/Put", wrapperspb.String(value), out)
	return out.GetValue(), err
}

func fenceOf(name string, tok fence.Token, lease string) *fence.Fence {
	return &fence.Fence{Name: name, Token: tok, LeaseID: lease}
}

// errorInfo returns the fence ErrorInfo of a status error.
func errorInfo(t *testing.T, err error) *errdetails.ErrorInfo {
	t.Helper()
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok && i.GetDomain() == fencegrpc.Domain {
			return i
		}
	}
	t.Fatalf("status %v has no ErrorInfo of domain %q", st, fencegrpc.Domain)
	return nil
}

func wantCode(t *testing.T, what string, err error, code codes.Code, reason string) *errdetails.ErrorInfo {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("%s: code %v (error %v), want %v", what, got, err, code)
	}
	info := errorInfo(t, err)
	if info.GetReason() != reason {
		t.Fatalf("%s: ErrorInfo reason %q, want %q", what, info.GetReason(), reason)
	}
	return info
}

func TestUnary_AcceptedStaleEqualWrongLock(t *testing.T) {
	fencedtest.EachGuard(t, func(t *testing.T, g fence.Guard) {
		fencedtest.Issue(t, g, "jobs/nightly", 5)
		fencedtest.Issue(t, g, "other", 9)
		svc := &inventory{}
		conn := startServer(t, g, svc, nil)
		ctx := ctxFor(t)

		got, err := put(t, conn, ctx, fenceOf("jobs/nightly", 5, "L5"), "apples")
		if err != nil || got != "stored apples" {
			t.Fatalf("Put with token 5 = %q, %v; want \"stored apples\"", got, err)
		}
		if _, err := put(t, conn, ctx, fenceOf("jobs/nightly", 5, "L5"), "again"); err != nil {
			t.Fatalf("second Put under the same lease: %v, want accepted", err)
		}

		_, err = put(t, conn, ctx, fenceOf("jobs/nightly", 3, "L3"), "stale")
		info := wantCode(t, "stale Put", err, codes.Aborted, "stale_token")
		if md := info.GetMetadata(); md["highest"] != "5" || md["token"] != "3" || md["key"] != "/test.Inventory/Put" {
			t.Errorf("stale Put: ErrorInfo metadata %v, want highest 5, token 3, key /test.Inventory/Put", md)
		}
		if want := `stale token 3 for "/test.Inventory/Put", highest seen 5`; status.Convert(err).Message() != want {
			t.Errorf("stale Put: message %q, want %q", status.Convert(err).Message(), want)
		}
		var stale *fence.StaleTokenError
		if ferr := fencegrpc.FenceError(err); !errors.As(ferr, &stale) || stale.Highest != 5 || stale.Token != 3 || !errors.Is(ferr, fence.ErrStaleToken) {
			t.Fatalf("FenceError(%v) = %v, want a *fence.StaleTokenError with highest 5, token 3", err, ferr)
		}
		if status.Code(fencegrpc.FenceError(err)) != codes.Aborted {
			t.Errorf("FenceError lost the status: code %v", status.Code(fencegrpc.FenceError(err)))
		}

		_, err = put(t, conn, ctx, fenceOf("jobs/nightly", 5, "other"), "same token")
		info = wantCode(t, "equal token, other lease", err, codes.Aborted, "stale_token")
		if md := info.GetMetadata(); md["same_token"] != "true" || md["highest"] != "5" {
			t.Errorf("equal token: metadata %v, want same_token true, highest 5", md)
		}

		_, err = put(t, conn, ctx, fenceOf("other", 9, "L9"), "wrong lock")
		info = wantCode(t, "other lock", err, codes.FailedPrecondition, "wrong_lock")
		if md := info.GetMetadata(); md["lock"] != "jobs/nightly" || md["got"] != "other" {
			t.Errorf("wrong lock: metadata %v, want lock jobs/nightly, got other", md)
		}
		var ns *fence.NamespaceError
		if !errors.As(fencegrpc.FenceError(err), &ns) || ns.Want != "jobs/nightly" {
			t.Errorf("FenceError(%v) = %v, want a *fence.NamespaceError", err, fencegrpc.FenceError(err))
		}
		if n := svc.calls.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2: refused calls must not reach it", n)
		}
	})
}

// A guard that grants the locks it fences (the bolt store) refuses a token it
// never issued (P9): FailedPrecondition "unissued_token", which FenceError turns
// back into a *fence.UnissuedTokenError.
func TestUnary_UnissuedToken_FailedPrecondition(t *testing.T) {
	store := fencedtest.OpenBolt(t)
	fencedtest.Issue(t, store, "jobs/nightly", 1)
	info, err := store.Inspect(ctxFor(t), "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	svc := &inventory{}
	conn := startServer(t, store, svc, nil)
	_, err = put(t, conn, ctxFor(t), fenceOf("jobs/nightly", 999999, "L"), "typo")
	md := wantCode(t, "Put with a token never issued", err, codes.FailedPrecondition, "unissued_token").GetMetadata()
	if md["token"] != "999999" || md["last"] != info.LastToken.String() || md["lock"] != "jobs/nightly" {
		t.Errorf("unissued token: metadata %v, want token 999999, last %d, lock jobs/nightly", md, info.LastToken)
	}
	var un *fence.UnissuedTokenError
	if ferr := fencegrpc.FenceError(err); !errors.As(ferr, &un) || !errors.Is(ferr, fence.ErrUnissuedToken) || un.Token != 999999 || un.Last != info.LastToken {
		t.Fatalf("FenceError(%v) = %v, want a *fence.UnissuedTokenError for 999999, last %d", err, ferr, info.LastToken)
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

// Such a guard refuses a live lease's token sent without its lease (P9):
// FailedPrecondition "lease_required", which FenceError turns back into a
// *fence.LeaseRequiredError; the holder's own call, with its lease, goes through.
func TestUnary_LiveTokenWithoutLease_FailedPrecondition(t *testing.T) {
	store := fencedtest.OpenBolt(t)
	l, err := store.Acquire(ctxFor(t), "jobs/nightly", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	svc := &inventory{}
	conn := startServer(t, store, svc, nil)
	_, err = put(t, conn, ctxFor(t), fenceOf("jobs/nightly", l.Token(), ""), "bare")
	md := wantCode(t, "Put with a live token and no lease", err, codes.FailedPrecondition, "lease_required").GetMetadata()
	if md["token"] != l.Token().String() || md["lock"] != "jobs/nightly" {
		t.Errorf("lease required: metadata %v, want token %d, lock jobs/nightly", md, l.Token())
	}
	var lr *fence.LeaseRequiredError
	if ferr := fencegrpc.FenceError(err); !errors.As(ferr, &lr) || !errors.Is(ferr, fence.ErrLeaseRequired) || *lr != (fence.LeaseRequiredError{Lock: "jobs/nightly", Token: l.Token()}) {
		t.Fatalf("FenceError(%v) = %v, want a *fence.LeaseRequiredError for jobs/nightly#%d", err, ferr, l.Token())
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
	if _, err := put(t, conn, ctxFor(t), fenceOf("jobs/nightly", l.Token(), l.ID()), "mine"); err != nil {
		t.Fatalf("Put with the holder's fence = %v, want nil", err)
	}
}

func TestUnary_BadMetadataInvalidArgument(t *testing.T) {
	svc := &inventory{}
	conn := startServer(t, inmem.NewGuard(), svc, nil)
	for _, tc := range []struct {
		name  string
		md    []string
		field string
	}{
		{"none", nil, "fence-token"},
		{"no lock", []string{"fence-token", "3"}, "fence-lock"},
		{"no token", []string{"fence-lock", "inv"}, "fence-token"},
		{"token twice", []string{"fence-token", "3", "fence-token", "4", "fence-lock", "inv"}, "fence-token"},
		{"lock twice", []string{"fence-token", "3", "fence-lock", "a", "fence-lock", "a"}, "fence-lock"},
		{"token zero", []string{"fence-token", "0", "fence-lock", "inv"}, "fence-token"},
		{"token not a number", []string{"fence-token", "x", "fence-lock", "inv"}, "fence-token"},
		{"bad escape", []string{"fence-token", "3", "fence-lock", "in%zz"}, "fence-lock"},
		{"lease twice", []string{"fence-token", "3", "fence-lock", "inv", "fence-lease", "a", "fence-lease", "b"}, "fence-lease"},
	} {
		ctx := metadata.AppendToOutgoingContext(ctxFor(t), tc.md...)
		_, err := put(t, conn, ctx, nil, "x")
		info := wantCode(t, tc.name, err, codes.InvalidArgument, "invalid")
		if info.GetMetadata()["field"] != tc.field {
			t.Errorf("%s: field %q, want %q (%v)", tc.name, info.GetMetadata()["field"], tc.field, err)
		}
		var inv *fence.InvalidError
		if !errors.As(fencegrpc.FenceError(err), &inv) || inv.Field != tc.field {
			t.Errorf("%s: FenceError = %v, want an *InvalidError of field %q", tc.name, fencegrpc.FenceError(err), tc.field)
		}
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times for calls with bad metadata, want 0", n)
	}
}

func TestUnary_UnfencedMethodAndResourceOption(t *testing.T) {
	svc := &inventory{}
	opts := &fencegrpc.Options{
		Fenced: func(m string) bool { return m != "/test.Inventory/Get" },
		Resource: func(_ context.Context, _ string, req any) string {
			if v, ok := req.(*wrapperspb.StringValue); ok {
				return "sku:" + v.GetValue()
			}
			return "stream"
		},
	}
	conn := startServer(t, inmem.NewGuard(), svc, opts)
	ctx := ctxFor(t)
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, "/test.Inventory/Get", wrapperspb.String("a"), out); err != nil || out.GetValue() != "read" {
		t.Fatalf("unfenced Get without metadata = %q, %v; want \"read\"", out.GetValue(), err)
	}
	if _, err := put(t, conn, ctx, fenceOf("inv", 9, "L9"), "a"); err != nil {
		t.Fatalf("Put a with token 9: %v", err)
	}
	if _, err := put(t, conn, ctx, fenceOf("inv", 4, "L4"), "b"); err != nil {
		t.Fatalf("Put b with token 4: %v; want accepted (resources are fenced apart)", err)
	}
	_, err := put(t, conn, ctx, fenceOf("inv", 4, "L4"), "a")
	if info := wantCode(t, "Put a with token 4", err, codes.Aborted, "stale_token"); info.GetMetadata()["key"] != "sku:a" {
		t.Errorf("stale key %q, want sku:a", info.GetMetadata()["key"])
	}
}

func TestUnary_GuardUnavailable(t *testing.T) {
	store := fencedtest.OpenBolt(t)
	svc := &inventory{}
	conn := startServer(t, store, svc, nil)
	store.Close()
	_, err := put(t, conn, ctxFor(t), fenceOf("inv", 1, "L1"), "x")
	wantCode(t, "Put with the guard closed", err, codes.Unavailable, "unavailable")
	if !errors.Is(fencegrpc.FenceError(err), fence.ErrUnavailable) {
		t.Errorf("FenceError(%v) does not match fence.ErrUnavailable", err)
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

func TestStream_AdmittedOnceRefusedStale(t *testing.T) {
	fencedtest.EachGuard(t, func(t *testing.T, g fence.Guard) {
		fencedtest.Issue(t, g, "inv", 7)
		svc := &inventory{}
		conn := startServer(t, g, svc, nil)
		open := func(f *fence.Fence) (grpc.ClientStream, error) {
			ctx := ctxFor(t)
			if f != nil {
				ctx = fencegrpc.AppendToOutgoingContext(ctx, *f)
			}
			return conn.NewStream(ctx, syncDesc, "/test.Inventory/Sync")
		}
		cs, err := open(fenceOf("inv", 7, "L7"))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"a", "b"} {
			if err := cs.SendMsg(wrapperspb.String(v)); err != nil {
				t.Fatalf("send %s: %v", v, err)
			}
			out := new(wrapperspb.StringValue)
			if err := cs.RecvMsg(out); err != nil || out.GetValue() != "stored "+v {
				t.Fatalf("recv for %s = %q, %v", v, out.GetValue(), err)
			}
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
			t.Fatalf("end of an admitted stream: %v, want io.EOF", err)
		}

		for _, tc := range []struct {
			f      *fence.Fence
			code   codes.Code
			reason string
		}{
			{fenceOf("inv", 6, "L6"), codes.Aborted, "stale_token"},
			{nil, codes.InvalidArgument, "invalid"},
		} {
			cs, err := open(tc.f)
			if err == nil {
				err = cs.RecvMsg(new(wrapperspb.StringValue))
			}
			info := wantCode(t, "stream", err, tc.code, tc.reason)
			if tc.reason == "stale_token" && info.GetMetadata()["highest"] != "7" {
				t.Errorf("stale stream: highest %q, want 7", info.GetMetadata()["highest"])
			}
		}
		if n := svc.calls.Load(); n != 1 {
			t.Fatalf("stream handler ran %d times, want 1", n)
		}
	})
}

// TestUnary_ConcurrentWritersMonotonic: calls with distinct tokens from many
// goroutines; the handler stores in token order and refusals name a higher token.
func TestUnary_ConcurrentWritersMonotonic(t *testing.T) {
	fencedtest.EachGuard(t, func(t *testing.T, g fence.Guard) {
		const writers = 40
		fencedtest.Issue(t, g, "inv", writers)
		svc := &inventory{delay: 2 * time.Millisecond}
		conn := startServer(t, g, svc, nil)
		accepted := fencedtest.WriteAll(t, fencedtest.Shuffled(writers, 17), func(tok fence.Token) (bool, fence.Token, error) {
			_, err := put(t, conn, ctxFor(t), fenceOf("inv", tok, "L"+tok.String()), "x")
			var stale *fence.StaleTokenError
			if errors.As(fencegrpc.FenceError(err), &stale) {
				return false, stale.Highest, nil
			}
			return err == nil, 0, err
		})
		fencedtest.WantTokenOrder(t, svc.stored(), accepted, writers)
	})
}

func TestAppendToOutgoingContext_RoundTrip(t *testing.T) {
	f := fence.Fence{Name: "a/b c", Token: 12, LeaseID: "L12"}
	out := fencegrpc.AppendToOutgoingContext(context.Background(), f)
	md, _ := metadata.FromOutgoingContext(out)
	if got := md.Get("fence-lock"); len(got) != 1 || got[0] != "a%2Fb%20c" {
		t.Fatalf("fence-lock = %q, want [a%%2Fb%%20c]", got)
	}
	in := metadata.NewIncomingContext(context.Background(), md)
	back, err := fencegrpc.FenceFromIncomingContext(in)
	if err != nil || back != f {
		t.Fatalf("FenceFromIncomingContext = %+v, %v; want %+v", back, err, f)
	}
}
