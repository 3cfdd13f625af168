package postgres

// WatchSubscriptions returns how many Watch subscriptions l holds, for tests
// that check a watch leaves nothing behind once its context ends.
func WatchSubscriptions(l *Locker) int {
	l.watchers.mu.Lock()
	defer l.watchers.mu.Unlock()
	n := 0
	for _, set := range l.watchers.m {
		n += len(set)
	}
	return n
}
