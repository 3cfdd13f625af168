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
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp/ui"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Defaults of Config.
const (
	DefaultTTL           = 30 * time.Second // TTL of an acquire or renew without ttl_ms
	DefaultMaxWait       = 60 * time.Second // longest single long poll or blocking query
	DefaultBlockingWait  = 30 * time.Second // wait of a blocking query without wait_ms (at most MaxWait)
	DefaultMaxBodyBytes  = 64 << 10         // largest JSON request body
	DefaultMaxValueBytes = 1 << 20          // largest KV value
	maxListLimit         = 10000
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
}

// Server serves the HTTP API v1 over a Locker and a KV. It keeps no lock state of its
// own (only counters for metrics), so several servers can share one store.
type Server struct {
	cfg     Config
	log     *slog.Logger
	tokens  scopes
	reg     *prometheus.Registry
	m       *metrics
	held    *heldSet
	handler http.Handler

	waiting atomic.Int64 // requests waiting now, against MaxWaiters
	parked  parking      // waits out of net/http (park.go)

	drainOnce sync.Once
	drainCtx  context.Context
	drain     context.CancelFunc
}

// NewServer returns a Server for cfg. It returns an error matching fence.ErrInvalid
// if cfg.Locker is nil, a limit is negative, or an auth token is empty.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Locker == nil {
		return nil, fmt.Errorf("fencehttp: new server: %w: Config.Locker is nil", fence.ErrInvalid)
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxValueBytes < 0 || cfg.MaxWait < 0 || cfg.DefaultTTL < 0 || cfg.MaxWaiters < 0 {
		return nil, fmt.Errorf("fencehttp: new server: %w: negative limit", fence.ErrInvalid)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxValueBytes == 0 {
		cfg.MaxValueBytes = DefaultMaxValueBytes
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = DefaultTTL
	}
	if err := driver.ValidateTTL(cfg.DefaultTTL); err != nil {
		return nil, fmt.Errorf("fencehttp: new server: default TTL: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, held: newHeldSet(cfg.Locker)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, t := range cfg.AuthTokens {
		if err := s.tokens.add(AuthToken{Secret: t, Rights: RightsAll}); err != nil {
			return nil, fmt.Errorf("fencehttp: new server: %w", err)
		}
	}
	for _, t := range cfg.Tokens {
		if err := s.tokens.add(t); err != nil {
			return nil, fmt.Errorf("fencehttp: new server: %w", err)
		}
	}
	if s.reg == nil {
		s.reg = newRegistry()
	}
	s.m = newMetrics(s.reg, s.held)
	s.drainCtx, s.drain = context.WithCancel(context.Background())
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
func (s *Server) Drain() { s.drainOnce.Do(s.drain) }

func (s *Server) routes() http.Handler {
	metrics := s.getOnly(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	// Routing is by prefix of the escaped path, by hand rather than with a ServeMux:
	// a ServeMux cleans paths and answers a redirect to the cleaned one, so that
	// /v1/locks/a/../b/acquire would become a 307 to the lock "b".
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.EscapedPath(); {
		case p == "/v1/locks":
			s.handleLocksRoot(w, r)
		case strings.HasPrefix(p, "/v1/locks/"):
			s.handleLocks(w, r)
		case strings.HasPrefix(p, "/v1/kv/"):
			s.handleKV(w, r)
		case strings.HasPrefix(p, "/v1/fences/"):
			s.handleFences(w, r)
		case p == "/metrics":
			metrics.ServeHTTP(w, r)
		case p == "/v1/openapi.json":
			s.handleOpenAPI(w, r)
		case p == "/v1/batch":
			s.handleBatch(w, r)
		default:
			s.fail(w, r, "", "", because(errNoRoute, "no such route: %s %s", r.Method, p))
		}
	})
	authed := s.authenticate(api)
	health := http.HandlerFunc(s.handleHealth)
	dashboard := ui.Handler()
	return s.recoverPanics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkPath(requestPath(r)); err != nil {
			s.fail(w, r, "", "", err)
			return
		}
		if r.URL.Path == "/healthz" {
			health.ServeHTTP(w, r)
			return
		}
		if p := r.URL.Path; p == ui.Prefix || strings.HasPrefix(p, ui.Prefix+"/") {
			// Without auth: a browser cannot send a bearer token to load a page, and the
			// dashboard's files hold no secrets; its API calls carry the token.
			dashboard.ServeHTTP(w, r)
			return
		}
		authed.ServeHTTP(w, r)
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

// authenticate requires a bearer token when tokens are configured, and one whose
// scope covers the request.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if len(s.tokens.toks) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := s.tokens.find(r.Header.Get("Authorization"))
		if tok == nil {
			s.log.Warn("unauthorized request", "method", r.Method, "route", routeOf(r), "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="fence"`)
			s.fail(w, r, "", "", because(ErrUnauthorized, "unauthorized: missing or wrong bearer token"))
			return
		}
		if err := permit(tok, r); err != nil {
			s.log.Warn("forbidden request", "method", r.Method, "route", routeOf(r), "remote", r.RemoteAddr, "rights", tok.Rights.String())
			s.fail(w, r, "", "", err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if s.drainCtx.Err() != nil {
		s.fail(w, r, "", "", errShuttingDown)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleLocksRoot serves GET /v1/locks?prefix=P&limit=N.
func (s *Server) handleLocksRoot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	s.list(w, r)
}

// handleLocks serves /v1/locks/{name} and /v1/locks/{name}/{acquire,renew,release,revoke,heal}.
// It parses the escaped path itself so that names with an escaped '/' round-trip.
func (s *Server) handleLocks(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/locks/")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if rest == "" {
			s.list(w, r)
			return
		}
		name, err := unescapeName("name", rest)
		if err != nil {
			s.fail(w, r, "inspect", "", err)
			return
		}
		s.inspect(w, r, name)
	case http.MethodPost:
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			s.fail(w, r, "", "", because(errNoRoute, "no such route: POST /v1/locks/{name} needs an action: /acquire, /renew, /release, /revoke or /heal"))
			return
		}
		action := rest[i+1:]
		var handle func(http.ResponseWriter, *http.Request, string)
		switch action {
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
		default:
			s.fail(w, r, "", "", because(errNoRoute, "no such route: unknown lock action %q (want acquire, renew, release, revoke or heal)", action))
			return
		}
		name, err := unescapeName("name", rest[:i])
		if err != nil {
			s.fail(w, r, action, "", err)
			return
		}
		handle(w, r, name)
	default:
		s.methodNotAllowed(w, r, "GET, HEAD, POST")
	}
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
		err = driver.ValidateKey(name)
	} else {
		err = driver.ValidateName(name)
	}
	if err != nil {
		return "", err
	}
	return name, nil
}

// ttlFromMs turns a JSON ttl_ms into a TTL, with the default when absent.
func (s *Server) ttlFromMs(ms *int64) (time.Duration, error) {
	if ms == nil {
		return s.cfg.DefaultTTL, nil
	}
	if *ms <= 0 || *ms > fence.MaxTTL.Milliseconds() {
		return 0, &fence.InvalidError{Field: "ttl_ms", Value: strconv.FormatInt(*ms, 10),
			Reason: fmt.Sprintf("must be between %d and %d", fence.MinTTL.Milliseconds(), fence.MaxTTL.Milliseconds())}
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request, name string) {
	const op = "acquire"
	var req acquireRequest
	var ttl time.Duration
	if !s.readBody(w, r, op, name, req.decode, func() (err error) {
		if ttl, err = s.ttlFromMs(req.TTLms); err != nil {
			return err
		}
		if req.WaitMs < 0 {
			return &fence.InvalidError{Field: "wait_ms", Value: strconv.FormatInt(req.WaitMs, 10), Reason: "must not be negative"}
		}
		// Checked here as well as by the engine: a Locker that is no driver.Engine
		// must not store an owner the API promises to refuse.
		if err := driver.ValidateOwner(req.Owner); err != nil {
			return err
		}
		return s.checkKind(req)
	}) {
		return
	}
	wait := s.cfg.MaxWait
	if req.WaitMs < wait.Milliseconds() {
		wait = time.Duration(req.WaitMs) * time.Millisecond
	}
	ctx := r.Context()
	start := time.Now()
	// No options for a plain lock without an owner (the common request): a slice
	// of them would be allocated on every grant, as the store keeps them.
	var opts []fence.AcquireOption
	if req.Owner != "" {
		opts = append(opts, fence.WithOwner(req.Owner))
	}
	permit := req.Limit != nil && *req.Limit > 1
	switch {
	case permit:
		opts = append(opts, fence.WithLimit(*req.Limit))
	case req.Shared:
		opts = append(opts, fence.WithShared())
	}
	g, err := s.grant(ctx, name, ttl, opts...)
	if errors.Is(err, fence.ErrNotAcquired) && wait > 0 && ctx.Err() == nil {
		// The long poll: the backend's wait is woken by the release. It also ends when
		// the client goes away or the server drains.
		if unpark, perr := s.park(w); perr != nil {
			err = perr
		} else {
			a := &acquireCall{name: name, req: req, ttl: ttl, wait: wait, start: start, permit: permit, opts: opts, held: err}
			if p := s.leave(w, r); p != nil {
				s.parkAcquire(p, a, unpark)
				return
			}
			g, err = s.waitGrant(ctx, a, unpark)
		}
	}
	s.acquired(ctx, w, r, name, req, ttl, start, permit, g, err)
}

// acquireCall is what the wait of an acquire and its answer need of the call.
type acquireCall struct {
	name      string
	req       acquireRequest
	ttl, wait time.Duration
	start     time.Time
	permit    bool
	opts      []fence.AcquireOption
	held      error // the first try's: the lock is held
}

// waitGrant is the long poll of an acquire whose first try found the lock held:
// the backend's wait, woken by the release, ended by ctx (the client going away)
// or the server's drain (errShuttingDown). unpark is called when it ends.
func (s *Server) waitGrant(ctx context.Context, a *acquireCall, unpark func()) (driver.Grant, error) {
	s.m.waits.Inc()
	g, err := s.grantWaiting(ctx, a)
	unpark()
	s.m.waitSeconds.Observe(time.Since(a.start).Seconds())
	return g, err
}

// grantWaiting is the backend's wait of a long poll (see waitGrant).
func (s *Server) grantWaiting(ctx context.Context, a *acquireCall) (driver.Grant, error) {
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.drainCtx, cancel)
	waitStart := time.Now()
	g, err := s.grant(wctx, a.name, a.ttl, append(a.opts, fence.WithWait(a.wait-time.Since(a.start)))...)
	stop()
	cancel()
	switch {
	case err != nil && s.drainCtx.Err() != nil && ctx.Err() == nil:
		err = errShuttingDown
	case errors.Is(err, fence.ErrNotAcquired) && ctx.Err() == nil:
		err = s.heldAtEnd(ctx, a.name, err, waitStart)
	}
	return g, err
}

// acquired answers an acquire of name that began at start and ended with g or
// err; ctx ended means the client went away.
func (s *Server) acquired(ctx context.Context, w http.ResponseWriter, r *http.Request, name string, req acquireRequest, ttl time.Duration, start time.Time, permit bool, g driver.Grant, err error) {
	const op = "acquire"
	elapsed := time.Since(start).Seconds()
	if err != nil {
		result := s.m.acquireError
		if errors.Is(err, fence.ErrNotAcquired) {
			result = s.m.acquireHeld
		}
		result.Observe(elapsed)
		s.fail(w, r, op, name, s.kindCause(req, err))
		return
	}
	if ctx.Err() != nil {
		// Granted as the client went away: nobody will ever know this lease id, so
		// free the lock now instead of at expiry.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rerr := s.cfg.Locker.Release(rctx, name, g.ID)
		cancel()
		s.log.Info("released a grant whose client went away", "lock", name, "token", uint64(g.Token), "err", rerr)
		s.m.acquireError.Observe(elapsed)
		s.fail(w, r, op, name, because(ctx.Err(), "client went away"))
		return
	}
	granted := grantedAt(g, start)
	s.m.grants.Inc()
	s.m.acquireGranted.Observe(elapsed)
	s.held.set(name, g.ID, granted.Add(ttl))
	if s.log.Enabled(ctx, slog.LevelDebug) { // the arguments would cost allocations at every level
		s.log.Debug("granted", "lock", name, "token", uint64(g.Token), "ttl", ttl, "slot", g.Slot)
	}
	resp := leaseResponse{Lease: Lease{Name: name, Token: g.Token, ID: g.ID, TTLms: ttl.Milliseconds()},
		WaitedMs: granted.Sub(start).Milliseconds()}
	if permit {
		slot := g.Slot
		resp.Slot = &slot
	}
	buf := getBuffer()
	data, fast := appendLeaseResponse((*buf)[:0], resp)
	s.answer(w, s.m.okAcquire, buf, data, fast, func() { s.ok(w, r, resp) })
}

// checkKind validates the kind of grant an acquire asks for: "limit" 1 to
// fence.MaxLimit, "shared" not with a limit above 1 (400), and a kind the store
// declares (fence.FeaturesOf; 501 otherwise).
func (s *Server) checkKind(req acquireRequest) error {
	limit := 0
	if req.Limit != nil {
		limit = *req.Limit
		if err := driver.ValidateLimit(limit); err != nil {
			return err
		}
	}
	if req.Shared && limit > 1 {
		return &fence.InvalidError{Field: "shared", Value: "true", Reason: fmt.Sprintf("cannot be combined with limit %d: a semaphore's permits are not shared", limit)}
	}
	if kind, declared := s.kindOf(req); kind != "" && !declared {
		return kindUnsupported(kind)
	}
	return nil
}

// kindOf names what req asks for beyond a lock ("" for a lock) and says whether
// the store declares it.
func (s *Server) kindOf(req acquireRequest) (kind string, declared bool) {
	f := fence.FeaturesOf(s.cfg.Locker)
	switch {
	case req.Limit != nil && *req.Limit > 1:
		return `semaphores ("limit")`, f.Semaphores
	case req.Shared:
		return `shared locks ("shared")`, f.Shared
	}
	return "", true
}

func kindUnsupported(kind string) error {
	return because(ErrNotImplemented, "%s are not supported by this server's store", kind)
}

// kindCause returns an acquire's error, with the store's refusal of the kind of
// grant as kindUnsupported's cause: a store (a wrapper of one, say) may declare a
// kind and refuse it all the same.
func (s *Server) kindCause(req acquireRequest, err error) error {
	var cause *causeError
	if kind, _ := s.kindOf(req); kind != "" && errors.Is(err, fence.ErrNotImplemented) && !errors.As(err, &cause) {
		return kindUnsupported(kind)
	}
	return err
}

// grant acquires name for a remote holder. A driver.Granter grants without a
// *fence.Lease; from any other Locker the server takes a lease, whose expiry timer
// runs until its TTL is over although nobody here watches it.
func (s *Server) grant(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, error) {
	if g, ok := s.cfg.Locker.(driver.Granter); ok {
		return g.Grant(ctx, name, ttl, opts...)
	}
	lease, err := s.cfg.Locker.Acquire(ctx, name, ttl, opts...)
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: lease.Token(), ID: lease.ID(), Start: lease.Deadline().Add(-ttl), Slot: lease.Slot()}, nil
}

