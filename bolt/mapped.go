package bolt

import bbolt "go.etcd.io/bbolt"

// bbolt reads the file through a read-only shared memory map: every page a
// read or a write transaction looks at (a checkpoint walks a path of pages per
// name it folds in, and Open reads every lock record) stays mapped into the
// process, and counts in its RSS, although bbolt writes through the file, never
// the map, and the page is in the kernel's page cache anyway. At a million held
// leases that is about as much RSS as the lease table itself. dropMapped
// unmaps those pages from the process after Open and after each checkpoint
// (madvise MADV_DONTNEED on Linux): the page cache keeps them, shared and
// reclaimable as any cached file, and the next read maps a page in again (a
// minor fault) with the same contents. Elsewhere it does nothing.
//
// It runs inside a read transaction, which holds bbolt's map lock shared: bbolt
// cannot remap while it runs, and the size the transaction sees is within the
// map.
func dropMapped(db *bbolt.DB) {
	_ = db.View(func(tx *bbolt.Tx) error {
		dropPages(db.Info().Data, uintptr(tx.Size()))
		return nil
	})
}
