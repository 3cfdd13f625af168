package fencehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp/ui"
	"github.com/fencelock/fence/internal/service"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Defaults of Config.
const (
	DefaultTTL           = service.DefaultTTL           // TTL of an acquire or renew without ttl_ms
	DefaultMaxWait       = service.DefaultMaxWait       // longest single long poll or blocking query
	DefaultBlockingWait  = service.DefaultBlockingWait  // wait of a blocking query without wait_ms (at most MaxWait)
	DefaultMaxBodyBytes  = 64 << 10                     // largest JSON request body
	DefaultMaxValueBytes = service.DefaultMaxValueBytes // largest KV value
	maxListLimit         = service.MaxListLimit
)

// Config configures a Server. Only Locker is required.
type Config struct {
	// Locker grants the leases. If it is also a fence.Inspector, GET /v1/locks works,
	// a fence.Watcher, blocking queries (GET /v1/locks/{name}?index=N), a
	// fence.Healer, POST .../heal, a fence.Revoker, POST .../revoke (501 otherwise).
	Locker fence.Locker
	// KV is the fenced key-value store behind /v1/kv; if it is also a fence.Guard,
	// POST /v1/fences works. Nil answers those routes with 501.
	KV fence.KV
	// Logger receives structured logs; nil discards them. Lease ids are never logged.
	Logger *slog.Logger
	// AuthTokens, if not empty, are the bearer tokens accepted on every route but
	// /healthz and the dashboard's static files under /ui, with every right; any
	// other request is answered 401.
	AuthTokens [][]byte
	// Tokens are scoped bearer tokens, accepted as AuthTokens are but only for
	// their rights on their names (see AuthToken and ParseAuthTokens); a request
	// one does not cover is answered 403 "forbidden" saying what was refused.
	// With neither AuthTokens nor Tokens the API needs no token.
	Tokens []AuthToken
	// MaxBodyBytes bounds JSON request bodies (413 beyond); 0 means 64 KiB.
	MaxBodyBytes int64
	// MaxValueBytes bounds KV values (413 beyond); 0 means 1 MiB.
	MaxValueBytes int64
	// MaxWait caps one long poll (a waiting acquire) and one blocking query (GET
	// /v1/locks/{name}?index=N); a longer wait_ms is cut to it (the Client polls
	// again). 0 means 60s.
	MaxWait time.Duration
	// MaxWaiters caps the requests that wait at once: waiting acquires (long
	// polls) and blocking queries. One more is answered 503 "unavailable" at once,
	// with Retry-After, instead of waiting. An acquire granted at once is not
	// counted; every blocking query is, even one whose index has already moved.
	// 0 means no cap beyond the connections the process can open.
	MaxWaiters int
	// DefaultTTL is the TTL of an acquire or renew without ttl_ms; 0 means 30s.
	DefaultTTL time.Duration
	// Registry receives the server's metrics and is served on /metrics; nil means a
	// new registry with the Go runtime and process collectors.
	Registry *prometheus.Registry
	// Cluster, if set, is the cluster this server is a node of (fence serve in
	// cluster mode): it serves GET /v1/cluster, POST /v1/cluster/members, DELETE
	// /v1/cluster/members/{name} and GET /v1/cluster/snapshot (see Cluster). Nil
	// answers those routes 404 "not_found".
	Cluster Cluster
	// Ready, if set, says whether this server can grant now, for GET /readyz:
	// it returns nil when it can, or an error whose message says why not to a
	// person ("the cluster has no leader"), which /readyz answers 503
	// "unavailable" as "not ready: MESSAGE". It is called with a context that
	// ends after ReadyTimeout and must return by then. Nil means ready unless
	// the server is draining (Drain), where /readyz answers 503 whatever Ready
	// says, as /healthz does.
	Ready func(ctx context.Context) error
}

// ReadyTimeout bounds one call of Config.Ready: /readyz answers 503 if the
// check has not answered by then.
const ReadyTimeout = 2 * time.Second

