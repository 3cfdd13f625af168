package zookeeper

import (
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
)

// Who holds a name: the holding group.
//
// The nodes of a name, in sequence order, are one queue for every kind. The
// holding group is the longest run of nodes from the lowest that may hold at
// once: the lowest node alone if it is a lock; else the nodes of the lowest's kind
// that follow it without a node of another kind in between, at most the
// semaphore's limit (fence.MaxLimit for shared leases). A node holds the name
// while it is in the group. Nodes only join at the end of the queue, so a node's
// group membership, once gained, lasts until the node is deleted, and the group of
// a semaphore never has more than its limit of nodes. Every node in the group was
// created before every node behind it, so every grant's czxid is above those of
// the grants before it, whatever their kinds.

// group returns how many of nodes, from the lowest, hold the name.
func group(nodes []node) int {
	if len(nodes) == 0 {
		return 0
	}
	k := nodes[0].kind
	most := k.limit
	switch {
	case k.shared:
		most = fence.MaxLimit
	case k.limit == 0:
		return 1
	}
	n := 1
	for n < len(nodes) && n < most && nodes[n].kind == k {
		n++
	}
	return n
}

// member is a node of the holding group as read.
type member struct {
	path string
	st   *zk.Stat
	d    nodeData
}

// expires returns the member's expiry by the ZooKeeper leader's clock (mtime plus
// TTL), and false if its data has no TTL (a promoted waiter that has not claimed).
func (m member) expires() (time.Time, bool) {
	if !m.d.held {
		return time.Time{}, false
	}
	return time.UnixMilli(m.st.Mtime).Add(m.d.ttl), true
}

// readMembers reads the data of nodes (of dir) at once, setting a data watch on
// the one at index watch (none if it is out of range) and returning its channel.
// A node that is gone is left out of the result and reported by gone.
func (l *Locker) readMembers(dir string, nodes []node, watch int) (ms []member, ch <-chan zk.Event, gone bool, err error) {
	type answer struct {
		data []byte
		st   *zk.Stat
		ch   <-chan zk.Event
		err  error
	}
	answers := make([]answer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &answers[i]
			if i == watch {
				a.data, a.st, a.ch, a.err = l.conn.GetW(dir + "/" + n.name)
			} else {
				a.data, a.st, a.err = l.conn.Get(dir + "/" + n.name)
			}
		}()
	}
	wg.Wait()
	ms = make([]member, 0, len(nodes))
	for i, a := range answers {
		switch {
		case errors.Is(a.err, zk.ErrNoNode):
			gone = true
			continue
		case a.err != nil:
			return nil, nil, false, zkErr(a.err)
		}
		if i == watch {
			ch = a.ch
		}
		ms = append(ms, member{path: dir + "/" + nodes[i].name, st: a.st, d: parseData(a.data)})
	}
	return ms, ch, gone, nil
}

// verdict is what judge found of one member: live (with the time left, 0 if its
// expiry is unknown), gone (deleted as expired, or already gone), or neither: it
// was renewed meanwhile, to read again.
type verdict struct {
	live bool
	left time.Duration
	gone bool
	// until is, for a live member with a TTL, a local time before which it is
	// surely live: the leader's clock was read after it, and renewals only
	// extend it.
	until time.Time
}

// judge judges the members by the ZooKeeper leader's clock (read once, if any
// has a TTL): a member whose mtime+TTL has passed is deleted, with the data
// version it was read at so that a renewal in between wins, and with its slot's
// node. A member without a TTL is live.
//
// Both clock readings are whole milliseconds, and a node may have been written up
// to a millisecond after its mtime, so the TTL has surely passed only once the
// leader's clock is past mtime+TTL (as Renew judges it, and as Redis expires keys).
func (l *Locker) judge(dir string, ms []member) ([]verdict, error) {
	vs := make([]verdict, len(ms))
	var now, sent time.Time
	for i, m := range ms {
		exp, ok := m.expires()
		if !ok {
			vs[i] = verdict{live: true}
			continue
		}
		if now.IsZero() {
			var err error
			sent = time.Now()
			if now, err = l.serverNow(dir); err != nil {
				return nil, err
			}
		}
		if left := exp.Sub(now); left >= 0 {
			vs[i] = verdict{live: true, left: left + time.Millisecond, until: sent.Add(left)}
			continue
		}
		switch err := l.removeNode(dir, m.path, m.st.Version, m.d.slotOf()); {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			vs[i] = verdict{gone: true}
		case errors.Is(err, zk.ErrBadVersion):
		default:
			return nil, zkErr(err)
		}
	}
	return vs, nil
}

// removeNode deletes the lock node path at version (-1: any) and, if slot >= 0,
// its slot's node with it, in one transaction. It returns zk.ErrNoNode if path is
// gone and zk.ErrBadVersion if it changed; a slot node already gone (never so:
// they go together) does not keep the node from being deleted.
func (l *Locker) removeNode(dir, path string, version int32, slot int) error {
	if slot < 0 {
		return l.conn.Delete(path, version)
	}
	i, err := multiErr(l.conn.Multi(
		&zk.DeleteRequest{Path: path, Version: version},
		&zk.DeleteRequest{Path: dir + "/" + slotNode(slot), Version: -1},
	))
	if i == 1 && errors.Is(err, zk.ErrNoNode) {
		return l.conn.Delete(path, version)
	}
	return err
}

// multiErr returns the index and error of the operation that failed a
// transaction (index -1 if the failure is not an operation's), or nil.
func multiErr(rs []zk.MultiResponse, err error) (int, error) {
	for i, r := range rs {
		if errors.Is(r.Error, zk.ErrNoNode) || errors.Is(r.Error, zk.ErrBadVersion) || errors.Is(r.Error, zk.ErrNodeExists) {
			return i, r.Error
		}
	}
	return -1, err
}
