package etcd

// SetListPageMinForTest makes a held-only List read n names a page, so that a
// test can make it read several pages; it returns the function that restores it.
func SetListPageMinForTest(n int) (restore func()) {
	old := listPageMin
	listPageMin = n
	return func() { listPageMin = old }
}