// Server serves the HTTP API v1 over a Locker and a KV: the HTTP adapter (routes,
// JSON, headers, statuses) of the lock service (package service), which holds
// its rules. It keeps no lock state of its own (only the queues of the
// acquires waiting through it and counters for metrics), so several servers
// can share one store.
type Server struct {
	cfg     Config
	svc     *service.Service
	log     *slog.Logger
	reg     *prometheus.Registry
	m       *metrics
	handler http.Handler
}

// NewServer returns a Server for cfg. It returns an error matching fence.ErrInvalid
// if cfg.Locker is nil, a limit is negative, or an auth token is empty.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Locker == nil {
		return nil, fmt.Errorf("fencehttp: new server: %w: Config.Locker is nil", fence.ErrInvalid)
	}
	// The service checks and defaults the limits it shares with this adapter
	// (MaxValueBytes, MaxWait, DefaultTTL, MaxWaiters); the body limit is HTTP's.
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("fencehttp: new server: %w: negative limit", fence.ErrInvalid)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	tokens := make([]AuthToken, 0, len(cfg.AuthTokens)+len(cfg.Tokens))
	for _, t := range cfg.AuthTokens {
		tokens = append(tokens, AuthToken{Secret: t, Rights: RightsAll})
	}
	tokens = append(tokens, cfg.Tokens...)
	svc, err := service.New(service.Config{Locker: cfg.Locker, KV: cfg.KV, Logger: cfg.Logger, Tokens: tokens,
		MaxValueBytes: cfg.MaxValueBytes, MaxWait: cfg.MaxWait, MaxWaiters: cfg.MaxWaiters,
		DefaultTTL: cfg.DefaultTTL, Registry: cfg.Registry})
	if err != nil {
		return nil, fmt.Errorf("fencehttp: new server: %w", err)
	}
	cfg.MaxValueBytes = svc.MaxValueBytes()
	s := &Server{cfg: cfg, svc: svc, log: cfg.Logger, reg: svc.Registry()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.m = newMetrics(s.reg)
	s.handler = s.routes()
	return s, nil
}

// Handler returns the http.Handler of the API.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the registry served on /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Drain prepares a graceful shutdown: /healthz answers 503 (so load balancers stop
// sending traffic) and long polls in progress end with 503 "unavailable" instead of
// holding http.Server.Shutdown up for their whole wait. Call it before Shutdown.
// It drains the server's service, over every wire that shares it.
func (s *Server) Drain() { s.svc.Drain() }

// Service returns the lock service the server is the HTTP adapter of: another
// wire of the same process serves it too, so that its waiters share the
// server's queues.
func (s *Server) Service() *service.Service { return s.svc }

func (s *Server) routes() http.Handler {
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
	dashboard := ui.Handler()
	// Routing is by the escaped path, by hand rather than with a ServeMux: a
	// ServeMux cleans paths and answers a redirect to the cleaned one, so that
	// /v1/locks/a/../b/acquire would become a 307 to the lock "b". parseRoute
	// reads the route, which the scope check reads with the same function; a
	// method the route does not serve is 405 before any handler sees it.
	api := func(w http.ResponseWriter, r *http.Request, rt route) {
		switch rt.kind {
		case routeList:
			s.handleLocksRoot(w, r)
		case routeLock, routeLockAction:
			s.handleLocks(w, r, rt)
		case routeKV:
			s.handleKV(w, r)
		case routeFences:
			s.handleFences(w, r)
		case routeMetrics:
			metrics.ServeHTTP(w, r)
		case routeOpenAPI:
			s.handleOpenAPI(w, r)
		case routeCluster, routeClusterMembers, routeClusterMember, routeClusterSnapshot:
			s.handleCluster(w, r, rt)
		}
	}
	return s.recoverPanics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkPath(requestPath(r)); err != nil {
			s.fail(w, r, "", "", err)
			return
		}
		rt := requestRoute(r)
		hint := ""
		if rt.kind.cluster() && s.cfg.Cluster == nil {
			// No such route outside cluster mode, whatever the method.
			rt, hint = route{kind: routeNone}, " (this server is not in cluster mode: fence serve --node)"
		}
		switch rt.kind {
		case routeNone:
			if !s.authenticated(w, r, rt) {
				return
			}
			s.fail(w, r, "", "", because(errNoRoute, "no such route: %s %s%s", r.Method, r.URL.EscapedPath(), hint))
			return
		case routeRoot, routeHealth, routeReady, routeUI:
			// Without auth: /healthz and /readyz are for load balancers and
			// orchestrators, and a browser cannot send
			// a bearer token to load a page; the redirect and the dashboard's files
			// hold no secrets, and its API calls carry the token.
		default:
			if !s.authenticated(w, r, rt) {
				return
			}
		}
		if !rt.served {
			s.notServed(w, r, rt)
			return
		}
		switch rt.kind {
		case routeRoot:
			redirectToUI(w)
		case routeHealth:
			s.handleHealth(w, r)
		case routeReady:
			s.handleReady(w, r)
		case routeUI:
			dashboard.ServeHTTP(w, r)
		default:
			api(w, r, rt)
		}
	}))
}