// grantedAt returns when the backend request that made g was sent, which is when
// the backend started counting its TTL: a holder's deadline is that time plus the
// TTL. It is not when the backend answered: a grant can take a while to be
// acknowledged (an fsync, a Redis WAIT, a Raft commit) after its TTL started, and a
// holder dating its lease from the answer would believe in it for that much too long.
// The result is clamped to [start, now], so a backend on another clock can only make
// the holder's deadline earlier, never later.
func grantedAt(g driver.Grant, start time.Time) time.Time {
	t := g.Start
	if now := time.Now(); t.After(now) {
		t = now
	}
	if t.Before(start) {
		t = start
	}
	return t
}

// heldAtEnd returns the answer to a wait that ended with err (ErrNotAcquired) with
// the time the lock has left as of now, the wait's end. The backend's *HeldError
// describes its last try, possibly when the wait began. It asks the Locker
// (Inspect) if it can; otherwise it takes the time since the wait began off the
// backend's figure, which can only say the lock expires sooner than it does, never
// later. waitStart is when the waiting Acquire was called.
func (s *Server) heldAtEnd(ctx context.Context, name string, err error, waitStart time.Time) error {
	var held *fence.HeldError
	if !errors.As(err, &held) {
		return err
	}
	if in, ok := s.cfg.Locker.(fence.Inspector); ok {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, ierr := in.Inspect(ictx, name)
		cancel()
		if ierr == nil {
			return &fence.HeldError{Name: name, ExpiresIn: heldFor(info, held.Limit), Limit: held.Limit}
		}
	}
	left := held.ExpiresIn - time.Since(waitStart)
	if held.ExpiresIn <= 0 || left <= 0 {
		left = 0 // unknown: the holder renewed, or the lock is about to be free
	}
	return &fence.HeldError{Name: name, ExpiresIn: left, Limit: held.Limit}
}

