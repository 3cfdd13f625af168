package bolt

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// mappedRSS returns the resident bytes of this process's maps of the file at
// path, from /proc/self/smaps.
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rss int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a map's header: ADDR-ADDR PERMS OFF DEV INODE [PATH]
			in = fields[len(fields)-1] == path
			continue
		}
		if in && fields[0] == "Rss:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			rss += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rss
}

// A checkpoint leaves the lock pages dense (key order, foldFill) and none of the
// file mapped into the process, after Open too; the leases read back the same.
func TestStore_Checkpoint_FileDenseAndUnmapped(t *testing.T) {
	const n = 20000
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, &Options{NoSync: true})
	tokens := make([]string, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				l := mustAcquire(t, s, fmt.Sprintf("jobs/%d", i), time.Hour)
				tokens[i] = fmt.Sprint(l.Token())
			}
		}()
	}
	wg.Wait()
	s.fmu.Lock()
	err := s.checkpointLocked(false)
	s.fmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got := mappedRSS(t, path); got > 64<<10 {
		t.Errorf("after a checkpoint: %d bytes of the file mapped, want at most 64 KiB", got)
	}
	var st bbolt.BucketStats
	if err := s.db.View(func(tx *bbolt.Tx) error { st = tx.Bucket(bucketLocks).Stats(); return nil }); err != nil {
		t.Fatal(err)
	}
	if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); fill < 0.8 {
		t.Errorf("lock pages %.0f%% full (%d of %d bytes), want at least 80%%", 100*fill, st.LeafInuse, st.LeafAlloc)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, &Options{NoSync: true})
	defer s.Close()
	if got := mappedRSS(t, path); got > 64<<10 {
		t.Errorf("after Open: %d bytes of the file mapped, want at most 64 KiB", got)
	}
	if got := s.HeldLocks(); got != n {
		t.Fatalf("after the restart: %d names held, want %d", got, n)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		info, err := s.Inspect(t.Context(), fmt.Sprintf("jobs/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || fmt.Sprint(info.Token) != tokens[i] {
			t.Errorf("jobs/%d after the restart: held %v token %v, want held with %s", i, info.Held, info.Token, tokens[i])
		}
	}
}
