package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "fence/"

// DefaultDialTimeout bounds Open's first contact with the cluster when neither the
// context nor Options.DialTimeout gives a shorter bound.
const DefaultDialTimeout = 5 * time.Second

// Options configure a Locker, a KV or a Store. The zero value (or nil) is usable.
type Options struct {
	// Prefix is prepended to every etcd key this package uses: locks live under
	// Prefix+"lock/", their holders' owners under Prefix+"owner/", their token
	// records under Prefix+"token/", and the fenced KV under Prefix+"kv/". Empty means DefaultPrefix. Lockers and KVs sharing a
	// prefix share locks and data (that is how several servers cooperate).
	Prefix string
	// Clock measures the holder's local lease deadlines and the wait of an Acquire;
	// nil means driver.SystemClock.
	Clock driver.Clock
	// DialTimeout bounds Open's connection check; zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// Username and Password, if set, authenticate Open's client.
	Username, Password string
	// FastExpiry makes a lock that its holder stops renewing change hands about
	// its TTL after the holder's last renewal, instead of when etcd expires the
	// holder's etcd lease (whole seconds, at least etcd's minimum lease TTL, plus
	// up to 500 ms): each renewal is written (one Raft write per renewal), and a
	// waiter that has seen no renewal for the holder's TTL, plus a margin, on its
	// own monotonic clock ends the grant in a transaction that compares the
	// renewal it saw (see "Fast expiry" in docs/etcd.md). Every Locker that
	// renews leases on the prefix should set it alike: a Locker without it
	// still writes the renewals of grants made with it, one extra request each.
	// The etcd lease of each grant then has one spare second, so that a pooled
	// lease taken again soon needs no keep-alive: a grant nobody waits for stays
	// up to a second longer before etcd deletes it.
	FastExpiry bool
	// FIFO makes waiters on a name be granted in the order they started to wait
	// (P10): each waiter keeps a waiter key, and only the waiter whose key has the
	// lowest create revision may be granted, as etcd's concurrency.Mutex does; an
	// acquire that does not wait, or first tries, is not granted past a waiter.
	// Every Locker that acquires on the prefix should set it alike: one without
	// it does not look at the queue (beyond the waiter keys' hold on shared
	// acquires).
	FIFO bool
}

func (o *Options) prefix() string {
	if o == nil || o.Prefix == "" {
		return DefaultPrefix
	}
	return o.Prefix
}

func (o *Options) fast() bool { return o != nil && o.FastExpiry }
func (o *Options) fifo() bool { return o != nil && o.FIFO }

func (o *Options) clock() driver.Clock {
	if o == nil || o.Clock == nil {
		return driver.SystemClock
	}
	return o.Clock
}

// keys names the etcd keys of one prefix.
type keys struct{ prefix string }

func (k keys) lock(name string) string  { return k.prefix + "lock/" + name }
func (k keys) owner(name string) string { return k.prefix + "owner/" + name }
func (k keys) token(name string) string { return k.prefix + "token/" + name }
func (k keys) kv(key string) string     { return k.prefix + "kv/" + key }

// Store is a Locker and a fenced KV on one etcd client that it owns: what `fence
// serve --store etcd://...` runs on. Several Stores (several servers) on one cluster
// with the same prefix serve the same locks and data. Its KV takes only fences the
// prefix's grants were issued (P9: see "Fenced KV" in the package documentation),
// and deletes and purges keys.
type Store struct {
	*Locker
	*KV
	cli *clientv3.Client
}

var (
	_ fence.Locker    = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.Revoker   = (*Store)(nil)
	_ fence.Watcher   = (*Store)(nil)
	_ fence.KV        = (*Store)(nil)
	_ fence.Guard     = (*Store)(nil)
	_ fence.Purger    = (*Store)(nil)

	_ fence.FeatureLocker = (*Store)(nil)
)

// Open connects to the etcd cluster at endpoints (host:port or http://host:port) and
// returns a Store on it. It checks the connection with one read, bounded by ctx and
// Options.DialTimeout. It returns an error matching fence.ErrInvalid for no or empty
// endpoints and fence.ErrUnavailable if the cluster cannot be reached.
func Open(ctx context.Context, endpoints []string, opts *Options) (*Store, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("etcd: open: %w", invalid("endpoints", "", "no endpoint given"))
	}
	for _, e := range endpoints {
		if strings.TrimSpace(e) == "" {
			return nil, fmt.Errorf("etcd: open: %w", invalid("endpoints", strings.Join(endpoints, ","), "contains an empty endpoint"))
		}
	}
	timeout := DefaultDialTimeout
	cfg := clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()}
	if opts != nil {
		if opts.DialTimeout > 0 {
			timeout = opts.DialTimeout
		}
		cfg.Username, cfg.Password = opts.Username, opts.Password
	}
	cfg.DialTimeout = timeout
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: open %s: %w", strings.Join(endpoints, ","), storeErr(err))
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := cli.Get(cctx, opts.prefix()+"ping", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd: open %s: %w", strings.Join(endpoints, ","), storeErr(err))
	}
	kv := NewKV(cli, opts)
	kv.issued = true // the Store grants the locks its KV fences for (P9)
	return &Store{Locker: NewLocker(cli, opts), KV: kv, cli: cli}, nil
}

// NewStore returns a Store on cli, a client the caller made and keeps (Close does
// not close it): the Store of `fence serve` in cluster mode, on its node's
// in-process client. Like Open's, its KV takes only fences its grants issued.
func NewStore(cli *clientv3.Client, opts *Options) *Store {
	kv := NewKV(cli, opts)
	kv.issued = true // the Store grants the locks its KV fences for (P9)
	return &Store{Locker: NewLocker(cli, opts), KV: kv}
}

// Close ends waits in progress (they return fence.ErrClosed) and closes the client
// Open made (not NewStore's). Leases granted through the Store stay held until
// they expire. It returns the client's close error, if any; calling it again
// returns nil.
func (s *Store) Close() error {
	if s.Locker.closeOnce() {
		return nil
	}
	s.KV.closed.Store(true)
	if s.cli == nil {
		return nil
	}
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcd: close: %w", err)
	}
	return nil
}