// heldFor is how long info says an acquire of a semaphore of limit (0 for a
// lock) stays held at most: until the first permit expires, for a semaphore;
// until the last lease expires, for an exclusive acquire of a shared lock; the
// holder's time left, for a lock; 0 (unknown) if freed since.
func heldFor(info fence.LockInfo, limit int) time.Duration {
	if !info.Held {
		return 0
	}
	left := info.ExpiresIn
	for _, h := range info.Holders {
		if limit > 1 {
			left = min(left, h.ExpiresIn)
		} else {
			left = max(left, h.ExpiresIn)
		}
	}
	return left
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request, name string) {
	var req renewRequest
	var ttl time.Duration
	if !s.readBody(w, r, "renew", name, req.decode, func() (err error) {
		if ttl, err = s.ttlFromMs(req.TTLms); err != nil {
			return err
		}
		return driver.ValidateLeaseID(req.Lease)
	}) {
		return
	}
	start := time.Now()
	if err := s.cfg.Locker.Renew(r.Context(), name, req.Lease, ttl); err != nil {
		if errors.Is(err, fence.ErrNotHeld) {
			s.m.lost.Inc()
			s.log.Info("renew refused: lease not held", "lock", name)
		}
		s.fail(w, r, "renew", name, err)
		return
	}
	s.held.set(name, req.Lease, start.Add(ttl))
	resp := Renewed{Name: name, TTLms: ttl.Milliseconds()}
	buf := getBuffer()
	data, fast := appendRenewed((*buf)[:0], resp)
	s.answer(w, s.m.okRenew, buf, data, fast, func() { s.ok(w, r, resp) })
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, name string) {
	var req releaseRequest
	if !s.readBody(w, r, "release", name, req.decode, func() error { return driver.ValidateLeaseID(req.Lease) }) {
		return
	}
	if err := s.cfg.Locker.Release(r.Context(), name, req.Lease); err != nil {
		s.fail(w, r, "release", name, err)
		return
	}
	s.held.remove(name, req.Lease)
	resp := Released{Name: name, Released: true}
	buf := getBuffer()
	data, fast := appendReleased((*buf)[:0], resp)
	s.answer(w, s.m.okRelease, buf, data, fast, func() { s.ok(w, r, resp) })
}