// requestPath is the path of r as the client sent it: the request target up to the
// query when it is in origin form (a target "//v1/locks/x" would otherwise be read
// as the host "v1" and the path "/locks/x"), else the URL's escaped path.
func requestPath(r *http.Request) string {
	if t := r.RequestURI; strings.HasPrefix(t, "/") {
		p, _, _ := strings.Cut(t, "?")
		return p
	}
	return r.URL.EscapedPath()
}

// checkPath refuses an escaped path with an empty segment ("//") or a dot segment
// ("." or ".."), which path cleaning, by a proxy or a redirect-following client,
// would turn into another lock or key: /v1/locks/a/../b/acquire is not the lock
// "b", and not the lock "a/../b" either (send that name as one escaped segment,
// a%2F..%2Fb; see EscapeName). A trailing slash is not an empty segment here
// (GET /v1/locks/ is the listing). Escaped dots are judged where the name is parsed
// (see unescapeName).
func checkPath(escaped string) error {
	// Segment by segment without splitting: every request passes here.
	for rest := strings.TrimPrefix(escaped, "/"); ; {
		seg, after, more := strings.Cut(rest, "/")
		rest = after
		var reason string
		switch {
		case seg == "" && more:
			reason = "has an empty segment (//)"
		case seg == "." || seg == "..":
			reason = fmt.Sprintf("has a %q segment", seg)
		case more:
			continue
		default:
			return nil
		}
		return &fence.InvalidError{Field: "path", Value: escaped,
			Reason: reason + "; send a name or key as one escaped segment ('/' as %2F, '.' as %2E)"}
	}
}

