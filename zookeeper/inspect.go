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

// Inspect reports the state of name: Held, Token (the holder's czxid) and Owner from
// the lowest node, ExpiresIn by the leader's clock, and LastToken as the directory's
// pzxid (the zxid of its last child creation or deletion), which is at least every
// token issued for name and below every later one. A lock never acquired has LastToken
// 0. It returns fence.ErrInvalid for a bad name, fence.ErrUnavailable if ZooKeeper
// cannot be reached and fence.ErrClosed after Close.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := l.checkName("inspect", name); err != nil {
		return fence.LockInfo{}, err
	}
	info, _, err := l.inspect(name)
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("zookeeper: inspect %q: %w", name, err)
	}
	return info, nil
}

// Revoke ends the current lease on name now, whoever holds it (see fence.Revoker): it
// deletes the holder's node with the version it read, so a renewal in between makes it
// judge the node again, and a later grant (always another node) is never touched. The
// waiter behind the holder is woken by its watch, as by a Release; the revoked
// holder's Renew and Release then return fence.ErrNotHeld. It returns
// fence.ErrNotHeld if no unexpired lease is held (or the lease ended meanwhile),
// fence.ErrInvalid for a bad name, fence.ErrUnavailable if ZooKeeper cannot be reached
// or ctx ends, and fence.ErrClosed after Close.
func (l *Locker) Revoke(ctx context.Context, name string) error {
	if err := l.checkName("revoke", name); err != nil {
		return err
	}
	if err := l.revoke(ctx, name); err != nil {
		return fmt.Errorf("zookeeper: revoke %q: %w", name, err)
	}
	return nil
}

func (l *Locker) revoke(ctx context.Context, name string) error {
	first := ""
	for attempt := 0; attempt < 3; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
		}
		_, h, err := l.inspect(name)
		if err != nil {
			return err
		}
		if h.path == "" || (first != "" && h.path != first) {
			return fence.ErrNotHeld // free, expired, or the lease we saw ended
		}
		first = h.path
		if again, err := l.endHeld(h); !again {
			return err
		}
	}
	return fmt.Errorf("%w: the holder's node kept changing", fence.ErrUnavailable)
}

// endHeld deletes the holder's node h if its data is still at the version it was
// judged at. It returns fence.ErrNotHeld if the node is gone (released, taken over,
// its session ended: a later grant is another node, never deleted here), and again
// true if the node changed (renewed, or a promoted waiter claimed): the same lease,
// to judge again.
func (l *Locker) endHeld(h heldNode) (again bool, err error) {
	switch err := l.conn.Delete(h.path, h.version); {
	case err == nil:
		return false, nil
	case errors.Is(err, zk.ErrNoNode):
		return false, fence.ErrNotHeld
	case errors.Is(err, zk.ErrBadVersion):
		return true, nil
	default:
		return false, zkErr(err)
	}
}

// checkName returns the error of op on name for a bad name or a closed Locker.
func (l *Locker) checkName(op, name string) error {
	if err := driver.ValidateName(name); err != nil {
		return fmt.Errorf("zookeeper: %s: %w", op, err)
	}
	if err := l.checkOpen(); err != nil {
		return fmt.Errorf("zookeeper: %s %q: %w", op, name, err)
	}
	return nil
}

// heldNode is the node of the lease Inspect reports as held: its path ("" if none is
// held) and the data version it was judged at.
type heldNode struct {
	path    string
	version int32
}

// inspect reads the state of name and, if it is held, the holder's node.
func (l *Locker) inspect(name string) (fence.LockInfo, heldNode, error) {
	info := fence.LockInfo{Name: name}
	dir := l.dir(name)
	for attempt := 0; attempt < 3; attempt++ {
		kids, st, err := l.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return info, heldNode{}, nil
		}
		if err != nil {
			return info, heldNode{}, zkErr(err)
		}
		info.LastToken = fence.Token(st.Pzxid)
		nodes := parseNodes(kids)
		if len(nodes) == 0 {
			return info, heldNode{}, nil
		}
		path := dir + "/" + nodes[0].name
		data, nst, err := l.conn.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return info, heldNode{}, zkErr(err)
		}
		d := parseData(data)
		held := heldNode{path: path, version: nst.Version}
		if !d.held {
			// A promoted waiter that has not claimed yet: held, expiry unknown.
			info.Held, info.Token, info.Owner = true, fence.Token(nst.Czxid), d.owner
			return info, held, nil
		}
		now, err := l.serverNow(dir)
		if err != nil {
			return info, heldNode{}, err
		}
		left := time.UnixMilli(nst.Mtime).Add(d.ttl).Sub(now)
		if left <= 0 {
			return info, heldNode{}, nil // expired, not taken over yet
		}
		info.Held, info.Token, info.Owner, info.ExpiresIn = true, fence.Token(nst.Czxid), d.owner, left
		return info, held, nil
	}
	return info, heldNode{}, fmt.Errorf("%w: lock nodes kept changing", fence.ErrUnavailable)
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
		info, _, err := l.inspect(n)
		if err != nil {
			return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, err)
		}
		out = append(out, info)
	}
	return out, nil
}