// revoke serves POST /v1/locks/{name}/revoke {}: fence.Revoker over HTTP, the
// operator's safe force-release. Any token the server accepts may revoke (scoped
// tokens are yet to come). It answers 404 "not_held" when no unexpired lease
// holds name.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request, name string) {
	const op = "revoke"
	var req revokeRequest
	if !s.readBody(w, r, op, name, func(data []byte) error { return decodeInto(data, &req) }, func() error { return nil }) {
		return
	}
	rv, ok := s.cfg.Locker.(fence.Revoker)
	if !ok {
		s.fail(w, r, op, name, because(ErrNotImplemented, "not supported by this server's store (it cannot end a lease without its lease id)"))
		return
	}
	if err := rv.Revoke(r.Context(), name); err != nil {
		if errors.Is(err, fence.ErrNotHeld) {
			err = because(errNothingToRevoke, "not held (free, or its lease expired): nothing to revoke")
		}
		s.fail(w, r, op, name, err)
		return
	}
	s.held.removeAll(name)
	s.m.revokes.Inc()
	s.log.Info("revoked", "lock", name)
	s.ok(w, r, Revoked{Name: name, Revoked: true})
}

// heal serves POST /v1/locks/{name}/heal {"seen":N}: fence.Healer over HTTP (P4).
func (s *Server) heal(w http.ResponseWriter, r *http.Request, name string) {
	var req healRequest
	if !s.readBody(w, r, "heal", name, func(data []byte) error { return decodeInto(data, &req) }, func() error { return driver.ValidateToken(req.Seen) }) {
		return
	}
	h, ok := s.cfg.Locker.(fence.Healer)
	if !ok {
		s.fail(w, r, "heal", name, because(ErrNotImplemented, "not supported by this server's store (its counters cannot go backwards, so there is nothing to heal)"))
		return
	}
	if err := h.Heal(r.Context(), name, req.Seen); err != nil {
		s.fail(w, r, "heal", name, err)
		return
	}
	s.log.Info("healed", "lock", name, "seen", uint64(req.Seen))
	s.ok(w, r, healRequest{Seen: req.Seen})
}

