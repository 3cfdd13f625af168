package servers_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// A directory left by a process that died (SIGKILL, no cleanup) is removed by the
// next start; one whose owner lives is kept.
func TestStart_RemovesDirsOfDeadProcessesOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mkdir := func(pid int) string {
		dir, err := os.MkdirTemp("", "fence-server-sweeptest-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "fence-server.owner"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stale := mkdir(dead.Process.Pid)
	live := mkdir(os.Getpid())

	srv, err := servers.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()

	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("dir of dead pid %d: Stat error = %v, want it removed", dead.Process.Pid, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("dir of live pid %d: Stat error = %v, want it kept", os.Getpid(), err)
	}
}
