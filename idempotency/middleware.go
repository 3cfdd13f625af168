package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencelock/fence/internal/httpbuf"
)

// Header names of the IETF Idempotency-Key draft and of replays.
const (
	// HeaderKey carries the client's key, e.g. Idempotency-Key: "8e03978e" (the
	// draft's quoted structured-field string; a bare token is accepted too).
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a response replayed from the store.
	HeaderReplayed = "Idempotent-Replayed"
)

// Defaults of Options.
const (
	DefaultRetention    = 24 * time.Hour
	DefaultLockTimeout  = time.Minute
	DefaultMaxBodyBytes = 1 << 20
	DefaultPurgeEvery   = 10 * time.Minute
	// MaxClientKeyLen is the longest Idempotency-Key value accepted, in bytes.
	MaxClientKeyLen = 255
)

// DefaultReplayHeaders are the response headers stored and replayed when
// Options.ReplayHeaders is nil. Set-Cookie is deliberately absent.
var DefaultReplayHeaders = []string{"Content-Type", "Content-Language", "Content-Encoding", "Content-Location", "Location", "ETag", "Last-Modified", "Cache-Control"}

// Options configure Middleware. The zero value is usable: keys optional, POST and
// PATCH only, 24h retention, 1m lock timeout, 1 MiB bodies.
type Options struct {
	// Required makes a request without a key fail with 400. Otherwise such
	// requests pass through unprotected.
	Required bool
	// Methods are the methods the middleware applies to (default POST and PATCH,
	// the non-idempotent ones); others pass through untouched.
	Methods []string
	// Retention is how long a key is remembered after its first request started
	// or completed (default 24h). A key reused after that runs again. Expired
	// records are ignored at once and deleted by a purge that runs at most every
	// PurgeEvery, after a response has been written.
	Retention time.Duration
	// LockTimeout bounds how long a first request holds its key in flight
	// (default 1m). If it crashes, a retry after that takes the key over and runs
	// the request. Make it longer than the handler's slowest run: a retry that
	// takes over a request that is in fact still running runs it a second time.
	LockTimeout time.Duration
	// MaxBodyBytes bounds the request body read for the fingerprint (default
	// 1 MiB); a larger body gets 413.
	MaxBodyBytes int64
	// Identity returns the client's identity (an API key id, an account), or ""
	// if unknown. Keys are scoped by it: two clients may use the same key.
	Identity func(*http.Request) string
	// Fingerprint hashes the request's payload; a key reused with another
	// fingerprint gets 422. Default: SHA-256 of method, path, query and body.
	Fingerprint func(r *http.Request, body []byte) string
	// ReplayHeaders are the response headers stored and replayed (default
	// DefaultReplayHeaders).
	ReplayHeaders []string
	// StoreServerErrors stores 5xx responses too. By default a 5xx releases the
	// key, so a retry runs the request again (the draft leaves this open; a
	// server error usually means nothing was done).
	StoreServerErrors bool
	// PurgeEvery is the least time between purges of expired keys (default 10m;
	// negative disables purging, for stores purged elsewhere).
	PurgeEvery time.Duration
	// Logger receives store failures that cannot be reported to the client
	// (default slog.Default()).
	Logger *slog.Logger
}