func (s *Server) inspector() (fence.Inspector, error) {
	in, ok := s.cfg.Locker.(fence.Inspector)
	if !ok {
		return nil, because(ErrNotImplemented, "not supported by this server's store (it cannot report lock state)")
	}
	return in, nil
}

// inspect serves GET /v1/locks/{name}[?index=N&wait_ms=W]: the lock's state,
// with its change index in the Fence-Index header. With index it is a blocking
// query (see blockingQuery).
func (s *Server) inspect(w http.ResponseWriter, r *http.Request, name string) {
	v := r.URL.Query()
	op := "inspect"
	if v.Has("index") || v.Has("wait_ms") {
		op = "watch"
	}
	q, err := s.blockingQueryOf(v)
	if err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	in, err := s.inspector()
	if err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	var info fence.LockInfo
	if q.blocking {
		var unpark func()
		if unpark, err = s.park(w); err != nil {
			s.fail(w, r, op, name, err)
			return
		}
		if p := s.leave(w, r); p != nil {
			s.parkQuery(p, in, op, name, q, unpark)
			return
		}
		info, err = s.blockingQuery(r.Context(), in, name, q)
		unpark()
	} else {
		info, err = in.Inspect(r.Context(), name)
	}
	s.inspected(w, r, op, name, info, err)
}

// inspected answers an inspect or a blocking query (op) of name: info, or err.
func (s *Server) inspected(w http.ResponseWriter, r *http.Request, op, name string, info fence.LockInfo, err error) {
	if err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	w.Header().Set(HeaderIndex, strconv.FormatUint(info.Index(), 10))
	s.ok(w, r, LockInfoOf(info))
}

