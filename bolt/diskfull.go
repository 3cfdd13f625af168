package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/fencelock/fence"
)

// writeError is the error of a failed write of the file at path (the bbolt file
// or the lease log): it matches fence.ErrUnavailable, and, when the file system
// is full (ENOSPC) or over quota (EDQUOT), that errno too, so that a caller (the
// HTTP server) can say the disk is full. Nothing that failed with it was
// acknowledged, and the store writes again as soon as space is freed: a full
// disk needs no restart.
func writeError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is said once, here
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && (errno == syscall.ENOSPC || errno == syscall.EDQUOT) {
		return fmt.Errorf("write %s: %w (disk full): %w", path, errno, fence.ErrUnavailable)
	}
	return fmt.Errorf("write %s: %v: %w", path, err, fence.ErrUnavailable)
}
