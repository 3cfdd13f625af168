//go:build !linux

package bolt

// dropPages does nothing here: the map's pages stay resident until the kernel
// reclaims them.
func dropPages(addr, n uintptr) {}