// errorBody is the JSON of the middleware's own error responses, in the project's
// shape: {"error": "...", "code": "..."}.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Middleware returns HTTP middleware with the IETF Idempotency-Key draft's
// semantics, over store:
//
//   - The first request with a key runs; its status, the ReplayHeaders and body are
//     stored (5xx only with StoreServerErrors).
//   - A retry with the same key and payload gets the stored response again, with
//     Idempotent-Replayed: true, without running the handler.
//   - While the first request runs, a retry gets 409 with Retry-After.
//   - The same key with another payload (fingerprint) gets 422.
//   - A missing key gets 400 if Required; a malformed key 400 always.
//   - A body over MaxBodyBytes gets 413; a store failure 503.
//
// Error responses are JSON {"error","code"}. Responses are buffered whole before
// they are stored and sent, so handlers that stream or hijack do not fit.
func Middleware(store Store, opts Options) func(http.Handler) http.Handler {
	m := &middleware{store: store, o: opts}
	if m.o.Methods == nil {
		m.o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if m.o.Retention <= 0 {
		m.o.Retention = DefaultRetention
	}
	if m.o.LockTimeout <= 0 {
		m.o.LockTimeout = DefaultLockTimeout
	}
	if m.o.MaxBodyBytes <= 0 {
		m.o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if m.o.Fingerprint == nil {
		m.o.Fingerprint = Fingerprint
	}
	if m.o.ReplayHeaders == nil {
		m.o.ReplayHeaders = DefaultReplayHeaders
	}
	if m.o.PurgeEvery == 0 {
		m.o.PurgeEvery = DefaultPurgeEvery
	}
	if m.o.Logger == nil {
		m.o.Logger = slog.Default()
	}
	m.lastPurge.Store(time.Now().UnixNano())
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

type middleware struct {
	store     Store
	o         Options
	lastPurge atomic.Int64
}

func (m *middleware) applies(method string) bool {
	for _, x := range m.o.Methods {
		if strings.EqualFold(x, method) {
			return true
		}
	}
	return false
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.applies(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	raw, present := r.Header[http.CanonicalHeaderKey(HeaderKey)]
	if !present {
		if m.o.Required {
			writeError(w, http.StatusBadRequest, "idempotency_key_missing", "the "+HeaderKey+" header is required for "+r.Method+" requests")
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	key, err := ParseKey(strings.Join(raw, ","))
	if err != nil {
		writeError(w, http.StatusBadRequest, "idempotency_key_invalid", err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.o.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the request body is larger than %d bytes", m.o.MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "body_unreadable", "cannot read the request body: "+err.Error())
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	storeKey := ScopedKey(m.identity(r), key)
	fp := m.o.Fingerprint(r, body)

	claim, err := m.store.Begin(r.Context(), storeKey, fp, m.o.LockTimeout, m.o.Retention)
	if err != nil {
		m.o.Logger.Error("idempotency: begin", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", "the idempotency store is unavailable; retry later")
		return
	}
	switch claim.State {
	case Completed:
		replay(w, claim.Response)
		return
	case InFlight:
		secs := int(math.Ceil(claim.RetryAfter.Seconds()))
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, http.StatusConflict, "request_in_flight", "a request with this "+HeaderKey+" is still being processed")
		return
	case Mismatch:
		writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused", "this "+HeaderKey+" was used for a different request payload")
		return
	case Started:
	default:
		writeError(w, http.StatusInternalServerError, "internal", "unknown idempotency state "+claim.State.String())
		return
	}

	rec := httpbuf.New()
	finished := false
	defer func() {
		if !finished {
			// The handler panicked: free the key so that a retry runs again.
			m.release(storeKey, claim.Owner)
		}
	}()
	next.ServeHTTP(rec, r)
	finished = true
	resp := responseOf(rec, m.o.ReplayHeaders)
	if resp.Status >= 500 && !m.o.StoreServerErrors {
		m.release(storeKey, claim.Owner)
	} else if err := m.store.Complete(context.WithoutCancel(r.Context()), storeKey, claim.Owner, resp, m.o.Retention); err != nil {
		// The work is done; the client gets its response. A retry will see the
		// record in flight until the lock times out (or, if it was taken over,
		// the other request's outcome).
		m.o.Logger.Error("idempotency: complete", "err", err)
	}
	rec.SendTo(w)
	m.maybePurge()
}

func (m *middleware) identity(r *http.Request) string {
	if m.o.Identity == nil {
		return ""
	}
	return m.o.Identity(r)
}

func (m *middleware) release(key, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.store.Release(ctx, key, owner); err != nil && !errors.Is(err, ErrNotOwner) {
		m.o.Logger.Error("idempotency: release", "err", err)
	}
}

// maybePurge purges expired keys if PurgeEvery has passed since the last purge;
// one request at a time does it, after its response was written.
func (m *middleware) maybePurge() {
	if m.o.PurgeEvery < 0 {
		return
	}
	last := m.lastPurge.Load()
	now := time.Now().UnixNano()
	if now-last < int64(m.o.PurgeEvery) || !m.lastPurge.CompareAndSwap(last, now) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.store.Purge(ctx); err != nil {
		m.o.Logger.Error("idempotency: purge", "err", err)
	}
}

// ParseKey returns the key of an Idempotency-Key header value: a quoted
// structured-field string ("abc") as the draft specifies, or a bare token. The key
// must be 1 to MaxClientKeyLen printable ASCII characters without spaces, quotes or
// backslashes.
func ParseKey(v string) (string, error) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" || len(v) > MaxClientKeyLen {
		return "", fmt.Errorf("idempotency: the %s must be 1 to %d characters", HeaderKey, MaxClientKeyLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' || c == ',' {
			return "", fmt.Errorf("idempotency: the %s must be printable ASCII without spaces, quotes, commas or backslashes", HeaderKey)
		}
	}
	return v, nil
}

// ScopedKey returns the store key of a client key: the key alone if identity is
// empty, else the key prefixed by a hash of the identity, so that clients never
// see each other's keys.
func ScopedKey(identity, key string) string {
	if identity == "" {
		return "k:" + key
	}
	h := sha256.Sum256([]byte(identity))
	return "i:" + hex.EncodeToString(h[:16]) + ":" + key
}

// Fingerprint is the default request fingerprint: hex SHA-256 of the method, the
// escaped path, the raw query and the body, separated so that no two requests
// collide by shifting bytes between them. Headers are not part of it.
func Fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d:%s\n%d:%s\n", r.Method, len(r.URL.EscapedPath()), r.URL.EscapedPath(), len(r.URL.RawQuery), r.URL.RawQuery)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: msg, Code: code})
}

func replay(w http.ResponseWriter, resp *Response) {
	if resp == nil {
		writeError(w, http.StatusInternalServerError, "internal", "the stored response is missing")
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set(HeaderReplayed, "true")
	w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// responseOf is what the store keeps of rec's answer: its status, body and the
// header fields named in keep, with a Content-Type sniffed from the body if the
// handler set none (on rec too, so that the first answer says the same).
func responseOf(rec *httpbuf.Response, keep []string) *Response {
	body := rec.Body()
	if rec.Header().Get("Content-Type") == "" && len(body) > 0 {
		rec.Header().Set("Content-Type", http.DetectContentType(body))
	}
	h := http.Header{}
	for _, k := range keep {
		if vs := rec.Header().Values(k); len(vs) > 0 {
			h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	return &Response{Status: rec.Status(), Header: h, Body: append([]byte(nil), body...)}
}
