package zookeeper

import (
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
)

// checkIssued is P9's check of f against f.Name's lock directory, within the bound
// the package documentation gives ("Fenced KV and issued tokens"): it returns a
// *fence.UnissuedTokenError if the name has no directory (never acquired), if f's
// token is above issuedBound, or if f's lease id is provably not the lease issued
// that token (a node of the holding group has the token and is not the lease's
// node, or is the lease's node and has another token); and a
// *fence.LeaseRequiredError if f has no lease id and a node of the holding group
// has its token. It returns
// fence.ErrUnavailable if ZooKeeper does not answer or the directory kept
// changing.
func (l *Locker) checkIssued(f fence.Fence) error {
	dir := l.dir(f.Name)
	for range 3 {
		kids, st, err := l.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return &fence.UnissuedTokenError{Lock: f.Name, Token: f.Token}
		}
		if err != nil {
			return zkErr(err)
		}
		nodes := parseNodes(kids)
		n := group(nodes)
		ms, _, gone, err := l.readMembers(dir, nodes[:n], -1)
		if err != nil {
			return err
		}
		if gone {
			continue // a member went between the reads: read again
		}
		last, ok, err := l.issuedBound(dir, st, nodes, ms)
		if err != nil {
			return err
		}
		if !ok {
			continue // the first waiter went between the reads: read again
		}
		if err := fence.CheckIssued(f, last); err != nil {
			return err
		}
		if f.LeaseID == "" {
			// A holding node with the token: its lease is live, or expired
			// and not yet taken over, which this read cannot tell apart.
			return fence.CheckLeaseGiven(f, slices.ContainsFunc(ms, func(m member) bool { return fence.Token(m.st.Czxid) == f.Token }))
		}
		own, _, _ := l.nodePath(f.Name, f.LeaseID)
		for _, m := range ms {
			if (fence.Token(m.st.Czxid) == f.Token) != (m.path == own) {
				return &fence.UnissuedTokenError{Lock: f.Name, Token: f.Token, Last: last, OtherLease: true}
			}
		}
		return nil
	}
	return fmt.Errorf("%w: the lock nodes of %q kept changing", fence.ErrUnavailable, f.Name)
}

// issuedBound returns a token at or above every token issued for the directory dir
// (its stat st, its lock nodes in queue order, the members ms of its holding group)
// and below every token it will issue: the czxid of a lone lock holder (the last
// grant: grants follow queue order), else the czxid of the first node behind the
// group less one (no node behind a waiter was granted, and every node yet to be
// granted is created after the reads or already queues behind it), else the
// directory's pzxid (the zxid of its last child created or deleted, at or above
// the czxid of every node it ever had). ok is false if a node it reads is gone.
func (l *Locker) issuedBound(dir string, st *zk.Stat, nodes []node, ms []member) (last fence.Token, ok bool, err error) {
	last = fence.Token(st.Pzxid)
	n := len(ms)
	if n < len(nodes) {
		there, wst, err := l.conn.Exists(dir + "/" + nodes[n].name)
		switch {
		case err != nil:
			return 0, false, zkErr(err)
		case !there:
			return 0, false, nil
		}
		last = min(last, fence.Token(wst.Czxid-1))
	}
	if n == 1 && nodes[0].kind.limit == 0 && !nodes[0].kind.shared {
		last = min(last, fence.Token(ms[0].st.Czxid))
	}
	return last, true, nil
}