// recoverPanics answers 500 JSON if a handler (or the store under it) panics.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic serving request", "method", r.Method, "path", r.URL.EscapedPath(), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				s.writeJSON(w, http.StatusInternalServerError, errorResponse{Error: userMessage("", "", errInternalError), Code: "internal"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticated requires a bearer token when tokens are configured, and one
// whose scope covers the request's route rt (see permit). It answers 401 or 403
// and returns false, or returns true.
func (s *Server) authenticated(w http.ResponseWriter, r *http.Request, rt route) bool {
	if !s.svc.AuthRequired() {
		return true
	}
	tok := s.svc.Authenticate(bearer(r.Header.Get("Authorization")))
	if tok == nil {
		s.log.Warn("unauthorized request", "method", r.Method, "route", rt.label(), "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="fence"`)
		s.fail(w, r, "", "", because(service.ErrUnauthorized, "unauthorized: missing or wrong bearer token"))
		return false
	}
	if err := permitRoute(tok, r, rt); err != nil {
		s.log.Warn("forbidden request", "method", r.Method, "route", rt.label(), "remote", r.RemoteAddr, "rights", tok.Rights.String())
		s.fail(w, r, "", "", err)
		return false
	}
	return true
}

// bearer returns the token of an Authorization header, "" if it has none: a
// secret no token has, as service.Authenticate refuses it.
func bearer(header string) string {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// handleHealth serves GET and HEAD /healthz.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.svc.Draining() {
		s.fail(w, r, "", "", service.ErrShuttingDown)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReady serves GET and HEAD /readyz: 200 {"status":"ready"} while the
// server can grant (Config.Ready), 503 "unavailable" saying why not otherwise
// or while it drains. A refusal is logged at debug level only: a load balancer
// asks a node cut off from the majority every few seconds, and the node's own
// logs say why it is cut off.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	err := s.ready(r.Context())
	if err == nil {
		s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
		s.writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	status, body := errorBody("", "", err)
	s.m.requests.WithLabelValues(routeOf(r), strconv.Itoa(status)).Inc()
	s.log.Debug("not ready", "method", r.Method, "route", routeOf(r), "status", status, "err", err)
	s.writeJSON(w, status, body)
}

// errReadyTimeout is the cause of a readiness check that ran out of time.
var errReadyTimeout = errors.New("fencehttp: readiness check timed out")

// ready returns nil if the server can grant now, else an error matching
// fence.ErrUnavailable whose fact says why not.
func (s *Server) ready(ctx context.Context) error {
	if s.svc.Draining() {
		return service.ErrShuttingDown
	}
	if s.cfg.Ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, ReadyTimeout, errReadyTimeout)
	defer cancel()
	err := s.cfg.Ready(ctx)
	switch {
	case err == nil:
		return nil
	case context.Cause(ctx) == errReadyTimeout:
		return because(fence.ErrUnavailable, "not ready: the readiness check did not answer within %v", ReadyTimeout)
	}
	return because(fence.ErrUnavailable, "not ready: %s", err.Error())
}

// handleLocksRoot serves GET /v1/locks?prefix=P&limit=N.
func (s *Server) handleLocksRoot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	s.list(w, r)
}

// handleLocks serves /v1/locks/{name} and /v1/locks/{name}/{action}, the routes
// rt names (see parseRoute), with the method the route serves: GET or HEAD of a
// lock's state, POST of an action. It reads the name from the escaped path so
// that names with an escaped '/' round-trip.
func (s *Server) handleLocks(w http.ResponseWriter, r *http.Request, rt route) {
	if rt.kind == routeLock {
		name, err := rt.name()
		if err != nil {
			s.fail(w, r, "inspect", "", err)
			return
		}
		s.inspect(w, r, name)
		return
	}
	var handle func(http.ResponseWriter, *http.Request, string)
	switch rt.action {
	case "acquire":
		handle = s.acquire
	case "renew":
		handle = s.renew
	case "release":
		handle = s.release
	case "revoke":
		handle = s.revoke
	case "heal":
		handle = s.heal
	}
	name, err := rt.name()
	if err != nil {
		s.fail(w, r, rt.action, "", err)
		return
	}
	handle(w, r, name)
}

