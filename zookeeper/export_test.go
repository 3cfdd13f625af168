package zookeeper

// HeldNode is the holder's node as Revoke judged it.
type HeldNode = heldNode

// ReadHeld and EndHeld are Revoke's two steps, split where another client can act
// in between: ReadHeld returns the node of the lease held on name (Path "" if none),
// and EndHeld deletes it unless it changed, reporting again true if it did.
func (l *Locker) ReadHeld(name string) (HeldNode, error) {
	_, hs, err := l.inspect(name)
	if len(hs) == 0 {
		return HeldNode{}, err
	}
	return hs[0], err
}

// EndHeld is Revoke's versioned delete of h (see ReadHeld).
func (l *Locker) EndHeld(h HeldNode) (again bool, err error) { return l.endHeld(h) }

// Path returns the node's path, "" if no lease was held.
func (h HeldNode) Path() string { return h.path }

// WatchRelays returns how many lock names the Locker keeps a directory watch for
// (Watch's relays, each with exactly one ZooKeeper watch armed).
func (l *Locker) WatchRelays() int {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return len(l.relays)
}

// MaxUnclaimedPause bounds the pause between a watch's reads of a lock whose lowest
// node has no TTL yet.
const MaxUnclaimedPause = maxUnclaimedPause
