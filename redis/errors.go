package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
)

// ErrWrongType means a key fence uses holds something fence did not write: the lock
// key is not a string, or the counter key is not a decimal token. fence refuses to
// grant or heal rather than guess; nothing was changed. Delete or rename the foreign
// key (or use another Options.Prefix) to recover.
var ErrWrongType = errors.New("redis: key holds a value fence did not write")

// ErrNotReplicated means the acquire script granted the lock but fewer replicas (or
// AOF fsyncs) than Options asked for acknowledged it within Options.WaitTimeout. The
// Locker released the lock and returned no lease (fail closed); the token was used
// up. It matches fence.ErrUnavailable too.
var ErrNotReplicated = fmt.Errorf("redis: grant not acknowledged by enough replicas: %w", fence.ErrUnavailable)

// translate turns a go-redis error into one matching a fence sentinel, keeping the
// original in the chain for detail. Errors of the scripts (FENCE_* replies) become
// ErrWrongType or fence.ErrTokenExhausted; replies saying the server cannot serve
// writes right now, and network errors, become fence.ErrUnavailable.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
	}
	if errors.Is(err, goredis.Nil) {
		// The scripts always reply; a nil reply means something else answered.
		return fmt.Errorf("%w: unexpected nil reply", fence.ErrUnavailable)
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		// Script errors arrive as "FENCE_X text script: ..." or wrapped in "ERR ...".
		for _, tag := range []struct {
			code     string
			sentinel error
		}{
			{"FENCE_WRONGTYPE ", ErrWrongType},
			{"FENCE_BADCOUNTER ", ErrWrongType},
			{"FENCE_EXHAUSTED ", fence.ErrTokenExhausted},
		} {
			if i := strings.Index(msg, tag.code); i >= 0 {
				text := msg[i+len(tag.code):]
				if j := strings.Index(text, " script:"); j >= 0 {
					text = text[:j]
				}
				return fmt.Errorf("%s: %w", text, tag.sentinel)
			}
		}
		switch code, _, _ := strings.Cut(msg, " "); code {
		case "WRONGTYPE":
			return fmt.Errorf("%w: %s", ErrWrongType, msg)
		case "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK",
			"NOREPLICAS", "BUSY", "NOSCRIPT", "OOM", "MISCONF", "UNBLOCKED", "NOTBUSY":
			return fmt.Errorf("%w: server replied %q", fence.ErrUnavailable, msg)
		}
		return fmt.Errorf("server error: %w", err)
	}
	// Network errors, pool timeouts, a closed client: the store could not be asked.
	return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
}

// ambiguous reports whether an acquire that failed with err may nonetheless have
// been applied by the server (the reply was lost), so the lease should be released.
func ambiguous(err error) bool {
	var rerr goredis.Error
	return err != nil && !errors.As(err, &rerr)
}
