package bolt

import "syscall"

// dropPages unmaps the resident pages of the file-backed shared map at addr,
// n bytes, from the process (their contents stay in the page cache). An error
// leaves them mapped, which only costs RSS.
func dropPages(addr, n uintptr) {
	if n == 0 {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, addr, n, syscall.MADV_DONTNEED)
}
