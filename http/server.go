package fencehttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Defaults of Config.
const (
	DefaultTTL           = 30 * time.Second // TTL of an acquire or renew without ttl_ms
	DefaultMaxWait       = 60 * time.Second // longest single long poll
	DefaultMaxBodyBytes  = 64 << 10         // largest JSON request body
	DefaultMaxValueBytes = 1 << 20          // largest KV value
	maxListLimit         = 10000
)

// Config configures a Server. Only Locker is required.
type Config struct {
	// Locker grants the leases. If it is also a fence.Inspector, GET /v1/locks works
	// (501 otherwise).
	Locker fence.Locker
	// KV is the fenced key-value store behind /v1/kv; if it is also a fence.Guard,
	// POST /v1/fences works. Nil answers those routes with 501.
	KV fence.KV
	// Logger receives structured logs; nil discards them. Lease ids are never logged.
	Logger *slog.Logger
	// AuthTokens, if not empty, are the bearer tokens accepted on every route but
	// /healthz; any other request is answered 401.
	AuthTokens [][]byte
	// MaxBodyBytes bounds JSON request bodies (413 beyond); 0 means 64 KiB.
	MaxBodyBytes int64
	// MaxValueBytes bounds KV values (413 beyond); 0 means 1 MiB.
	MaxValueBytes int64
	// MaxWait caps one long poll; a longer wait_ms is cut to it (the Client polls
	// again). 0 means 60s.
	MaxWait time.Duration
	// DefaultTTL is the TTL of an acquire or renew without ttl_ms; 0 means 30s.
	DefaultTTL time.Duration
	// Registry receives the server's metrics and is served on /metrics; nil means a
	// new registry with the Go runtime and process collectors.
	Registry *prometheus.Registry
}

