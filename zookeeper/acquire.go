package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// maxRestarts bounds how often one Acquire starts over after its node vanished under it
// (a session change, or a successor that judged it expired in the instant of its
// promotion).
const maxRestarts = 8

// Acquire grants a lease on name for ttl (see fence.Locker). It creates an ephemeral
// sequential node under the lock's directory; the lowest node holds the lock. A waiter
// (fence.WithWait) keeps its node, so grants are FIFO; it watches only its
// predecessor, and the one right behind the holder deletes the holder's node once its
// TTL has passed by the ZooKeeper leader's clock. A call that ends without a grant
// deletes its node.
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the lock
// stayed held, also matching ctx.Err() when the context ended the wait;
// fence.ErrInvalid for a bad name or TTL; fence.ErrTokenExhausted if the node's czxid
// is above fence.MaxToken; fence.ErrUnavailable if ZooKeeper cannot be reached or the
// node kept vanishing; fence.ErrClosed after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	a := &acquisition{l: l, stop: make(chan struct{})}
	defer a.end()
	lease, err := l.engine.Acquire(ctx, name, ttl, opts, a.try)
	if err != nil {
		return nil, err
	}
	l.remember(a.leaseID, a.session, lease)
	return lease, nil
}

// acquisition is one Acquire call across its tries: its node, kept from try to try
// (its place in the queue), and the holders it waits behind.
type acquisition struct {
	l    *Locker
	dir  string
	kind kind
	stop chan struct{} // closed when the call ends: stops the watch relays

	// Our node; path is "" before it is created and after it vanished.
	path     string
	me       node
	secret   string
	leaseID  string
	session  int64
	start    time.Time       // when the request that may grant was sent
	stat     func() nodeStat // the node's stat, asked for right after the create
	waiting  bool            // our node's data says "w" (not yet a holder)
	version  int32           // of our node's data
	granted  bool
	restarts int

	// The holders we wait behind (first in line), as last read, and the watch
	// that fires when what we wait for may have changed. When the Engine wakes us
	// for a holder's expiry (not by the watch), the holders are judged again from
	// these stats (one write to read the leader's clock, one delete each) without
	// listing the directory or reading them again: no node can come between them
	// and ours, and a renewal meanwhile changed a version, so its delete fails and
	// the look starts over.
	judged []member
	wake   chan struct{} // closes when the watch fires
	// alive is, per holder's node, a local time before which a judgment found it
	// surely live: a permit's claim need not judge it again before then.
	alive map[string]time.Time
}

// judge is Locker.judge, remembering until when the live members surely are.
func (a *acquisition) judge(ms []member) ([]verdict, error) {
	vs, err := a.l.judge(a.dir, ms)
	for i, v := range vs {
		if !v.until.IsZero() {
			if a.alive == nil {
				a.alive = map[string]time.Time{}
			}
			a.alive[ms[i].path] = v.until
		}
	}
	return vs, err
}

// nodeStat is the answer to Exists on our node.
type nodeStat struct {
	ok  bool
	st  *zk.Stat
	err error
}

// errRestart means our node vanished: the acquisition starts over with a new node.
var errRestart = errors.New("zookeeper: node vanished")

// errRelist means the directory changed under a claim: look at it again.
var errRelist = errors.New("zookeeper: look again")

// try is the acquisition's driver.TryFunc: it looks at the queue once (creating our
// node on the first try), and grants, or reports the holder's time left and the
// watch that fires when our predecessor changes.
func (a *acquisition) try(ctx context.Context, r *driver.Request) (driver.Result, error) {
	if a.dir == "" {
		a.dir, a.kind = a.l.dir(r.Name), kind{limit: r.Options.Limit, shared: r.Options.Shared}
	}
	for {
		res, err := a.look(ctx, r)
		if !errors.Is(err, errRestart) {
			if err != nil {
				a.drop()
			}
			return res, err
		}
		a.path, a.waiting, a.version, a.judged, a.wake = "", false, 0, nil, nil
		if a.restarts++; a.restarts == maxRestarts {
			return driver.Result{}, fmt.Errorf("%w: its node kept vanishing (session changes?)", fence.ErrUnavailable)
		}
		if err := ctx.Err(); err != nil {
			return driver.Result{}, err
		}
	}
}

// end deletes our node unless it was granted, and stops the watch relays.
func (a *acquisition) end() {
	close(a.stop)
	a.drop()
}

// drop deletes our node unless it was granted.
func (a *acquisition) drop() {
	if a.path != "" && !a.granted {
		a.l.deleteQuietly(a.dir, a.path, -1)
	}
	a.path = ""
}

