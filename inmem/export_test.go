package inmem

import "github.com/fencelock/fence"

// SetCounter sets name's counter to c, as if c tokens had been issued for it,
// for tests of what no heal may reach in one step (fence.MaxHealAhead).
func (l *Locker) SetCounter(name string, c fence.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stateLocked(name).counter = c
}