// park counts a request about to wait and returns the function that ends its wait,
// or an error matching fence.ErrUnavailable (503, with Retry-After) when
// Config.MaxWaiters requests are waiting already.
func (s *Server) park(w http.ResponseWriter) (unpark func(), err error) {
	n := s.waiting.Add(1)
	if limit := s.cfg.MaxWaiters; limit > 0 && n > int64(limit) {
		s.waiting.Add(-1)
		w.Header().Set("Retry-After", "1")
		return nil, because(fence.ErrUnavailable, "too many requests waiting: the server's limit is %d waiting acquires and blocking queries at once; retry later", limit)
	}
	return func() { s.waiting.Add(-1) }, nil
}

// blockingQueryArgs are the query parameters of GET /v1/locks/{name}.
type blockingQueryArgs struct {
	blocking bool          // index was given
	index    uint64        // the Fence-Index the client has
	wait     time.Duration // how long to wait for another, within [0, MaxWait]
}

// blockingQueryOf reads index and wait_ms, each at most once. A wait_ms over
// MaxWait is cut to it, as an acquire's is; without wait_ms a blocking query
// waits DefaultBlockingWait (at most MaxWait). wait_ms without index is refused:
// it would be ignored.
func (s *Server) blockingQueryOf(v url.Values) (blockingQueryArgs, error) {
	q := blockingQueryArgs{wait: min(DefaultBlockingWait, s.cfg.MaxWait)}
	once := func(field string) (string, bool, error) {
		switch vs := v[field]; len(vs) {
		case 0:
			return "", false, nil
		case 1:
			return vs[0], true, nil
		default:
			return "", false, &fence.InvalidError{Field: field, Value: strings.Join(vs, ","), Reason: "must be given at most once"}
		}
	}
	idx, hasIndex, err := once("index")
	if err != nil {
		return q, err
	}
	if hasIndex {
		if q.index, err = strconv.ParseUint(idx, 10, 64); err != nil {
			return q, &fence.InvalidError{Field: "index", Value: idx, Reason: "must be a Fence-Index: an integer from 0"}
		}
		q.blocking = true
	}
	wait, hasWait, err := once("wait_ms")
	switch {
	case err != nil:
		return q, err
	case !hasWait:
		return q, nil
	case !hasIndex:
		return q, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "needs index: it bounds a blocking query"}
	}
	ms, err := strconv.ParseInt(wait, 10, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return q, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "must be an integer"}
	case ms < 0:
		return q, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "must not be negative"}
	case err != nil || ms >= s.cfg.MaxWait.Milliseconds():
		q.wait = s.cfg.MaxWait // out of range above: cut, as any wait over the maximum
	default:
		q.wait = time.Duration(ms) * time.Millisecond
	}
	return q, nil
}