// unescapeName decodes the escaped name or key part of a path and validates it. A
// name sent with unescaped slashes (jobs/nightly) must not have a dot segment, not
// even an escaped one: RFC 3986 makes %2E the same as '.', so a normalising proxy
// may resolve a/%2E%2E/b to b. A whole name "." or ".." (one segment, as EscapeName
// sends it) cannot be resolved into another lock or key, and is accepted.
func unescapeName(field, escaped string) (string, error) {
	name, err := url.PathUnescape(escaped)
	if err != nil {
		return "", &fence.InvalidError{Field: field, Value: escaped, Reason: "is not a valid escaped path segment"}
	}
	if strings.IndexByte(escaped, '/') >= 0 {
		for _, seg := range strings.Split(escaped, "/") {
			if d, err := url.PathUnescape(seg); err == nil && (d == "." || d == "..") {
				return "", &fence.InvalidError{Field: field, Value: escaped,
					Reason: fmt.Sprintf("has a %q segment; send it as one escaped segment ('/' as %%2F, '.' as %%2E)", d)}
			}
		}
	}
	if field == "key" {
		err = fence.ValidateKey(name)
	} else {
		err = fence.ValidateName(name)
	}
	if err != nil {
		return "", err
	}
	return name, nil
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request, name string) {
	var req renewRequest
	if !s.readBody(w, r, "renew", name, &req, func() error { return nil }) {
		return
	}
	ttl, err := s.svc.Renew(r.Context(), name, service.RenewRequest(req))
	if err != nil {
		s.fail(w, r, "renew", name, err)
		return
	}
	s.ok(w, r, Renewed{Name: name, TTLms: ttl.Milliseconds()})
}

// release serves POST /v1/locks/{name}/release: of a lease, or the abandon of
// an acquire by its request id.
func (s *Server) release(w http.ResponseWriter, r *http.Request, name string) {
	var req releaseRequest
	if !s.readBody(w, r, "release", name, &req, func() error { return nil }) {
		return
	}
	if err := s.svc.Release(r.Context(), name, service.ReleaseRequest(req)); err != nil {
		s.fail(w, r, "release", name, err)
		return
	}
	s.ok(w, r, Released{Name: name, Released: true})
}

// revoke serves POST /v1/locks/{name}/revoke {}: fence.Revoker over HTTP, the
// operator's safe force-release. It answers 404 "not_held" when no unexpired
// lease holds name.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request, name string) {
	const op = "revoke"
	var req revokeRequest
	if !s.readBody(w, r, op, name, &req, func() error { return nil }) {
		return
	}
	if err := s.svc.Revoke(r.Context(), name); err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	s.ok(w, r, Revoked{Name: name, Revoked: true})
}

// heal serves POST /v1/locks/{name}/heal {"seen":N}: fence.Healer over HTTP (P4).
func (s *Server) heal(w http.ResponseWriter, r *http.Request, name string) {
	var req healRequest
	if !s.readBody(w, r, "heal", name, &req, func() error { return nil }) {
		return
	}
	if err := s.svc.Heal(r.Context(), name, req.Seen); err != nil {
		s.fail(w, r, "heal", name, err)
		return
	}
	s.ok(w, r, healRequest{Seen: req.Seen})
}

// inspect serves GET /v1/locks/{name}[?index=N&wait_ms=W]: the lock's state,
// with its change index in the Fence-Index header. With index it is a blocking
// query (see service.Service.Inspect).
func (s *Server) inspect(w http.ResponseWriter, r *http.Request, name string) {
	v := r.URL.Query()
	op := "inspect"
	if v.Has("index") || v.Has("wait_ms") {
		op = "watch"
	}
	q, err := blockingQueryOf(v)
	if err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	info, err := s.svc.Inspect(r.Context(), name, q)
	if err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	w.Header().Set(HeaderIndex, strconv.FormatUint(info.Index(), 10))
	s.ok(w, r, LockInfoOf(info))
}

// list serves GET /v1/locks?prefix=P&limit=N&all=B: the held locks whose names
// start with P, at most N (the store's default if 0), in name order; with
// all=true every name the store knows. A bad prefix, limit or all is 400 naming
// the parameter.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	infos, err := s.svc.List(r.Context(), service.ListRequest{Prefix: prefix, Limit: q.Get("limit"), All: q.Get("all")})
	if err != nil {
		name := prefix
		var inv *fence.InvalidError
		if errors.As(err, &inv) && (inv.Field == "prefix" || inv.Field == "limit" || inv.Field == "all") || errors.Is(err, service.ErrNotImplemented) {
			name = "" // the service refused the listing before the store saw it
		}
		s.fail(w, r, "list", name, err)
		return
	}
	s.ok(w, r, LockListOf(infos))
}

