// Package service is the lock service's rules, under every wire: the fair
// waiting queues of acquires, scopes and auth, the checks of fenced writes
// (P9), request ids (a retried acquire finds its grant; a grant whose client
// went away is released unless a retry claimed it), drain, metrics and the
// error codes of the contract. It has no wire in it: package fencehttp is its
// HTTP adapter (routes, JSON, headers, statuses), and each adapter maps a code
// (Code) to its own status or error word, and the message (Message) as it is.
//
// One Service serves every wire of a process, so that waiters over different
// wires share one queue per lock name. Each operation of the HTTP API (DESIGN
// section 6) is one method call: Acquire, Renew, Release (which abandons by
// request id too), Revoke, Heal, Inspect (a blocking query with an index), List,
// KVGet, KVPut, KVDelete, Fence and Purge; Authenticate and AuthToken.Permit
// decide who may call which.
//
// The package is internal so that its API stays free to change while the
// second wire (the Redis protocol) is written on it.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fence"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultTTL           = 30 * time.Second // TTL of an acquire or renew without a TTL
	DefaultMaxWait       = 60 * time.Second // longest single waiting acquire or blocking query
	DefaultBlockingWait  = 30 * time.Second // wait of a blocking query without one (at most MaxWait)
	DefaultMaxValueBytes = 1 << 20          // largest KV value
	// MaxListLimit is the largest limit of a listing.
	MaxListLimit = 10000
)

// Config configures a Service. Only Locker is required; zero limits take the
// defaults above.
type Config struct {
	// Locker grants the leases. If it is also a fence.Inspector, Inspect and List
	// work, a fence.Watcher, blocking queries, a fence.Healer, Heal, a
	// fence.Revoker, Revoke (ErrNotImplemented otherwise).
	Locker fence.Locker
	// KV is the fenced key-value store; if it is also a fence.Guard, Fence works,
	// a fence.Purger, Purge. Nil answers the KV operations ErrNotImplemented.
	KV fence.KV
	// Logger receives structured logs; nil discards them. Lease ids are never logged.
	Logger *slog.Logger
	// Tokens are the credentials the service accepts, with their rights (see
	// AuthToken). With none, no credential is needed.
	Tokens []AuthToken
	// MaxValueBytes bounds KV values (ErrTooLarge beyond).
	MaxValueBytes int64
	// MaxWait caps one waiting acquire and one blocking query; a longer wait is
	// cut to it.
	MaxWait time.Duration
	// MaxWaiters caps the requests that wait at once, whatever their wire:
	// waiting acquires and blocking queries. One more is refused at once with an
	// error of ErrBusy. An acquire granted at once is not counted; every blocking
	// query is. 0 means no cap.
	MaxWaiters int
	// DefaultTTL is the TTL of an acquire or renew without one.
	DefaultTTL time.Duration
	// Registry receives the service's metrics; nil means a new registry with the
	// Go runtime and process collectors.
	Registry *prometheus.Registry
}

// Service is the lock service over a Locker and a KV. It keeps no lock state of
// its own beyond the queues of the waiting acquires it serves and counters for
// metrics, so several servers can share one store.
type Service struct {
	cfg    Config
	log    *slog.Logger
	tokens scopes
	reg    *prometheus.Registry
	m      *metrics
	held   *heldSet

	waiting atomic.Int64 // requests waiting now, against MaxWaiters
	queues  waitQueues   // the waiting acquires, by lock name (wait.go)

	drainOnce sync.Once
	drainCtx  context.Context
	drain     context.CancelFunc
}