// look is one try: it judges the holders again if a timer woke it for their
// expiry, and otherwise lists the queue, grants if our node is in the holding
// group, fails with a *fence.LimitError if the group's limit is not ours and a
// holder is live, or watches what it waits for.
func (a *acquisition) look(ctx context.Context, r *driver.Request) (driver.Result, error) {
	l := a.l
	if a.path == "" {
		if err := a.create(r); err != nil {
			return driver.Result{}, err
		}
	}
	lowest := false // every node before ours is gone and our node waits: we hold the name
	if ms := a.judged; len(ms) > 0 && !isClosed(a.wake) {
		// Woken for a holder's expiry, not by the watch.
		a.judged = nil
		vs, err := a.judge(ms)
		if err != nil {
			return driver.Result{}, err
		}
		left, changed, allGone := a.waitFor(vs)
		switch {
		case allGone:
			lowest = a.kind.limit == 0 // we waited, so our node says "w"; a permit lists the slots
		case !changed && left > 0:
			// Not yet by the leader's clock (the Engine's timer ran ahead of it).
			a.judged = ms
			return driver.Result{ExpiresIn: left, Wake: a.wake}, nil
		}
	}
	for {
		a.judged = nil
		idx, g := 0, 1
		var nodes []node
		var kids []string
		if lowest {
			lowest = false // the version check of the Set in claim proves the node is ours
		} else {
			var err error
			if kids, _, err = l.conn.Children(a.dir); err != nil {
				return driver.Result{}, zkErr(err)
			}
			nodes = parseNodes(kids)
			idx = slices.IndexFunc(nodes, func(n node) bool { return n.name == a.me.name })
			if idx < 0 {
				return driver.Result{}, errRestart
			}
			g = group(nodes)
		}
		holders := nodes[:min(g, len(nodes))] // none after lowest: a lock or shared lease needs none
		if idx < g {
			if n := countSlots(kids, a.kind.limit); a.kind.limit > 0 && n < idx {
				if err := a.awaitClaims(ctx, nodes[n:idx]); err != nil {
					return driver.Result{}, err
				}
				continue
			}
			res, err := a.claim(r, holders, kids)
			if errors.Is(err, errRelist) {
				continue
			}
			return res, err
		}
		if held := nodes[0].kind.limitOf(); held != a.kind.limitOf() {
			// Only live holders make the limits disagree: judge them first.
			ms, _, _, err := l.readMembers(a.dir, holders, -1)
			if err != nil {
				return driver.Result{}, err
			}
			vs, err := a.judge(ms)
			if err != nil {
				return driver.Result{}, err
			}
			if slices.ContainsFunc(vs, func(v verdict) bool { return v.live }) {
				return driver.Result{}, &fence.LimitError{Name: r.Name, Limit: a.kind.limitOf(), Held: held}
			}
			continue // they expired (and are deleted now) or changed: look again
		}
		var expiresIn time.Duration
		if idx == g {
			// First in line: judge the holders by the leader's clock, and watch
			// our predecessor (a lock waits for every holder to go, and one holder
			// has only itself to wait for) or else the directory (any holder's
			// end frees a permit or a shared place).
			watch := idx - 1
			var dirWatch <-chan zk.Event
			if a.kind.limit > 0 || a.kind.shared {
				if g > 1 {
					watch = -1
					var err error
					if _, _, dirWatch, err = l.conn.ChildrenW(a.dir); err != nil {
						return driver.Result{}, zkErr(err)
					}
				}
			}
			ms, ch, gone, err := l.readMembers(a.dir, holders, watch)
			if err != nil {
				return driver.Result{}, err
			}
			if ch == nil {
				ch = dirWatch
			}
			if gone {
				lowest = len(ms) == 0 && a.waiting && a.kind.limit == 0
				continue
			}
			a.watch(ch)
			vs, err := a.judge(ms)
			if err != nil {
				return driver.Result{}, err
			}
			left, changed, _ := a.waitFor(vs)
			if changed {
				continue // a holder went or renewed meanwhile: look again
			}
			if left > 0 {
				expiresIn, a.judged = left, ms
			}
		} else {
			// Further back: watch our predecessor, whose deletion or claim may
			// put us first in line; a shared lease watches the nearest node
			// before it that is not shared, the one that keeps it from holding.
			w := idx - 1
			if a.kind.shared {
				for i := idx - 1; i >= 0; i-- {
					if !nodes[i].kind.shared {
						w = i
						break
					}
				}
			}
			ok, _, ch, err := l.conn.ExistsW(a.dir + "/" + nodes[w].name)
			if err != nil {
				return driver.Result{}, zkErr(err)
			}
			if !ok {
				continue
			}
			a.watch(ch)
		}
		held := driver.Result{ExpiresIn: expiresIn, Wake: a.wake}
		if expiresIn == 0 {
			// Only the watch can tell: look again after a session timeout at the
			// latest, in case it was lost.
			held.Retry = l.timeout
		}
		if !r.Waiting || a.waiting {
			return held, nil // a call that does not wait deletes its node as it ends
		}
		st, err := l.conn.Set(a.path, waitData(r.Options.Owner), a.version)
		if err != nil {
			return driver.Result{}, a.vanished(err)
		}
		a.waiting, a.version = true, st.Version
		return held, nil
	}
}