// handleKV serves GET, PUT and DELETE /v1/kv/{key}.
func (s *Server) handleKV(w http.ResponseWriter, r *http.Request) {
	op := "get"
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPut:
		op = "put"
	case http.MethodDelete:
		op = "delete"
	default:
		s.methodNotAllowed(w, r, "GET, HEAD, PUT, DELETE")
		return
	}
	key, err := unescapeName("key", strings.TrimPrefix(r.URL.EscapedPath(), "/v1/kv/"))
	if err != nil {
		s.fail(w, r, op, "", err)
		return
	}
	if err := s.svc.KVSupport(op); err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	switch r.Method {
	case http.MethodPut:
		s.put(w, r, key)
		return
	case http.MethodDelete:
		s.del(w, r, key)
		return
	}
	item, err := s.svc.KVGet(r.Context(), key)
	if err != nil && item.Fence.Name == "" {
		s.fail(w, r, op, key, err)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderToken, item.Fence.Token.String())
	h.Set(HeaderLock, url.PathEscape(item.Fence.Name))
	if err != nil {
		// Fenced only, or deleted: no value, but the fence a writer must pass.
		s.fail(w, r, op, key, err)
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(item.Value)))
	w.WriteHeader(http.StatusOK)
	s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
	if r.Method != http.MethodHead {
		_, _ = w.Write(item.Value)
	}
}

// fenceFromHeaders reads the fence of a write: Fence-Token and Fence-Lock, each
// exactly once, and Fence-Lease at most once. Fence-Lock is required even for a key
// that a lock already fences: it is what lets the store refuse a token of another
// lock's counter instead of comparing it as if it were its own lock's.
func fenceFromHeaders(r *http.Request) (fence.Fence, error) {
	var f fence.Fence
	h := r.Header
	vs := h.Values(HeaderToken)
	if len(vs) != 1 {
		return f, missingOrRepeated(HeaderToken, vs)
	}
	tok, err := fence.ParseToken(strings.TrimSpace(vs[0]))
	if err != nil {
		return f, asField(HeaderToken, err)
	}
	f.Token = tok
	vs = h.Values(HeaderLock)
	if len(vs) == 0 {
		return f, &fence.InvalidError{Field: HeaderLock, Reason: "is required: name the lock whose counter issued " + HeaderToken}
	}
	if len(vs) != 1 {
		return f, missingOrRepeated(HeaderLock, vs)
	}
	// Header values are bytes; a name with non-ASCII or odd characters is sent
	// URL-escaped (as a path segment), which plain names are unchanged by.
	name, err := url.PathUnescape(strings.TrimSpace(vs[0]))
	if err != nil {
		return f, &fence.InvalidError{Field: HeaderLock, Value: vs[0], Reason: "is not a valid escaped lock name"}
	}
	if err := fence.ValidateName(name); err != nil {
		return f, asField(HeaderLock, err)
	}
	f.Name = name
	switch vs := h.Values(HeaderLease); {
	case len(vs) > 1:
		return f, &fence.InvalidError{Field: HeaderLease, Reason: "must be given at most once"}
	case len(vs) == 1:
		f.LeaseID = strings.TrimSpace(vs[0])
		if err := fence.ValidateLeaseID(f.LeaseID); err != nil {
			return f, asField(HeaderLease, err)
		}
	}
	return f, nil
}

// attemptFromHeader returns the request's context naming its write by the
// Fence-Attempt header (fence.WithWriteAttempt), or the context as it is without
// the header; an *fence.InvalidError naming the header if it is repeated or
// malformed.
func attemptFromHeader(r *http.Request) (context.Context, error) {
	vs := r.Header.Values(HeaderAttempt)
	switch {
	case len(vs) == 0:
		return r.Context(), nil
	case len(vs) > 1:
		return nil, &fence.InvalidError{Field: HeaderAttempt, Reason: "must be given at most once"}
	}
	id := strings.TrimSpace(vs[0])
	if err := fence.ValidateAttemptID(id); err != nil {
		return nil, asField(HeaderAttempt, err)
	}
	return fence.WithWriteAttempt(r.Context(), id), nil
}

