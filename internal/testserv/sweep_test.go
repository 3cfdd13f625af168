package testserv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fencelock/fence/internal/testserv"
)

// A directory left by a test process that died (SIGKILL, no cleanup) is removed by the
// next start; one whose owner lives is kept.
func TestStart_RemovesDirsOfDeadProcessesOnly(t *testing.T) {
	testserv.SkipIfShort(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mkdir := func(pid int) string {
		dir, err := os.MkdirTemp("", "testserv-sweeptest-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "testserv.owner"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stale := mkdir(dead.Process.Pid)
	live := mkdir(os.Getpid())

	testserv.Redis(t)

	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("dir of dead pid %d: Stat error = %v, want it removed", dead.Process.Pid, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("dir of live pid %d: Stat error = %v, want it kept", os.Getpid(), err)
	}
}