// blockingQuery answers a blocking query on name: at once with the state if its
// index differs from q.index, else with the state after the next change (an
// acquire, release, expiry, revoke or heal), or, when q.wait passes first, with
// the state as it is then (a fresh read, so its time left is current). It is
// built on the store's fence.Watcher: one watch per request, which in process
// (bolt, inmem) is a subscription in memory and on a network store is what that
// store's Watch costs (a subscription to the store's change messages and a read
// of the lock, each time it changes). It ends early, with 503, when the server
// drains. A store without a Watcher is ErrNotImplemented (501).
func (s *Server) blockingQuery(ctx context.Context, in fence.Inspector, name string, q blockingQueryArgs) (fence.LockInfo, error) {
	wt, ok := s.cfg.Locker.(fence.Watcher)
	if !ok {
		return fence.LockInfo{}, because(ErrNotImplemented, "blocking queries (index) are not supported by this server's store (it cannot watch a lock)")
	}
	s.m.blocking.Inc()
	defer s.m.blocking.Dec()
	wctx, cancel := context.WithTimeout(ctx, q.wait)
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	for info, err := range wt.Watch(wctx, name) {
		if err != nil {
			return fence.LockInfo{}, err
		}
		if info.Index() != q.index {
			return info, nil
		}
	}
	switch {
	case ctx.Err() != nil:
		return fence.LockInfo{}, because(ctx.Err(), "client went away")
	case s.drainCtx.Err() != nil:
		return fence.LockInfo{}, errShuttingDown
	}
	return in.Inspect(ctx, name)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	in, err := s.inspector()
	if err != nil {
		s.fail(w, r, "list", "", err)
		return
	}
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if prefix != "" {
		if err := driver.ValidateName(prefix); err != nil {
			reason := err.Error()
			var inv *fence.InvalidError
			if errors.As(err, &inv) {
				reason = inv.Reason
			}
			s.fail(w, r, "list", "", &fence.InvalidError{Field: "prefix", Value: prefix, Reason: reason})
			return
		}
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxListLimit {
			s.fail(w, r, "list", "", &fence.InvalidError{Field: "limit", Value: v, Reason: fmt.Sprintf("must be an integer in [0, %d]", maxListLimit)})
			return
		}
		limit = n
	}
	infos, err := in.List(r.Context(), prefix, limit)
	if err != nil {
		s.fail(w, r, "list", prefix, err)
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
	if s.cfg.KV == nil {
		s.fail(w, r, op, key, because(ErrNotImplemented, "not supported by this server (it has no KV store)"))
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
	item, err := s.cfg.KV.Get(r.Context(), key)
	if err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderToken, item.Fence.Token.String())
	h.Set(HeaderLock, url.PathEscape(item.Fence.Name))
	if item.Value == nil {
		// Fenced only, or deleted: no value, but the fence a writer must pass.
		s.fail(w, r, op, key, because(fence.ErrNotFound, "no value (the key is fenced by lock %q at token %d)", item.Fence.Name, item.Fence.Token))
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
	if err := driver.ValidateName(name); err != nil {
		return f, asField(HeaderLock, err)
	}
	f.Name = name
	switch vs := h.Values(HeaderLease); {
	case len(vs) > 1:
		return f, &fence.InvalidError{Field: HeaderLease, Reason: "must be given at most once"}
	case len(vs) == 1:
		f.LeaseID = strings.TrimSpace(vs[0])
		if err := driver.ValidateLeaseID(f.LeaseID); err != nil {
			return f, asField(HeaderLease, err)
		}
	}
	return f, nil
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
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxValueBytes))
	if err != nil {
		s.fail(w, r, op, key, bodyError(err, "value", s.cfg.MaxValueBytes))
		return
	}
	if err := s.cfg.KV.Put(r.Context(), key, value, f); err != nil {
		s.countRefusal(err, key, f)
		s.fail(w, r, op, key, err)
		return
	}
	s.m.kvWrites.Inc()
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
	if err := s.cfg.KV.Delete(r.Context(), key, f); err != nil {
		s.countRefusal(err, key, f)
		s.fail(w, r, op, key, err)
		return
	}
	s.m.kvWrites.Inc()
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
	p, ok := s.cfg.KV.(fence.Purger)
	if !ok {
		s.fail(w, r, op, key, because(ErrNotImplemented, "not supported by this server's store (it cannot purge a key)"))
		return
	}
	if err := p.Purge(r.Context(), key); err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	s.log.Info("key purged", "key", key)
	s.ok(w, r, purgeResponse{Key: key, Purged: true})
}

// handleFences serves POST /v1/fences/{key}: fence.Guard.Fence over HTTP.
func (s *Server) handleFences(w http.ResponseWriter, r *http.Request) {
	const op = "fence"
	if r.Method != http.MethodPost {
		s.methodNotAllowed(w, r, "POST")
		return
	}
	key, err := unescapeName("key", strings.TrimPrefix(r.URL.EscapedPath(), "/v1/fences/"))
	if err != nil {
		s.fail(w, r, op, "", err)
		return
	}
	g, ok := s.cfg.KV.(fence.Guard)
	if !ok {
		why := "not supported by this server's store (it cannot fence without writing)"
		if s.cfg.KV == nil {
			why = "not supported by this server (it has no KV store)"
		}
		s.fail(w, r, op, key, because(ErrNotImplemented, "%s", why))
		return
	}
	f, err := fenceFromHeaders(r)
	if err != nil {
		s.fail(w, r, op, key, err)
		return
	}
	if err := g.Fence(r.Context(), key, f); err != nil {
		s.countRefusal(err, key, f)
		s.fail(w, r, op, key, err)
		return
	}
	s.ok(w, r, kvResponse{Key: key, Lock: f.Name, Token: f.Token})
}

func (s *Server) countRefusal(err error, key string, f fence.Fence) {
	switch {
	case errors.Is(err, fence.ErrUnissuedToken):
		s.m.unissued.Inc()
		s.log.Info("fenced write refused", "key", key, "fence", f.String(), "err", err)
	case errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrNamespace):
		s.m.stale.Inc()
		s.log.Info("fenced write refused", "key", key, "fence", f.String(), "err", err)
	}
}

// readBody reads the JSON body of op on name (see readJSON), decodes it with
// decode unless it is empty, and checks it with valid. It answers the first
// error and returns false, or returns true. decode is the body's fast path where
// it has one (see decodeFast), falling back to decodeInto: taking a function
// rather than the body as an any keeps the body off the heap.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, op, name string, decode func(data []byte) error, valid func() error) bool {
	buf := getBuffer()
	data, err := s.readJSON(w, r, buf)
	if err == nil && len(bytes.TrimSpace(data)) > 0 {
		err = decode(data)
	}
	putBuffer(buf)
	if err == nil {
		err = valid()
	}
	if err != nil {
		s.fail(w, r, op, name, err)
		return false
	}
	return true
}

