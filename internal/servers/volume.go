package servers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Volume is a tmpfs file system of a fixed size mounted at Dir: a small disk of
// its own for the disk-full fault. A store whose files are in Dir runs out of
// space when Fill fills the volume with a filler file, and gets it back when Free
// removes it. Mounting needs root (CAP_SYS_ADMIN). A Volume is safe for
// concurrent use.
type Volume struct {
	Dir  string // the mount point
	Size int64  // the file system's size, in bytes

	mu     sync.Mutex
	filled int64 // bytes in the filler file
}

// FillerName is the name of the filler file in Volume.Dir.
const FillerName = "filler.bin"

// MountTmpfs mounts a tmpfs of size bytes at dir (created if missing) and returns
// it. It returns an error saying why if the process is not root or mount fails
// (dir is then left unmounted).
func MountTmpfs(dir string, size int64) (*Volume, error) {
	if uid := os.Geteuid(); uid != 0 {
		return nil, fmt.Errorf("servers: mount a tmpfs at %s: needs root (euid %d)", dir, uid)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("servers: mount a tmpfs: %w", err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("servers: mount -t tmpfs -o size=%d tmpfs %s: %v: %s", size, dir, err, strings.TrimSpace(string(out)))
	}
	return &Volume{Dir: dir, Size: size}, nil
}

// Fill appends filler bytes to Dir/FillerName until the file system is full
// (ENOSPC) and returns how many bytes the filler holds then. It returns another
// write error as it is.
func (v *Volume) Fill() (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(v.Dir, FillerName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) { // not even an inode left
			return v.filled, nil
		}
		return v.filled, fmt.Errorf("servers: fill %s: %w", v.Dir, err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 0xfe // filler, not a hole
	}
	// Bounded: the volume holds at most Size bytes.
	for range v.Size/int64(len(buf)) + 2 {
		n, err := f.Write(buf)
		v.filled += int64(n)
		if errors.Is(err, syscall.ENOSPC) {
			return v.filled, nil
		}
		if err != nil {
			return v.filled, fmt.Errorf("servers: fill %s: %w", v.Dir, err)
		}
	}
	return v.filled, fmt.Errorf("servers: fill %s: %d bytes written and not full", v.Dir, v.filled)
}

// Free removes the filler file, giving its space back; nil if there is none.
func (v *Volume) Free() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := os.Remove(filepath.Join(v.Dir, FillerName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("servers: free %s: %w", v.Dir, err)
	}
	v.filled = 0
	return nil
}

// Unmount unmounts the volume (lazily if it is busy, so that a process still
// holding a file there cannot keep it mounted) and removes the mount point.
func (v *Volume) Unmount() error {
	out, err := exec.Command("umount", v.Dir).CombinedOutput()
	if err != nil {
		if lerr := exec.Command("umount", "-l", v.Dir).Run(); lerr != nil {
			return fmt.Errorf("servers: umount %s: %v: %s", v.Dir, err, strings.TrimSpace(string(out)))
		}
	}
	return os.Remove(v.Dir)
}
