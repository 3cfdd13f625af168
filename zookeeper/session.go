package zookeeper

import (
	"context"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
)

// grant is what a Locker remembers of a lease it granted, to end it on session loss.
type grant struct {
	session int64
	lease   *fence.Lease
}

// watchSession follows the connection's session: expiry, or a disconnect longer than
// the session timeout, marks the session lost and ends its leases.
func (l *Locker) watchSession(events <-chan zk.Event) {
	last := l.conn.SessionID() // Open consumed the first session event
	for {
		select {
		case <-l.stop:
			return
		case ev, ok := <-events:
			if !ok {
				if last != 0 {
					l.loseSession(last)
				}
				return
			}
			if ev.Type != zk.EventSession {
				continue
			}
			switch ev.State {
			case zk.StateHasSession:
				l.mu.Lock()
				if l.lostWait != nil {
					l.lostWait.Stop()
					l.lostWait = nil
				}
				l.mu.Unlock()
				if id := l.conn.SessionID(); id != 0 {
					if last != 0 && id != last {
						l.loseSession(last)
					}
					last = id
				}
			case zk.StateExpired:
				if last != 0 {
					l.loseSession(last)
				}
			case zk.StateDisconnected:
				// SUSPENDED: not sure yet. LOST once it outlasts the session timeout.
				s := last
				l.mu.Lock()
				if l.lostWait == nil && s != 0 && !l.closed {
					l.lostWait = time.AfterFunc(l.timeout, func() { l.loseSession(s) })
				}
				l.mu.Unlock()
			}
		}
	}
}

// loseSession marks session lost and closes the Done channels of its leases (through a
// Renew that the Locker answers with ErrNotHeld).
func (l *Locker) loseSession(session int64) {
	l.mu.Lock()
	l.lost[session] = true
	var ends []*fence.Lease
	for _, g := range l.grants {
		// Kept in grants: Renew finds the session in lost and answers ErrNotHeld
		// without asking the server, which may be unreachable (LOST).
		if g.session == session {
			ends = append(ends, g.lease)
		}
	}
	l.mu.Unlock()
	for _, lease := range ends {
		go func() { _ = lease.Renew(context.Background(), lease.TTL()) }()
	}
}

// remember records a lease granted here in session, for loseSession and lostSession.
func (l *Locker) remember(leaseID string, session int64, lease *fence.Lease) {
	l.mu.Lock()
	l.grants[leaseID] = &grant{session: session, lease: lease}
	l.mu.Unlock()
}

// lostSession reports whether leaseID was granted here in a session known to be lost,
// or in one other than the connection's current session.
func (l *Locker) lostSession(leaseID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.grants[leaseID]
	if g == nil {
		return false
	}
	cur := l.conn.SessionID()
	return l.lost[g.session] || (cur != 0 && g.session != 0 && cur != g.session)
}

func (l *Locker) forget(leaseID string) {
	l.mu.Lock()
	delete(l.grants, leaseID)
	l.mu.Unlock()
}
