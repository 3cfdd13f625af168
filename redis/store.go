package redis

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
)

// DefaultOpenTimeout bounds Open's connection check (PING) when ctx has no earlier
// deadline.
const DefaultOpenTimeout = 5 * time.Second

// Store is a Locker and a fenced KV on one go-redis client that it owns: what `fence
// serve --store redis://...` runs on. Several Stores (several servers) on one Redis
// with the same Options.Prefix serve the same locks and the same data. Its KV is
// NewIssuedKV's: it takes only fences the prefix's counters issued (P9), and
// deletes and purges keys.
type Store struct {
	*Locker
	*KV
	client    *goredis.Client
	closeOnce sync.Once
	closeErr  error
}

var (
	_ fence.Locker    = (*Store)(nil)
	_ fence.Healer    = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.Watcher   = (*Store)(nil)
	_ fence.KV        = (*Store)(nil)
	_ fence.Guard     = (*Store)(nil)
	_ fence.Purger    = (*Store)(nil)
)

// Open connects to the Redis server of rawURL and returns a Store on it, with opts
// for its Locker and KV (nil means defaults). rawURL is
// redis://[[user]:password@]host[:port][/db] or rediss://... for TLS, with the query
// options of go-redis's ParseURL (dial_timeout, pool_size, ...). Open checks the
// connection with PING, bounded by ctx and DefaultOpenTimeout.
//
// It returns an error matching fence.ErrInvalid for a URL that is not a redis:// or
// rediss:// URL or that ParseURL refuses, or for bad opts; fence.ErrUnavailable if the
// server cannot be reached; and the server's error (wrapped) if it refuses the
// connection, e.g. a wrong password. Error messages never show the password.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	shown := redact(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return nil, fmt.Errorf("redis: open %s: %w", shown, &fence.InvalidError{Field: "url", Value: shown, Reason: "want redis://[user:password@]host:port[/db] or rediss://..."})
	}
	copts, err := goredis.ParseURL(rawURL)
	if err != nil {
		// ParseURL's messages name the offending part (scheme, db number, option), not
		// the password.
		return nil, fmt.Errorf("redis: open %s: %w", shown, &fence.InvalidError{Field: "url", Value: shown, Reason: strings.TrimPrefix(err.Error(), "redis: ")})
	}
	client := goredis.NewClient(copts)
	locker, err := NewLocker(client, opts)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: open %s: %w", shown, err)
	}
	kv, err := NewIssuedKV(client, opts)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: open %s: %w", shown, err)
	}
	pctx, cancel := context.WithTimeout(ctx, DefaultOpenTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: open %s: %w", shown, translate(err))
	}
	return &Store{Locker: locker, KV: kv, client: client}, nil
}

// redact drops the password from a URL for messages; a URL that does not parse is
// cut after its scheme, in case it holds credentials.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		scheme, _, _ := strings.Cut(raw, ":")
		return scheme + ":..."
	}
	return u.Redacted()
}

// Close ends waiting Acquires (they return fence.ErrClosed), makes further calls
// fail with fence.ErrClosed, and closes the client Open made. Leases granted
// through the Store stay held until they expire or are released through another
// client. It returns the client's close error, if any; calling it again returns the
// same.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.KV.closed.Store(true)
		_ = s.Locker.Close() // always nil; waits for background releases, which need the client
		if err := s.client.Close(); err != nil {
			s.closeErr = fmt.Errorf("redis: close: %w", err)
		}
	})
	return s.closeErr
}
