package zookeeper

import (
	"fmt"

	"github.com/fencelock/fence"
)

var (
	_ fence.Locker    = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.KV        = (*Store)(nil)
	_ fence.Guard     = (*Store)(nil)
	_ fence.Purger    = (*Store)(nil)
	_ fence.Watcher   = (*Store)(nil)
)

// Store is a Locker and a KV sharing one ZooKeeper connection, as `fence serve
// --store zk://` uses it. Close closes the connection (ending the session). Its KV
// refuses fences the Locker did not issue, within the bound "Fenced KV and issued
// tokens" in the package documentation gives, and deletes and purges keys.
type Store struct {
	*Locker
	*KV
}

// OpenStore connects like Open and returns the Locker and the KV on that connection
// (the KV root derived from opts.Root, see KV). It returns the errors of Open:
// fence.ErrUnavailable if no session is established within the session timeout and
// fence.ErrInvalid for a bad root or an empty server list.
func OpenStore(servers []string, opts *Options) (*Store, error) {
	l, err := Open(servers, opts)
	if err != nil {
		return nil, err
	}
	kv, err := NewKV(l.conn, opts)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("zookeeper: open store: %w", err)
	}
	kv.locker = l // the Store's KV takes only tokens its Locker issued (P9)
	return &Store{Locker: l, KV: kv}, nil
}

// Close closes the Locker and its connection; later calls of either half return
// fence.ErrClosed. It returns nil.
func (s *Store) Close() error {
	s.KV.closed.Store(true)
	return s.Locker.Close()
}