// missingOrRepeated is the error of a header that must be given exactly once.
func missingOrRepeated(header string, vs []string) error {
	if len(vs) == 0 {
		return &fence.InvalidError{Field: header, Reason: "is required"}
	}
	return &fence.InvalidError{Field: header, Value: strings.Join(vs, ","), Reason: "must be given exactly once"}
}

// asField renames the field of an InvalidError to the header it came from, so the
// message names what the user sent.
func asField(field string, err error) error {
	var inv *fence.InvalidError
	if errors.As(err, &inv) {
		return &fence.InvalidError{Field: field, Value: inv.Value, Reason: inv.Reason}
	}
	return err
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, key string) {
	const op = "put"
	if r.ContentLength > s.cfg.MaxValueBytes {
		s.fail(w, r, op, key, because(errTooLarge, "value of %d bytes is over the limit of %d", r.ContentLength, s.cfg.MaxValueBytes))
		return
	}
	f, err := fenceFromHeaders(r)
	if err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	ctx, err := attemptFromHeader(r)
	if err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxValueBytes))
	if err != nil {
		s.fail(w, r, op, key, bodyError(err, "value", s.cfg.MaxValueBytes))
		return
	}
	if err := s.svc.KVPut(ctx, key, value, f); err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	s.ok(w, r, kvResponse{Key: key, Lock: f.Name, Token: f.Token})
}

// del serves DELETE /v1/kv/{key}: fence.KV.Delete, fenced as PUT is, or with
// ?purge=true and no fence headers fence.Purger.Purge.
func (s *Server) del(w http.ResponseWriter, r *http.Request, key string) {
	purge, err := purgeParam(r)
	if err != nil {
		s.fail(w, r, "delete", key, err)
		return
	}
	if purge {
		s.purge(w, r, key)
		return
	}
	const op = "delete"
	f, err := fenceFromHeaders(r)
	if err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	ctx, err := attemptFromHeader(r)
	if err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	if err := s.svc.KVDelete(ctx, key, f); err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	s.ok(w, r, kvResponse{Key: key, Lock: f.Name, Token: f.Token})
}

// purgeParam reads the purge query parameter of a DELETE: absent or "false" is
// a fenced delete, "true" a purge; anything else is invalid.
func purgeParam(r *http.Request) (bool, error) {
	vs, ok := r.URL.Query()["purge"]
	if !ok {
		return false, nil
	}
	if len(vs) == 1 {
		switch vs[0] {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, &fence.InvalidError{Field: "purge", Value: strings.Join(vs, ","), Reason: "must be given once, as true or false"}
}

// purge serves DELETE /v1/kv/{key}?purge=true: the key's value and fence go.
// A purge is not fenced: fence headers are refused, so that a writer who meant
// a fenced delete never purges by mistake.
func (s *Server) purge(w http.ResponseWriter, r *http.Request, key string) {
	const op = "purge"
	for _, h := range []string{HeaderToken, HeaderLock, HeaderLease} {
		if len(r.Header.Values(h)) > 0 {
			s.fail(w, r, op, key, &fence.InvalidError{Field: h, Reason: "must not be given with purge=true: a purge removes the fence, it is not fenced"})
			return
		}
	}
	if err := s.svc.Purge(r.Context(), key); err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	s.ok(w, r, purgeResponse{Key: key, Purged: true})
}

// handleFences serves POST /v1/fences/{key}: fence.Guard.Fence over HTTP.
func (s *Server) handleFences(w http.ResponseWriter, r *http.Request) {
	const op = "fence"
	key, err := unescapeName("key", strings.TrimPrefix(r.URL.EscapedPath(), "/v1/fences/"))
	if err != nil {
		s.fail(w, r, op, "", err)
		return
	}
	if err := s.svc.KVSupport(op); err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	f, err := fenceFromHeaders(r)
	if err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	if err := s.svc.Fence(r.Context(), key, f); err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	s.ok(w, r, kvResponse{Key: key, Lock: f.Name, Token: f.Token})
}

// readBody reads the JSON body of op on name (see readJSON), decodes it into v
// unless it is empty, and checks it with valid. It answers the first error and
// returns false, or returns true.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, op, name string, v any, valid func() error) bool {
	data, err := s.readJSON(w, r)
	if err == nil && len(bytes.TrimSpace(data)) > 0 {
		err = decodeStrict(data, v)
	}
	if err == nil {
		err = valid()
	}
	if err != nil {
		s.fail(w, r, op, name, err)
		return false
	}
	return true
}

// readJSON reads a JSON body of at most MaxBodyBytes. Its errors say what is
// wrong in terms of the API, never echoing the body (which may hold a lease id).
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if n := r.ContentLength; n > s.cfg.MaxBodyBytes {
		return nil, because(errTooLarge, "body of %d bytes is over the limit of %d", n, s.cfg.MaxBodyBytes)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return nil, bodyError(err, "body", s.cfg.MaxBodyBytes)
	}
	return data, nil
}

