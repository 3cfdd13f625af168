package postgres

import (
	"fmt"
	"strings"
)

// WatchSubscriptions returns how many Watch subscriptions l holds, for tests
// that check a watch leaves nothing behind once its context ends.
func WatchSubscriptions(l *Locker) int { return l.watchers.Len() }

// WithoutGrantNotify makes l grant as it did before Watch: the same statement
// with its pg_notify replaced by a no-op (the parameter must still be used), so
// that a benchmark can price the NOTIFY alone. It fails if the statement has no
// such call.
func WithoutGrantNotify(l *Locker) error {
	return replaceInAcquire(l, "pg_notify($6, name)", "(SELECT $6::text) AS unused")
}

// WithoutMultiReset makes l grant locks with the acquire statement of the
// version before semaphores and shared locks: without resetting the holders and
// the waiter's record, so that a benchmark can price that reset alone. It fails
// if the statement has no such reset.
func WithoutMultiReset(l *Locker) error {
	return replaceInAcquire(l, ",\n        holders = NULL, waiter_until = '-infinity'", "")
}

// replaceInAcquire replaces old by new in l's acquire statement, or fails if
// the statement has no old.
func replaceInAcquire(l *Locker, old, new string) error {
	if !strings.Contains(l.acquireSQL, old) {
		return fmt.Errorf("the acquire statement has no %q:\n%s", old, l.acquireSQL)
	}
	l.acquireSQL = strings.Replace(l.acquireSQL, old, new, 1)
	return nil
}