// waitFor sums up the verdicts on the holders we are first in line behind: how
// long until the expiry that could let us hold (a lock needs every holder gone,
// the last to expire; a permit or a shared lease needs one, the first), 0 if no
// live holder's expiry is known; whether any holder went or was renewed; and
// whether all went.
func (a *acquisition) waitFor(vs []verdict) (left time.Duration, changed, allGone bool) {
	allGone = true
	for _, v := range vs {
		allGone = allGone && v.gone
		if !v.live {
			changed = true
			continue
		}
		if v.left <= 0 {
			continue
		}
		if a.kind.limit > 0 || a.kind.shared {
			if left == 0 || v.left < left {
				left = v.left
			}
		} else {
			left = max(left, v.left)
		}
	}
	return left, changed, allGone && len(vs) > 0
}

// create makes our node, with holder's data for r's TTL and owner, and asks for its
// stat in the background: the czxid (the token) never changes, and the question is
// pipelined with the first Children call on the same connection, so the fast path
// costs one round trip less.
func (a *acquisition) create(r *driver.Request) error {
	l := a.l
	secret := driver.NewLeaseID()
	a.start = l.clock.Now()
	a.session = l.conn.SessionID()
	path, err := l.create(a.dir, ownerTag(secret), a.kind.infix(), holdData(r.TTL, r.Options.Owner))
	if err != nil {
		return err
	}
	me, ok := parseNode(path[len(a.dir)+1:])
	if !ok {
		l.deleteQuietly(a.dir, path, -1)
		return fmt.Errorf("%w: server returned node %q", fence.ErrUnavailable, path)
	}
	a.path, a.me, a.secret, a.leaseID = path, me, secret, secret+"-"+me.rest
	statc := make(chan nodeStat, 1)
	go func() {
		ok, st, err := l.conn.Exists(path)
		statc <- nodeStat{ok, st, err}
	}()
	var got *nodeStat
	a.stat = func() nodeStat {
		if got == nil {
			s := <-statc
			got = &s
		}
		return *got
	}
	return nil
}

// claim grants the name to our node, which is in the holding group: a waiter's node
// first gets the holder's data for r (with its version, which proves the node is
// still ours), and a permit takes its slot in the same transaction (see takeSlot).
func (a *acquisition) claim(r *driver.Request, holders []node, kids []string) (driver.Result, error) {
	l := a.l
	slot := 0
	switch {
	case a.kind.limit > 0:
		if a.waiting {
			a.start = l.clock.Now()
		}
		var err error
		if slot, err = a.takeSlot(r, holders, kids); err != nil {
			return driver.Result{}, err
		}
	case a.waiting:
		a.start = l.clock.Now()
		if _, err := l.conn.Set(a.path, holdData(r.TTL, r.Options.Owner), a.version); err != nil {
			return driver.Result{}, a.vanished(err)
		}
	}
	ns := a.stat()
	if ns.err != nil {
		return driver.Result{}, zkErr(ns.err)
	}
	if !ns.ok {
		return driver.Result{}, errRestart
	}
	if ns.st.Czxid <= 0 || fence.Token(ns.st.Czxid) > fence.MaxToken {
		return driver.Result{}, fmt.Errorf("%w: czxid %#x is above %d", fence.ErrTokenExhausted, ns.st.Czxid, uint64(fence.MaxToken))
	}
	a.granted = true
	if a.kind.limit > 0 {
		a.leaseID += "-s" + strconv.Itoa(slot)
	}
	return driver.Result{Token: fence.Token(ns.st.Czxid), Start: a.start, ID: a.leaseID, Slot: slot}, nil
}