// readJSON reads a JSON body of at most MaxBodyBytes into buf (which it may grow;
// the data is valid until buf goes back to the pool). Its errors say what is
// wrong in terms of the API, never echoing the body (which may hold a lease id).
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, buf *[]byte) ([]byte, error) {
	n := r.ContentLength
	if n > s.cfg.MaxBodyBytes {
		return nil, because(errTooLarge, "body of %d bytes is over the limit of %d", n, s.cfg.MaxBodyBytes)
	}
	var data []byte
	var err error
	if n > 0 {
		// A body of a declared length: net/http's reader ends at it, so no limiting
		// reader is needed, and one full read of that length is the whole body.
		// (0 may also be a request built in process with a body of unknown
		// length, which is read to its end as a body without a length.)
		if int64(cap(*buf)) < n {
			*buf = make([]byte, 0, n)
		}
		data = (*buf)[:n]
		if _, err = io.ReadFull(r.Body, data); err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	} else {
		data, err = readAllInto((*buf)[:0], http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		*buf = data
	}
	if err != nil {
		return nil, bodyError(err, "body", s.cfg.MaxBodyBytes)
	}
	return data, nil
}

// decodeInto decodes data strictly (see decodeStrict) into a new T and, if that
// succeeds, copies it to dst, which thus does not escape to the heap.
func decodeInto[T any](data []byte, dst *T) error {
	v := new(T)
	if err := decodeStrict(data, v); err != nil {
		return err
	}
	*dst = *v
	return nil
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

func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	s.fail(w, r, "", "", because(errMethod, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.EscapedPath(), allow))
}

func (s *Server) ok(w http.ResponseWriter, r *http.Request, v any) {
	s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
	s.writeJSON(w, http.StatusOK, v)
}

// answer answers 200 on a hot route whose counter is counted (resolved once:
// see metrics) with data, the JSON body a fast path appended to buf, if fast;
// else (a name the fast path does not write) it calls slow, which answers with
// ok. It returns buf to the pool. The body goes to ok as an any only in slow, so
// that the common answer boxes nothing.
func (s *Server) answer(w http.ResponseWriter, counted prometheus.Counter, buf *[]byte, data []byte, fast bool, slow func()) {
	if !fast {
		putBuffer(buf)
		slow()
		return
	}
	counted.Inc()
	*buf = append(data, '\n')
	writeBody(w, http.StatusOK, *buf)
	putBuffer(buf)
}

// fail answers err, which op met on name (see errorBody), with the status and code
// of statusTable and the user's message of userMessage. The log keeps err itself.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, op, name string, err error) {
	status, body := errorBody(op, name, err)
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
	buf := getBuffer()
	defer putBuffer(buf)
	data, ok := appendJSON((*buf)[:0], v)
	if !ok {
		var err error
		if data, err = json.Marshal(v); err != nil { // only plain structs are marshalled; this is a bug
			status, data = http.StatusInternalServerError, []byte(`{"error":"internal error","code":"internal"}`)
		}
	}
	data = append(data, '\n')
	if ok {
		*buf = data
	}
	writeBody(w, status, data)
}

// writeBody answers data, a JSON body, with status.
func writeBody(w http.ResponseWriter, status int, data []byte) {
	h := w.Header()
	// Assigned rather than Set: the keys are canonical, and the values shared
	// slices of one element (an Add to one reallocates it).
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// bufferPool holds the buffers of request and answer bodies, which never
// outlive their handler (a Write copies, decoding copies strings out).
var bufferPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuffer() *[]byte { return bufferPool.Get().(*[]byte) }

// putBuffer returns buf to the pool, unless it grew past 64 KiB (a large body
// is rare; keeping it would pin its memory).
func putBuffer(buf *[]byte) {
	if cap(*buf) <= 64<<10 {
		bufferPool.Put(buf)
	}
}

// readAllInto is io.ReadAll appending to dst.
func readAllInto(dst []byte, r io.Reader) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// routeOf names the route of r for metrics and logs, without names or keys.
func routeOf(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/locks/") && r.Method == http.MethodPost:
		switch a := p[strings.LastIndexByte(p, '/')+1:]; a {
		case "acquire", "renew", "release", "revoke", "heal":
			return "locks/" + a
		}
		return "other"
	case strings.HasPrefix(p, "/v1/locks"):
		return "locks"
	case strings.HasPrefix(p, "/v1/kv/"):
		return "kv"
	case strings.HasPrefix(p, "/v1/fences/"):
		return "fences"
	case p == "/healthz", p == "/metrics":
		return p[1:]
	case p == "/v1/openapi.json":
		return "openapi"
	}
	return "other"
}
