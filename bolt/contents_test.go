package bolt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// fillForContents writes what ReadContents must find: names granted and released,
// one name still held, one healed far above the shared counter, a key with a
// value, a key only fenced and a key whose value was deleted. It returns the
// names' last tokens and the items.
func fillForContents(t *testing.T, s *Store) (map[string]fence.Token, map[string]fence.Item) {
	t.Helper()
	ctx := context.Background()
	last := map[string]fence.Token{}
	items := map[string]fence.Item{}
	for _, n := range []string{"a", "b", "a"} {
		last[n] = grantOnce(t, s, n)
	}
	held := mustAcquire(t, s, "held", time.Hour)
	last["held"] = held.Token()
	healed := last["b"] + fence.MaxHealAhead
	if err := s.Heal(ctx, "healed", healed); err != nil {
		t.Fatal(err)
	}
	last["healed"] = healed

	if err := s.Put(ctx, "k/value", []byte("v1"), held.Fence()); err != nil {
		t.Fatal(err)
	}
	items["k/value"] = fence.Item{Value: []byte("v1"), Fence: held.Fence()}
	if err := s.Fence(ctx, "k/fenced", held.Fence()); err != nil {
		t.Fatal(err)
	}
	items["k/fenced"] = fence.Item{Fence: held.Fence()}
	if err := s.Put(ctx, "k/deleted", []byte("x"), held.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k/deleted", held.Fence()); err != nil {
		t.Fatal(err)
	}
	items["k/deleted"] = fence.Item{Fence: held.Fence()}
	return last, items
}

func checkContents(t *testing.T, why string, c *Contents, last map[string]fence.Token, items map[string]fence.Item) {
	t.Helper()
	for n, want := range last {
		if got := c.Last[n]; got != want {
			t.Errorf("%s: Last[%q] = %d; want %d", why, n, got, want)
		}
	}
	if len(c.Last) != len(last) {
		t.Errorf("%s: %d names read; want %d: %v", why, len(c.Last), len(last), c.Last)
	}
	for k, want := range items {
		got, ok := c.Items[k]
		if !ok || got.Fence != want.Fence || !bytes.Equal(got.Value, want.Value) || (got.Value == nil) != (want.Value == nil) {
			t.Errorf("%s: Items[%q] = %+v (found %v); want %+v", why, k, got, ok, want)
		}
	}
	if len(c.Items) != len(items) {
		t.Errorf("%s: %d items read; want %d", why, len(c.Items), len(items))
	}
	if c.Max() != last["healed"] {
		t.Errorf("%s: Max() = %d; want the healed floor %d", why, c.Max(), last["healed"])
	}
	if c.Ceiling < last["held"] {
		t.Errorf("%s: Ceiling %d below an issued token %d", why, c.Ceiling, last["held"])
	}
}

// After a clean Close the bbolt file holds everything; after a crash (kill -9)
// the last records are in the lease log only, and ReadContents applies them as
// the next Open would, writing nothing.
func TestReadContents_AfterCloseAndAfterCrash(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "close", true: "crash"}[crash]
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.db")
			s := mustOpen(t, path, &Options{TokenBlock: 4})
			last, items := fillForContents(t, s)
			if crash {
				s.abandon()
				fi, err := os.Stat(path + "-wal")
				if err != nil || fi.Size() == 0 {
					t.Fatalf("no lease log after the crash (%v): the test would not read one", err)
				}
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ReadContents(path, 0)
			if err != nil {
				t.Fatalf("ReadContents: %v", err)
			}
			checkContents(t, name, c, last, items)
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatal("ReadContents changed the file")
			}
			// The store reopened knows the same: the next grant of each name passes
			// what ReadContents read.
			s = mustOpen(t, path, nil)
			defer s.Close()
			for n, tok := range c.Last {
				if n == "held" {
					continue
				}
				if got := grantOnce(t, s, n); got <= tok {
					t.Fatalf("reopened: %s granted %d; ReadContents read %d", n, got, tok)
				}
			}
		})
	}
}

func TestReadContents_Refusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fence.db")
	s := mustOpen(t, path, &Options{Timeout: 50 * time.Millisecond})
	if _, err := ReadContents(path, 50*time.Millisecond); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("ReadContents of a store open in another handle: %v; want fence.ErrUnavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, bytes.Repeat([]byte("junk"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want error
	}{
		{filepath.Join(dir, "missing.db"), fence.ErrInvalid},
		{dir, fence.ErrInvalid},
		{empty, ErrNotStore},
		{junk, ErrNotStore},
	} {
		if _, err := ReadContents(c.path, 0); !errors.Is(err, c.want) {
			t.Errorf("ReadContents(%s): %v; want %v", c.path, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Error("ReadContents created a missing file")
	}
}
