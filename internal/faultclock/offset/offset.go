// Package offset is the file through which a test harness steps the fault clock
// of a process (package faultclock): one line, the clock's offset from the real
// clock in nanoseconds as a decimal integer. The harness (package chaos) writes it
// with Write; the process, built with the faultclock tag, reads it. It holds no
// clock, so the harness links it without linking the fault clock.
package offset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// Env is the environment variable that names the offset file of a process of the
// fence binary built with the faultclock tag.
const Env = "FENCE_FAULTCLOCK"

// Read returns the offset in the file at path. It returns an error matching
// fence.ErrInvalid if the file does not hold one, or the error reading it.
func Read(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("faultclock offset: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("faultclock offset: %w: %s holds %q, want an offset in nanoseconds", fence.ErrInvalid, path, strings.TrimSpace(string(b)))
	}
	return time.Duration(n), nil
}

// Write replaces the file at path with offset off, atomically (a temporary
// file renamed over it), so that a reader sees the old offset or the new one. It
// returns the file system's error.
func Write(path string, off time.Duration) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("faultclock offset: %w", err)
	}
	_, werr := tmp.WriteString(strconv.FormatInt(int64(off), 10) + "\n")
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("faultclock offset: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("faultclock offset: %w", err)
	}
	return nil
}
