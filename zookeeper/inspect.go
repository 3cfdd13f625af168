package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Inspect reports the state of name: Held and Token (the holder's czxid) from the
// lowest node, ExpiresIn by the leader's clock, and LastToken as the directory's pzxid
// (the zxid of its last child creation or deletion), which is at least every token
// issued for name and below every later one. A lock never acquired has LastToken 0. It
// returns fence.ErrInvalid for a bad name, fence.ErrUnavailable if ZooKeeper cannot
// be reached and fence.ErrClosed after Close.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := driver.ValidateName(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("zookeeper: inspect: %w", err)
	}
	if err := l.checkOpen(); err != nil {
		return fence.LockInfo{}, fmt.Errorf("zookeeper: inspect %q: %w", name, err)
	}
	info, err := l.inspect(name)
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("zookeeper: inspect %q: %w", name, err)
	}
	return info, nil
}

func (l *Locker) inspect(name string) (fence.LockInfo, error) {
	info := fence.LockInfo{Name: name}
	dir := l.dir(name)
	for attempt := 0; attempt < 3; attempt++ {
		kids, st, err := l.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return info, nil
		}
		if err != nil {
			return info, zkErr(err)
		}
		info.LastToken = fence.Token(st.Pzxid)
		nodes := parseNodes(kids)
		if len(nodes) == 0 {
			return info, nil
		}
		data, nst, err := l.conn.Get(dir + "/" + nodes[0].name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return info, zkErr(err)
		}
		ttl, held := parseHold(data)
		if !held {
			// A promoted waiter that has not claimed yet: held, expiry unknown.
			info.Held, info.Token = true, fence.Token(nst.Czxid)
			return info, nil
		}
		now, err := l.serverNow(dir)
		if err != nil {
			return info, err
		}
		left := time.UnixMilli(nst.Mtime).Add(ttl).Sub(now)
		if left <= 0 {
			return info, nil // expired, not taken over yet
		}
		info.Held, info.Token, info.ExpiresIn = true, fence.Token(nst.Czxid), left
		return info, nil
	}
	return info, fmt.Errorf("%w: lock nodes kept changing", fence.ErrUnavailable)
}

// List returns the locks whose names start with prefix, held or not, in name order, at
// most limit (fence.DefaultListLimit if limit <= 0). It reads every lock directory's
// name, so it costs one round trip plus one Inspect per lock returned. It returns
// fence.ErrUnavailable if ZooKeeper cannot be reached or ctx ends, and
// fence.ErrClosed after Close.
func (l *Locker) List(ctx context.Context, prefix string, limit int) ([]fence.LockInfo, error) {
	if err := l.checkOpen(); err != nil {
		return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, err)
	}
	kids, _, err := l.conn.Children(l.root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, zkErr(err))
	}
	var names []string
	for _, k := range kids {
		n, ok := decodeName(k)
		if ok && strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if limit = driver.ListLimit(limit); len(names) > limit {
		names = names[:limit]
	}
	out := make([]fence.LockInfo, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("zookeeper: list %q: %w: %w", prefix, fence.ErrUnavailable, err)
		}
		info, err := l.inspect(n)
		if err != nil {
			return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, err)
		}
		out = append(out, info)
	}
	return out, nil
}