// awaitClaims waits until the permits before ours in the holding group, pending,
// have claimed their slots (or one of them is gone), judging by the leader's
// clock those that have a TTL. Permits claim in queue order, so that a slot's
// holders have rising tokens: an older node that took a slot a newer one had held
// would be refused by that slot's guard. The claimed permits are the first of the
// group (each claim waited for those before it), so pending are the rest before
// ours: a watch on the last of them, which claims last, fires once all have. It
// returns ctx's error if it ends the wait, and nil to look again.
func (a *acquisition) awaitClaims(ctx context.Context, pending []node) error {
	ms, ch, gone, err := a.l.readMembers(a.dir, pending, len(pending)-1)
	if err != nil || gone || slices.ContainsFunc(ms, func(m member) bool { return m.d.permit }) {
		return err
	}
	vs, err := a.judge(ms)
	if err != nil {
		return err
	}
	wait := a.l.timeout // in case the watch was lost
	for _, v := range vs {
		if !v.live {
			return nil
		}
		if v.left > 0 {
			wait = min(wait, v.left)
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-a.l.stop:
		return fence.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// takeSlot takes the lowest slot that no live lease has, for our node in the
// holding group (holders, listed as kids): it creates the slot's node and writes
// our node's permit data, with its version, in one transaction. A slot whose node
// exists is taken, unless its holder has expired: so before taking a slot above a
// taken one, it judges the other holders (those it has not judged surely live
// since) and deletes those that expired (and returns errRelist if it did). Another acquire that takes the same slot first
// makes it try the next.
func (a *acquisition) takeSlot(r *driver.Request, holders []node, kids []string) (int, error) {
	l := a.l
	used := parseSlots(kids, a.kind.limit)
	others := slices.DeleteFunc(slices.Clone(holders), func(n node) bool {
		return n.name == a.me.name || time.Now().Before(a.alive[a.dir+"/"+n.name])
	})
	if k := slices.Index(used, false); k > 0 && len(others) > 0 {
		ms, _, gone, err := l.readMembers(a.dir, others, -1)
		if err != nil {
			return 0, err
		}
		vs, err := a.judge(ms)
		if err != nil {
			return 0, err
		}
		if gone || slices.ContainsFunc(vs, func(v verdict) bool { return !v.live }) {
			return 0, errRelist
		}
	}
	for k, taken := range used {
		if taken {
			continue
		}
		i, err := multiErr(l.conn.Multi(
			&zk.CreateRequest{Path: a.dir + "/" + slotNode(k), Data: []byte(a.me.name), Acl: l.acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: a.path, Data: permitData(r.TTL, k, r.Options.Owner), Version: a.version},
		))
		switch {
		case err == nil:
			return k, nil
		case i == 0 && errors.Is(err, zk.ErrNodeExists):
			continue // another acquire took it in between
		case i == 1:
			return 0, a.vanished(err)
		default:
			return 0, zkErr(err)
		}
	}
	return 0, errRelist // every slot taken by acquires that came in between: look again
}

// vanished is the error of a conditional Set on our node: errRestart (after deleting
// it) if the node is gone or is not as we left it, the translated error otherwise.
func (a *acquisition) vanished(err error) error {
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		a.l.deleteQuietly(a.dir, a.path, -1)
		return errRestart
	}
	return zkErr(err)
}

// watch makes a.wake close when ch (a ZooKeeper watch) fires, or never if the call
// ends first.
func (a *acquisition) watch(ch <-chan zk.Event) {
	wake := make(chan struct{})
	a.wake = wake
	go func() {
		select {
		case <-ch:
			close(wake)
		case <-a.stop:
		}
	}()
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// create makes an ephemeral sequential node with the owner tag tag, creating the
// lock's directory if needed. If the connection drops during the create, it looks for
// the node by its tag, so that no orphan node blocks the lock until the session ends.
func (l *Locker) create(dir, tag, infix string, data []byte) (string, error) {
	prefix := dir + "/n-" + tag + "-" + infix
	for attempt := 0; ; attempt++ {
		path, err := l.conn.Create(prefix, data, zk.FlagEphemeral|zk.FlagSequence, l.acl)
		switch {
		case err == nil:
			return path, nil
		case errors.Is(err, zk.ErrNoNode) && attempt < 3:
			if err := ensurePath(l.conn, l.acl, dir); err != nil {
				return "", zkErr(err)
			}
		case errors.Is(err, zk.ErrConnectionClosed) && attempt < 3:
			kids, _, cerr := l.conn.Children(dir)
			if cerr != nil {
				return "", zkErr(err)
			}
			for _, k := range kids {
				if strings.HasPrefix(k, "n-"+tag+"-") {
					return dir + "/" + k, nil
				}
			}
		default:
			return "", zkErr(err)
		}
	}
}

// serverNow returns the ZooKeeper leader's clock now: the mtime of a write to the lock's
// directory node (its data is unused; nobody watches it, so the write wakes no one).
func (l *Locker) serverNow(dir string) (time.Time, error) {
	st, err := l.conn.Set(dir, nil, -1)
	if err != nil {
		return time.Time{}, zkErr(err)
	}
	return time.UnixMilli(st.Mtime), nil
}
