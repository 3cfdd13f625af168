package bolt

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and the metadata needed to read it back), not its
// times: cheaper than fsync for a preallocated log.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
