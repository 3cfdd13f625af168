package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/redis"
)

// openRedisStore serves locks and the fenced KV from one Redis server:
// --store redis://[user:password@]host:port[/db] (rediss:// for TLS). Servers on
// one Redis share locks and data; waiters are woken by (sharded) pub/sub. A value
// stored there is at most redis.MaxValueLen bytes, whatever --max-value says, and an
// acknowledged write can be lost by a Redis failover (see package redis).
func openRedisStore(ctx context.Context, u *url.URL, _ string) (*servedStore, error) {
	// go-redis logs dial retries from its pool to stderr by itself; the error Open
	// returns already says what failed, and `fence serve` errors are one line.
	goredis.SetLogger(goredisLog{})
	s, err := redis.Open(ctx, u.String(), nil)
	if err != nil {
		if errors.Is(err, fence.ErrInvalid) {
			return nil, usageError{fmt.Errorf("--store: %w", err)}
		}
		return nil, fmt.Errorf("serve: %w", err)
	}
	return &servedStore{locker: s, kv: s, close: s.Close, desc: "redis:" + redactURL(u.String())}, nil
}

// goredisLog sends go-redis's internal log lines to slog's default logger at debug
// level.
type goredisLog struct{}

func (goredisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().Log(ctx, slog.LevelDebug, fmt.Sprintf(format, v...), "component", "go-redis")
}