// decodeStrict decodes data strictly into v: one object, no unknown fields,
// nothing after it. Its errors say what is wrong in terms of the API, never
// echoing the body.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &fence.InvalidError{Field: "body", Reason: jsonReason(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &fence.InvalidError{Field: "body", Reason: "has data after the JSON object"}
	}
	return nil
}

// jsonReason says what is wrong with a JSON body in the API's terms.
func jsonReason(err error) string {
	var (
		typ *json.UnmarshalTypeError
		syn *json.SyntaxError
	)
	switch {
	case errors.As(err, &typ) && typ.Field != "":
		want := "a string"
		switch typ.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = "an integer"
		case reflect.Bool:
			want = "true or false"
		}
		return fmt.Sprintf("field %q must be %s, got %s", typ.Field, want, typ.Value)
	case errors.As(err, &typ):
		return "must be a JSON object, got " + typ.Value
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
		return "is not valid JSON"
	}
	// Unknown fields: json: unknown field "ttl".
	return strings.TrimPrefix(err.Error(), "json: ")
}

// bodyError is the error of reading a request body (what names "body" or "value").
func bodyError(err error, what string, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return because(errTooLarge, "%s over the limit of %d bytes", what, limit)
	}
	return because(fence.ErrUnavailable, "reading the request %s failed", what)
}

// methodNotAllowed answers 405 with allow as the Allow header: a handler's own
// check of its method, behind the router's (see allowed), which answers first.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	s.fail(w, r, "", "", because(errMethod, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.EscapedPath(), allow))
}

func (s *Server) ok(w http.ResponseWriter, r *http.Request, v any) {
	s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
	s.writeJSON(w, http.StatusOK, v)
}

// fail answers err, which op met on name (see errorBody), with the status and code
// of statusOf (Retry-After with a refusal of service.ErrBusy) and the user's message of userMessage. The log keeps err itself.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, op, name string, err error) {
	status, body := errorBody(op, name, err)
	if errors.Is(err, service.ErrBusy) {
		w.Header().Set("Retry-After", "1")
	}
	s.m.requests.WithLabelValues(routeOf(r), strconv.Itoa(status)).Inc()
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "route", routeOf(r), "status", status, "err", err)
	} else if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Debug("request refused", "method", r.Method, "route", routeOf(r), "status", status, "code", body.Code)
	}
	s.writeJSON(w, status, body)
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// writeJSON answers v as JSON with status: the server's answers and the resource
// middleware's refusals alike.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil { // only plain structs are marshalled; this is a bug
		status, data = http.StatusInternalServerError, []byte(`{"error":"internal error","code":"internal"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// routeOf names the route of r for metrics and logs, without names or keys.
func routeOf(r *http.Request) string { return requestRoute(r).label() }