// Server serves the HTTP API v1 over a Locker and a KV. It keeps no lock state of its
// own (only counters for metrics), so several servers can share one store.
type Server struct {
	cfg       Config
	log       *slog.Logger
	tokenSums [][sha256.Size]byte
	reg       *prometheus.Registry
	m         *metrics
	held      *heldSet
	handler   http.Handler

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
	if cfg.MaxBodyBytes < 0 || cfg.MaxValueBytes < 0 || cfg.MaxWait < 0 || cfg.DefaultTTL < 0 {
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
	if err := fence.ValidateTTL(cfg.DefaultTTL); err != nil {
		return nil, fmt.Errorf("fencehttp: new server: default TTL: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, held: newHeldSet()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for i, t := range cfg.AuthTokens {
		if len(t) == 0 {
			return nil, fmt.Errorf("fencehttp: new server: %w: auth token %d is empty", fence.ErrInvalid, i+1)
		}
		s.tokenSums = append(s.tokenSums, sha256.Sum256(t))
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
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/locks", s.handleLocksRoot)
	mux.HandleFunc("/v1/locks/", s.handleLocks)
	mux.HandleFunc("/v1/kv/", s.handleKV)
	mux.HandleFunc("/v1/fences/", s.handleFences)
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, fmt.Errorf("%w: %s %s", errNoRoute, r.Method, r.URL.EscapedPath()))
	})
	authed := s.authenticate(mux)
	health := http.HandlerFunc(s.handleHealth)
	return s.recoverPanics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			health.ServeHTTP(w, r)
			return
		}
		authed.ServeHTTP(w, r)
	}))
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
				s.writeJSON(w, http.StatusInternalServerError, errorResponse{Error: errInternalError.Error(), Code: "internal"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticate requires a bearer token when AuthTokens are configured.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if len(s.tokenSums) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r.Header.Get("Authorization")) {
			s.log.Warn("unauthorized request", "method", r.Method, "route", routeOf(r), "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="fence"`)
			s.fail(w, r, fmt.Errorf("%w: missing or wrong bearer token", ErrUnauthorized))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized compares SHA-256 sums in constant time, against every configured
// token, so neither the length nor the position of a match leaks through timing.
func (s *Server) authorized(header string) bool {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for i := range s.tokenSums {
		match |= subtle.ConstantTimeCompare(sum[:], s.tokenSums[i][:])
	}
	return match == 1
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if s.drainCtx.Err() != nil {
		s.fail(w, r, errShuttingDown)
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

// handleLocks serves /v1/locks/{name} and /v1/locks/{name}/{acquire,renew,release}.
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
			s.fail(w, r, err)
			return
		}
		s.inspect(w, r, name)
	case http.MethodPost:
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			s.fail(w, r, fmt.Errorf("%w: POST /v1/locks/{name} needs an action: /acquire, /renew or /release", errNoRoute))
			return
		}
		action := rest[i+1:]
		name, err := unescapeName("name", rest[:i])
		if err != nil {
			s.fail(w, r, err)
			return
		}
		switch action {
		case "acquire":
			s.acquire(w, r, name)
		case "renew":
			s.renew(w, r, name)
		case "release":
			s.release(w, r, name)
		case "heal":
			s.heal(w, r, name)
		default:
			s.fail(w, r, fmt.Errorf("%w: unknown lock action %q (want acquire, renew, release or heal)", errNoRoute, action))
		}
	default:
		s.methodNotAllowed(w, r, "GET, HEAD, POST")
	}
}

// unescapeName decodes one escaped path segment and validates it as a name or key.
func unescapeName(field, escaped string) (string, error) {
	name, err := url.PathUnescape(escaped)
	if err != nil {
		return "", &fence.InvalidError{Field: field, Value: escaped, Reason: "is not a valid escaped path segment"}
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
	var req acquireRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	ttl, err := s.ttlFromMs(req.TTLms)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.WaitMs < 0 {
		s.fail(w, r, &fence.InvalidError{Field: "wait_ms", Value: strconv.FormatInt(req.WaitMs, 10), Reason: "must not be negative"})
		return
	}
	wait := s.cfg.MaxWait
	if req.WaitMs < wait.Milliseconds() {
		wait = time.Duration(req.WaitMs) * time.Millisecond
	}
	ctx := r.Context()
	start := time.Now()
	lease, err := s.cfg.Locker.Acquire(ctx, name, ttl)
	if errors.Is(err, fence.ErrNotAcquired) && wait > 0 && ctx.Err() == nil {
		// The long poll: the backend's wait is woken by the release. It also ends when
		// the client goes away or the server drains.
		s.m.waits.Inc()
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(s.drainCtx, cancel)
		lease, err = s.cfg.Locker.Acquire(wctx, name, ttl, fence.WithWait(wait-time.Since(start)))
		stop()
		cancel()
		s.m.waitSeconds.Observe(time.Since(start).Seconds())
		if err != nil && s.drainCtx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("acquire %q: %w", name, errShuttingDown)
		}
	}
	elapsed := time.Since(start).Seconds()
	if err != nil {
		result := "error"
		if errors.Is(err, fence.ErrNotAcquired) {
			result = "held"
		}
		s.m.acquireSeconds.WithLabelValues(result).Observe(elapsed)
		s.fail(w, r, err)
		return
	}
	if ctx.Err() != nil {
		// Granted as the client went away: nobody will ever know this lease id, so
		// free the lock now instead of at expiry.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rerr := s.cfg.Locker.Release(rctx, name, lease.ID())
		cancel()
		s.log.Info("released a grant whose client went away", "lock", name, "token", uint64(lease.Token()), "err", rerr)
		s.m.acquireSeconds.WithLabelValues("error").Observe(elapsed)
		s.fail(w, r, fmt.Errorf("acquire %q: client went away: %w", name, ctx.Err()))
		return
	}
	s.m.grants.Inc()
	s.m.acquireSeconds.WithLabelValues("granted").Observe(elapsed)
	s.held.set(name, start.Add(ttl))
	s.log.Debug("granted", "lock", name, "token", uint64(lease.Token()), "ttl", ttl)
	s.ok(w, r, leaseResponse{Name: name, Token: lease.Token(), Lease: lease.ID(), TTLms: ttl.Milliseconds(),
		WaitedMs: time.Since(start).Milliseconds()})
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request, name string) {
	var req renewRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	ttl, err := s.ttlFromMs(req.TTLms)
	if err == nil {
		err = fence.ValidateLeaseID(req.Lease)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	start := time.Now()
	if err := s.cfg.Locker.Renew(r.Context(), name, req.Lease, ttl); err != nil {
		if errors.Is(err, fence.ErrNotHeld) {
			s.m.lost.Inc()
			s.log.Info("renew refused: lease not held", "lock", name)
		}
		s.fail(w, r, err)
		return
	}
	s.held.set(name, start.Add(ttl))
	s.ok(w, r, renewResponse{Name: name, TTLms: ttl.Milliseconds()})
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, name string) {
	var req releaseRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := fence.ValidateLeaseID(req.Lease); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.cfg.Locker.Release(r.Context(), name, req.Lease); err != nil {
		s.fail(w, r, err)
		return
	}
	s.held.remove(name)
	s.ok(w, r, releaseResponse{Name: name, Released: true})
}

// heal serves POST /v1/locks/{name}/heal {"seen":N}: fence.Healer over HTTP (P4).
func (s *Server) heal(w http.ResponseWriter, r *http.Request, name string) {
	var req healRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := fence.ValidateToken(req.Seen); err != nil {
		s.fail(w, r, err)
		return
	}
	h, ok := s.cfg.Locker.(fence.Healer)
	if !ok {
		s.fail(w, r, fmt.Errorf("%w: the locker's counters cannot go backwards, so there is nothing to heal", ErrNotImplemented))
		return
	}
	if err := h.Heal(r.Context(), name, req.Seen); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("healed", "lock", name, "seen", uint64(req.Seen))
	s.ok(w, r, healRequest{Seen: req.Seen})
}

func (s *Server) inspector() (fence.Inspector, error) {
	in, ok := s.cfg.Locker.(fence.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: the locker cannot report lock state", ErrNotImplemented)
	}
	return in, nil
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request, name string) {
	in, err := s.inspector()
	if err == nil {
		var info fence.LockInfo
		if info, err = in.Inspect(r.Context(), name); err == nil {
			s.ok(w, r, toLockInfo(info))
			return
		}
	}
	s.fail(w, r, err)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	in, err := s.inspector()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if prefix != "" {
		if err := fence.ValidateName(prefix); err != nil {
			reason := err.Error()
			var inv *fence.InvalidError
			if errors.As(err, &inv) {
				reason = inv.Reason
			}
			s.fail(w, r, &fence.InvalidError{Field: "prefix", Value: prefix, Reason: reason})
			return
		}
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxListLimit {
			s.fail(w, r, &fence.InvalidError{Field: "limit", Value: v, Reason: fmt.Sprintf("must be an integer in [0, %d]", maxListLimit)})
			return
		}
		limit = n
	}
	infos, err := in.List(r.Context(), prefix, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	resp := listResponse{Locks: make([]lockInfo, 0, len(infos))}
	for _, i := range infos {
		resp.Locks = append(resp.Locks, toLockInfo(i))
	}
	s.ok(w, r, resp)
}

// handleKV serves GET and PUT /v1/kv/{key}.
func (s *Server) handleKV(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPut {
		s.methodNotAllowed(w, r, "GET, HEAD, PUT")
		return
	}
	key, err := unescapeName("key", strings.TrimPrefix(r.URL.EscapedPath(), "/v1/kv/"))
	if err == nil && s.cfg.KV == nil {
		err = fmt.Errorf("%w: this server has no KV store", ErrNotImplemented)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.Method == http.MethodPut {
		s.put(w, r, key)
		return
	}
	item, err := s.cfg.KV.Get(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderToken, item.Fence.Token.String())
	h.Set(HeaderLock, url.PathEscape(item.Fence.Name))
	h.Set("Content-Length", strconv.Itoa(len(item.Value)))
	w.WriteHeader(http.StatusOK)
	s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
	if r.Method != http.MethodHead {
		_, _ = w.Write(item.Value)
	}
}

// fenceFromHeaders reads Fence-Token, Fence-Lease and Fence-Lock. Without Fence-Lock
// it takes the lock that already fences key (see the package doc).
func (s *Server) fenceFromHeaders(r *http.Request, key string) (fence.Fence, error) {
	var f fence.Fence
	h := r.Header
	if vs := h.Values(HeaderToken); len(vs) != 1 {
		return f, &fence.InvalidError{Field: HeaderToken, Value: strings.Join(vs, ","), Reason: "must be given exactly once"}
	}
	tok, err := fence.ParseToken(strings.TrimSpace(h.Get(HeaderToken)))
	if err != nil {
		return f, err
	}
	f.Token = tok
	if vs := h.Values(HeaderLease); len(vs) > 1 {
		return f, &fence.InvalidError{Field: HeaderLease, Reason: "must be given at most once"}
	} else if len(vs) == 1 {
		f.LeaseID = strings.TrimSpace(vs[0])
		if err := fence.ValidateLeaseID(f.LeaseID); err != nil {
			return f, err
		}
	}
	switch vs := h.Values(HeaderLock); {
	case len(vs) > 1:
		return f, &fence.InvalidError{Field: HeaderLock, Value: strings.Join(vs, ","), Reason: "must be given at most once"}
	case len(vs) == 1:
		// Header values are bytes; a name with non-ASCII or odd characters is sent
		// URL-escaped (as a path segment), which plain names are unchanged by.
		name, err := url.PathUnescape(vs[0])
		if err != nil {
			return f, &fence.InvalidError{Field: HeaderLock, Value: vs[0], Reason: "is not a valid escaped lock name"}
		}
		if err := fence.ValidateName(name); err != nil {
			return f, err
		}
		f.Name = name
	default:
		item, err := s.cfg.KV.Get(r.Context(), key)
		switch {
		case err == nil && item.Fence.Token != 0 && item.Fence.Name != "":
			f.Name = item.Fence.Name
		case err == nil || errors.Is(err, fence.ErrNotFound):
			return f, &fence.InvalidError{Field: HeaderLock, Reason: fmt.Sprintf("is required: no lock fences key %q yet", key)}
		default:
			return f, err
		}
	}
	return f, nil
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, key string) {
	if r.ContentLength > s.cfg.MaxValueBytes {
		s.fail(w, r, fmt.Errorf("%w: value of %d bytes, the limit is %d", errTooLarge, r.ContentLength, s.cfg.MaxValueBytes))
		return
	}
	f, err := s.fenceFromHeaders(r, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxValueBytes))
	if err != nil {
		s.fail(w, r, bodyError(err, s.cfg.MaxValueBytes))
		return
	}
	if err := s.cfg.KV.Put(r.Context(), key, value, f); err != nil {
		s.countRefusal(err, key, f)
		s.fail(w, r, err)
		return
	}
	s.m.kvWrites.Inc()
	s.ok(w, r, kvResponse{Key: key, Lock: f.Name, Token: f.Token})
}

// handleFences serves POST /v1/fences/{key}: fence.Guard.Fence over HTTP.
func (s *Server) handleFences(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.methodNotAllowed(w, r, "POST")
		return
	}
	key, err := unescapeName("key", strings.TrimPrefix(r.URL.EscapedPath(), "/v1/fences/"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	g, ok := s.cfg.KV.(fence.Guard)
	if !ok {
		s.fail(w, r, fmt.Errorf("%w: this server's store cannot fence without writing", ErrNotImplemented))
		return
	}
	f, err := s.fenceFromHeaders(r, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := g.Fence(r.Context(), key, f); err != nil {
		s.countRefusal(err, key, f)
		s.fail(w, r, err)
		return
	}
	s.ok(w, r, kvResponse{Key: key, Lock: f.Name, Token: f.Token})
}

func (s *Server) countRefusal(err error, key string, f fence.Fence) {
	if errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrNamespace) {
		s.m.stale.Inc()
		s.log.Info("fenced write refused", "key", key, "fence", f.String(), "err", err)
	}
}

// decodeJSON decodes a JSON body strictly into v: one object, no unknown fields,
// nothing after it, at most MaxBodyBytes. An empty body leaves v as it is.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return fmt.Errorf("%w: body of %d bytes, the limit is %d", errTooLarge, r.ContentLength, s.cfg.MaxBodyBytes)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return bodyError(err, s.cfg.MaxBodyBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &fence.InvalidError{Field: "body", Value: truncate(string(data)), Reason: "is not the expected JSON object: " + err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &fence.InvalidError{Field: "body", Value: truncate(string(data)), Reason: "has data after the JSON object"}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: the limit is %d bytes", errTooLarge, limit)
	}
	return fmt.Errorf("fencehttp: reading the body: %w: %v", fence.ErrUnavailable, err)
}

func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	s.fail(w, r, fmt.Errorf("%w: %s %s (allowed: %s)", errMethod, r.Method, r.URL.EscapedPath(), allow))
}

func (s *Server) ok(w http.ResponseWriter, r *http.Request, v any) {
	s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
	s.writeJSON(w, http.StatusOK, v)
}

// fail answers err with the status and code of statusTable.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, body := errorBody(err)
	s.m.requests.WithLabelValues(routeOf(r), strconv.Itoa(status)).Inc()
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "route", routeOf(r), "status", status, "err", err)
	} else {
		s.log.Debug("request refused", "method", r.Method, "route", routeOf(r), "status", status, "code", body.Code)
	}
	s.writeJSON(w, status, body)
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil { // only plain structs are marshalled; this is a bug
		status, data = http.StatusInternalServerError, []byte(`{"error":"fencehttp: internal error","code":"internal"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// routeOf names the route of r for metrics and logs, without names or keys.
func routeOf(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/locks/") && r.Method == http.MethodPost:
		switch a := p[strings.LastIndexByte(p, '/')+1:]; a {
		case "acquire", "renew", "release", "heal":
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
	}
	return "other"
}
