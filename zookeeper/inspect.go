package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Inspect reports the state of name: Held, Token (the holder's czxid), Owner and
// ExpiresIn (by the leader's clock) of the holder, and LastToken as the directory's
// pzxid (the zxid of its last child creation or deletion), which is at least every
// token issued for name and below every later one. For a semaphore or shared
// leases it also reports Limit, Shared and every live lease in Holders, as
// driver.Info shapes them; a node of the holding group that has not claimed yet
// (a promoted waiter, or a permit that is taking its slot) is not among the
// Holders, but makes the name held if no lease is (Token and Owner its own,
// ExpiresIn 0). A lock never acquired has LastToken 0. It returns fence.ErrInvalid
// for a bad name, fence.ErrUnavailable if ZooKeeper cannot be reached and
// fence.ErrClosed after Close.
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

// Revoke ends every live lease on name now, whoever holds them (see fence.Revoker):
// it deletes each holder's node (a permit's with its slot node) with the version it
// read, so a renewal in between makes it judge that node again, and a later grant
// (always another node) is never touched. The waiters behind are woken by their
// watches, as by a Release; the revoked holders' Renew and Release then return
// fence.ErrNotHeld. It returns fence.ErrNotHeld if no unexpired lease is held (or
// the leases ended meanwhile), fence.ErrInvalid for a bad name,
// fence.ErrUnavailable if ZooKeeper cannot be reached or ctx ends, and
// fence.ErrClosed after Close.
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
	var targets map[string]bool // the leases seen first: later grants are never ended
	ended := false
	for attempt := 0; attempt < 3; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
		}
		_, hs, err := l.inspect(name)
		if err != nil {
			return err
		}
		if targets == nil {
			targets = map[string]bool{}
			for _, h := range hs {
				targets[h.path] = true
			}
		}
		again := false
		for _, h := range hs {
			if !targets[h.path] {
				continue
			}
			changed, err := l.endHeld(h)
			switch {
			case errors.Is(err, fence.ErrNotHeld):
			case err != nil:
				return err
			case changed:
				again = true
			default:
				ended = true
			}
		}
		if !again {
			if !ended {
				return fence.ErrNotHeld // free, expired, or the leases we saw ended
			}
			return nil
		}
	}
	return fmt.Errorf("%w: the holders' nodes kept changing", fence.ErrUnavailable)
}

// endHeld deletes the holder's node h (and its slot node) if its data is still at
// the version it was judged at. It returns fence.ErrNotHeld if the node is gone
// (released, taken over, its session ended: a later grant is another node, never
// deleted here), and again true if the node changed (renewed, or a promoted waiter
// claimed): the same lease, to judge again.
func (l *Locker) endHeld(h heldNode) (again bool, err error) {
	switch err := l.removeNode(path.Dir(h.path), h.path, h.version, h.slot); {
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
	if err := fence.ValidateName(name); err != nil {
		return fmt.Errorf("zookeeper: %s: %w", op, err)
	}
	if err := l.checkOpen(); err != nil {
		return fmt.Errorf("zookeeper: %s %q: %w", op, name, err)
	}
	return nil
}

// heldNode is the node of a lease Inspect reports as held: its path, the data
// version it was judged at, and its slot (-1 if it holds none).
type heldNode struct {
	path    string
	version int32
	slot    int
}

// inspect reads the state of name and the nodes of its live leases, in queue order.
func (l *Locker) inspect(name string) (fence.LockInfo, []heldNode, error) {
	info := fence.LockInfo{Name: name}
	dir := l.dir(name)
	for attempt := 0; attempt < 3; attempt++ {
		kids, st, err := l.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return info, nil, nil
		}
		if err != nil {
			return info, nil, zkErr(err)
		}
		info.LastToken = fence.Token(st.Pzxid)
		nodes := parseNodes(kids)
		if len(nodes) == 0 {
			return info, nil, nil
		}
		ms, _, gone, err := l.readMembers(dir, nodes[:group(nodes)], -1)
		if err != nil {
			return info, nil, err
		}
		if gone {
			continue
		}
		var now time.Time
		if slices.ContainsFunc(ms, func(m member) bool { return m.d.held }) {
			if now, err = l.serverNow(dir); err != nil {
				return info, nil, err
			}
		}
		var (
			live      []driver.Holding
			held      []heldNode
			unclaimed *member
		)
		for _, m := range ms {
			k := nodes[0].kind
			exp, ok := m.expires()
			if ok && !now.Before(exp) {
				continue // expired, not taken over yet
			}
			held = append(held, heldNode{path: m.path, version: m.st.Version, slot: m.d.slotOf()})
			if !ok || (k.limit > 0 && !m.d.permit) {
				if unclaimed == nil {
					unclaimed = &m
				}
				continue
			}
			live = append(live, driver.Holding{
				Token: fence.Token(m.st.Czxid), Owner: m.d.owner, Slot: max(m.d.slotOf(), 0),
				Limit: k.limit, Shared: k.shared, Expires: exp,
			})
		}
		info = driver.Info(name, live, info.LastToken, now)
		if !info.Held && unclaimed != nil {
			// A promoted waiter that has not claimed yet: held, expiry unknown.
			info.Held, info.Token, info.Owner = true, fence.Token(unclaimed.st.Czxid), unclaimed.d.owner
			info.LastToken = max(info.LastToken, info.Token)
		}
		return info, held, nil
	}
	return info, nil, fmt.Errorf("%w: lock nodes kept changing", fence.ErrUnavailable)
}

// List returns the locks opts selects (see fence.Inspector), in name order, at
// most opts.Limit (fence.DefaultListLimit if <= 0): by default the held ones (a
// lease unexpired by the leader's clock, or a holder that has not claimed yet,
// as Inspect judges it), with opts.All every lock directory. It reads every lock
// directory's name, then inspects the names in order until it has opts.Limit of
// them, so it costs one round trip plus one Inspect per name inspected. It
// returns fence.ErrUnavailable if ZooKeeper cannot be reached or ctx ends, and
// fence.ErrClosed after Close.
func (l *Locker) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	prefix := opts.Prefix
	if err := l.checkOpen(); err != nil {
		return nil, fmt.Errorf("zookeeper: list %q: %w", prefix, err)
	}
	kids, _, err := l.conn.Children(l.root)
	if errors.Is(err, zk.ErrNoNode) {
		return []fence.LockInfo{}, nil
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
	return driver.ListInspected(ctx, names, opts, func(ctx context.Context, n string) (fence.LockInfo, error) {
		if err := ctx.Err(); err != nil {
			return fence.LockInfo{}, fmt.Errorf("zookeeper: list %q: %w: %w", prefix, fence.ErrUnavailable, err)
		}
		info, _, err := l.inspect(n)
		if err != nil {
			return fence.LockInfo{}, fmt.Errorf("zookeeper: list %q: %w", prefix, err)
		}
		return info, nil
	})
}