// New returns a Service for cfg. It returns an error matching fence.ErrInvalid
// if cfg.Locker is nil, a limit is negative, the default TTL is out of range, or
// a token is empty or has no rights.
func New(cfg Config) (*Service, error) {
	if cfg.Locker == nil {
		return nil, fmt.Errorf("%w: Config.Locker is nil", fence.ErrInvalid)
	}
	if cfg.MaxValueBytes < 0 || cfg.MaxWait < 0 || cfg.DefaultTTL < 0 || cfg.MaxWaiters < 0 {
		return nil, fmt.Errorf("%w: negative limit", fence.ErrInvalid)
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
		return nil, fmt.Errorf("default TTL: %w", err)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, held: newHeldSet(cfg.Locker)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, t := range cfg.Tokens {
		if err := s.tokens.add(t); err != nil {
			return nil, err
		}
	}
	if s.reg == nil {
		s.reg = newRegistry()
	}
	s.m = newMetrics(s.reg, s.held)
	s.drainCtx, s.drain = context.WithCancel(context.Background())
	return s, nil
}

// Registry returns the registry of the service's metrics.
func (s *Service) Registry() *prometheus.Registry { return s.reg }

// MaxValueBytes returns the largest KV value the service takes.
func (s *Service) MaxValueBytes() int64 { return s.cfg.MaxValueBytes }

// Drain prepares a graceful shutdown: Draining reports true, and the waits in
// progress (acquires, blocking queries) end with ErrShuttingDown instead of
// holding the shutdown up for their whole wait.
func (s *Service) Drain() { s.drainOnce.Do(s.drain) }

// Draining reports whether Drain was called.
func (s *Service) Draining() bool { return s.drainCtx.Err() != nil }

// AuthRequired reports whether the service needs a credential (it has tokens).
func (s *Service) AuthRequired() bool { return len(s.tokens.toks) > 0 }

// Authenticate returns the token whose secret is secret, or nil if none is.
// Check AuthRequired first: without tokens every request is let in.
func (s *Service) Authenticate(secret string) *AuthToken { return s.tokens.find(secret) }

// ttlFromMs turns a ttl_ms into a TTL, with the default when absent.
func (s *Service) ttlFromMs(ms *int64) (time.Duration, error) {
	if ms == nil {
		return s.cfg.DefaultTTL, nil
	}
	if *ms <= 0 || *ms > fence.MaxTTL.Milliseconds() {
		return 0, &fence.InvalidError{Field: "ttl_ms", Value: strconv.FormatInt(*ms, 10),
			Reason: fmt.Sprintf("must be between %d and %d", fence.MinTTL.Milliseconds(), fence.MaxTTL.Milliseconds())}
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// RenewRequest is a renew: the lease id and the new TTL in milliseconds (nil:
// the default).
type RenewRequest struct {
	Lease string
	TTLms *int64
}

// Renew extends lease req.Lease of name to its TTL from now, and returns that
// TTL. Errors: fence.ErrInvalid for a bad TTL or lease id, fence.ErrNotHeld when
// the lease is gone, and the store's.
func (s *Service) Renew(ctx context.Context, name string, req RenewRequest) (time.Duration, error) {
	ttl, err := s.ttlFromMs(req.TTLms)
	if err == nil {
		err = fence.ValidateLeaseID(req.Lease)
	}
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := s.cfg.Locker.Renew(ctx, name, req.Lease, ttl); err != nil {
		if errors.Is(err, fence.ErrNotHeld) {
			s.m.lost.Inc()
			s.log.Info("renew refused: lease not held", "lock", name)
		}
		return 0, err
	}
	s.held.set(name, req.Lease, start.Add(ttl))
	return ttl, nil
}

// ReleaseRequest is a release: of Lease, or, with RequestID instead, the
// abandon of the acquire of that request id (see abandon.go), with that
// acquire's TTLms, Limit and Shared to find its grant by.
type ReleaseRequest struct {
	Lease     string
	RequestID string
	TTLms     *int64
	Limit     *int
	Shared    bool
}

// Release ends the lease req.Lease of name, or abandons the acquire of
// req.RequestID. Errors: fence.ErrInvalid for a bad request, fence.ErrNotHeld
// when there is no such lease or grant, ErrNotImplemented for an abandon on a
// store that keeps no request ids, and the store's.
func (s *Service) Release(ctx context.Context, name string, req ReleaseRequest) error {
	if err := s.checkRelease(req); err != nil {
		return err
	}
	if req.RequestID != "" {
		return s.abandon(ctx, name, req)
	}
	if err := s.cfg.Locker.Release(ctx, name, req.Lease); err != nil {
		return err
	}
	s.held.remove(name, req.Lease)
	return nil
}

// Revoke ends the current lease(s) of name now, whoever holds them: fence.Revoker,
// the operator's safe force-release. Errors: ErrNothingToRevoke when no
// unexpired lease holds name, ErrNotImplemented when the store cannot revoke,
// and the store's.
func (s *Service) Revoke(ctx context.Context, name string) error {
	rv, ok := s.cfg.Locker.(fence.Revoker)
	if !ok {
		return Because(ErrNotImplemented, "not supported by this server's store (it cannot end a lease without its lease id)")
	}
	if err := rv.Revoke(ctx, name); err != nil {
		if errors.Is(err, fence.ErrNotHeld) {
			err = Because(ErrNothingToRevoke, "not held (free, or its lease expired): nothing to revoke")
		}
		return err
	}
	s.held.removeAll(name)
	s.m.revokes.Inc()
	s.log.Info("revoked", "lock", name)
	return nil
}

// Heal raises name's token counter above seen: fence.Healer (P4). Errors:
// fence.ErrInvalid for a bad token, a *fence.HealBoundError beyond the bound,
// ErrNotImplemented when the store has nothing to heal, and the store's.
func (s *Service) Heal(ctx context.Context, name string, seen fence.Token) error {
	if err := fence.ValidateToken(seen); err != nil {
		return err
	}
	h, ok := s.cfg.Locker.(fence.Healer)
	if !ok {
		return Because(ErrNotImplemented, "not supported by this server's store (its counters cannot go backwards, so there is nothing to heal)")
	}
	if err := h.Heal(ctx, name, seen); err != nil {
		return err
	}
	s.log.Info("healed", "lock", name, "seen", uint64(seen))
	return nil
}

func (s *Service) inspector() (fence.Inspector, error) {
	in, ok := s.cfg.Locker.(fence.Inspector)
	if !ok {
		return nil, Because(ErrNotImplemented, "not supported by this server's store (it cannot report lock state)")
	}
	return in, nil
}

// InspectRequest is an inspect, or with Index a blocking query: answered when
// the lock's change index differs from Index, or when its wait ends. Index and
// WaitMs are as the client sent them, nil when it did not, so that the service
// words their errors. WaitMs, in milliseconds, goes only with Index; without
// it a blocking query waits DefaultBlockingWait; a wait over MaxWait is cut to
// it.
type InspectRequest struct {
	Index  *string
	WaitMs *string
}

// Inspect returns the state of name (its change index is info.Index()); a
// blocking query waits as InspectRequest says. Errors: fence.ErrInvalid naming
// index or wait_ms, ErrNotImplemented when the store cannot report state (or,
// for a blocking query, watch it), an error of ErrBusy beyond MaxWaiters,
// ErrShuttingDown when the service drains, one of ctx's when it ends, and the
// store's.
func (s *Service) Inspect(ctx context.Context, name string, req InspectRequest) (fence.LockInfo, error) {
	var index uint64
	if req.Index != nil {
		var err error
		if index, err = strconv.ParseUint(*req.Index, 10, 64); err != nil {
			return fence.LockInfo{}, &fence.InvalidError{Field: "index", Value: *req.Index, Reason: "must be a Fence-Index: an integer from 0"}
		}
	}
	wait, err := s.blockingWait(req)
	if err != nil {
		return fence.LockInfo{}, err
	}
	in, err := s.inspector()
	if err != nil {
		return fence.LockInfo{}, err
	}
	if req.Index == nil {
		return in.Inspect(ctx, name)
	}
	unpark, err := s.park()
	if err != nil {
		return fence.LockInfo{}, err
	}
	defer unpark()
	return s.blockingQuery(ctx, in, name, index, wait)
}

// blockingWait returns the wait of the blocking query req: its wait_ms, cut
// to MaxWait, or DefaultBlockingWait (at most MaxWait) without one.
func (s *Service) blockingWait(req InspectRequest) (time.Duration, error) {
	if req.WaitMs == nil {
		return min(DefaultBlockingWait, s.cfg.MaxWait), nil
	}
	wait := *req.WaitMs
	if req.Index == nil {
		return 0, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "needs index: it bounds a blocking query"}
	}
	ms, err := strconv.ParseInt(wait, 10, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "must be an integer"}
	case ms < 0:
		return 0, &fence.InvalidError{Field: "wait_ms", Value: wait, Reason: "must not be negative"}
	case err != nil || ms >= s.cfg.MaxWait.Milliseconds():
		return s.cfg.MaxWait, nil // out of range above: cut, as any wait over the maximum
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// ListRequest is a listing: the names that start with Prefix, at most Limit
// ("" or "0": the store's default), the held ones, or with All "true" every
// name the store knows. Limit and All are as the client sent them ("" when it
// did not), so that the service words their errors.
type ListRequest struct {
	Prefix string
	Limit  string
	All    string
}

// List returns the locks req asks for, in name order. Errors: fence.ErrInvalid
// naming prefix, limit or all, ErrNotImplemented when the store cannot report
// state, and the store's.
func (s *Service) List(ctx context.Context, req ListRequest) ([]fence.LockInfo, error) {
	in, err := s.inspector()
	if err != nil {
		return nil, err
	}
	if req.Prefix != "" {
		if err := fence.ValidateName(req.Prefix); err != nil {
			reason := err.Error()
			var inv *fence.InvalidError
			if errors.As(err, &inv) {
				reason = inv.Reason
			}
			return nil, &fence.InvalidError{Field: "prefix", Value: req.Prefix, Reason: reason}
		}
	}
	limit := 0
	if v := req.Limit; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxListLimit {
			return nil, &fence.InvalidError{Field: "limit", Value: v, Reason: fmt.Sprintf("must be an integer in [0, %d]", MaxListLimit)}
		}
		limit = n
	}
	// all=true lists every name the store knows; absent or false, the held ones.
	all := false
	switch req.All {
	case "", "false":
	case "true":
		all = true
	default:
		return nil, &fence.InvalidError{Field: "all", Value: req.All, Reason: "must be true or false"}
	}
	return in.List(ctx, fence.ListOptions{Prefix: req.Prefix, Limit: limit, All: all})
}
