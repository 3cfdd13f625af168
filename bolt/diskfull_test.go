package bolt

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/diskfulltest"
)

// The store's files on a 2 MiB tmpfs of their own, filled while clients grant,
// renew, release and put: every write that could not be made durable is refused
// with the disk-full error, the store writes again once the filler is removed
// (no restart), and after a crash every acknowledged operation is there.
func TestDiskFull_RefusedUntilFreed_AcknowledgedSurviveCrash(t *testing.T) {
	vol := diskfulltest.Volume(t)
	path := filepath.Join(vol.Dir, "fence.db")
	s, err := Open(path, &Options{TokenBlock: 8})
	if err != nil {
		t.Fatal(err)
	}
	h := diskfulltest.Run(t, s, vol, 4)
	s.abandon() // kill -9: nothing more is written
	s2, err := Open(path, &Options{TokenBlock: 8})
	if err != nil {
		t.Fatalf("open after the crash: %v", err)
	}
	t.Cleanup(func() { s2.Close() })
	h.Verify(t, s2)
}

// Each failed write says the disk is full and matches fence.ErrUnavailable and
// syscall.ENOSPC, naming the file once.
func TestDiskFull_ErrorMatchesUnavailableAndENOSPC(t *testing.T) {
	vol := diskfulltest.Volume(t)
	s, err := Open(filepath.Join(vol.Dir, "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := vol.Fill(); err != nil {
		t.Fatal(err)
	}
	var last error
	for i := 0; i < 1000 && last == nil; i++ { // a few writes still fit in allocated pages
		_, last = s.Grant(t.Context(), "full-"+string(rune('a'+i%26))+string(rune('a'+i/26%26)), time.Minute)
	}
	if last == nil {
		t.Fatal("1000 grants on a full disk: all acknowledged")
	}
	if !errors.Is(last, fence.ErrUnavailable) || !errors.Is(last, syscall.ENOSPC) {
		t.Errorf("want an error matching fence.ErrUnavailable and syscall.ENOSPC, got %v", last)
	}
	t.Logf("error: %v", last)
}
