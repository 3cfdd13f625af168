// Package diskfulltest is the disk-full test shared by the embedded store's tests
// (in process) and fence serve's (over HTTP, with kill -9): a tmpfs volume of its
// own for the store's files, a workload of grants, renewals, releases and fenced
// writes that runs while the volume is filled and then freed, and a check, after a
// restart, that every acknowledged operation is there.
package diskfulltest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers"
)

// VolumeSize is the size of the test's volume: 2 MiB, filled in milliseconds.
const VolumeSize = 2 << 20

// Volume mounts a tmpfs of VolumeSize in t's temp dir and unmounts it in
// t's cleanup (register what uses it afterwards, so that it stops first). It
// skips the test under -short and fails it, saying why, if the test is not root
// or the mount fails.
func Volume(t testing.TB) *servers.Volume {
	t.Helper()
	if testing.Short() {
		t.Skip("disk full: mounts a tmpfs of its own; skipped under -short")
	}
	v, err := servers.MountTmpfs(filepath.Join(t.TempDir(), "vol"), VolumeSize)
	if err != nil {
		t.Fatalf("disk full: the test needs a small file system of its own (run it as root, or with -short to skip it): %v", err)
	}
	t.Cleanup(func() {
		if err := v.Unmount(); err != nil {
			t.Errorf("disk full: %v", err)
		}
	})
	return v
}

// Store is what the workload drives: a locker with a fenced KV store.
type Store interface {
	fence.Locker
	fence.KV
	fence.Inspector
}

// TTLs of the workload: a renewal's is longer than a grant's, so that a restart
// can tell whether the renewal is on disk.
const (
	grantTTL = 20 * time.Second
	renewTTL = 60 * time.Second
)

// worker is one client of the workload, with its own lock name and keys, and
// what it was told: acknowledged operations are facts the store must keep; a
// refused one may or may not have taken effect.
type worker struct {
	id   int
	name string

	mu      sync.Mutex
	lease   string      // the lease it believes it holds ("" none)
	token   fence.Token // its token
	renewed bool        // the lease's last acknowledged operation is a renewal, and no renewal failed since
	// maybe are the holders' tokens the name may have after a restart (0: free);
	// newer: also any token above every acknowledged one (a refused grant).
	maybe map[fence.Token]bool
	newer bool
	keys  map[string]keyState // fresh keys, one per put
	ctr   keyState            // the key the worker rewrites
	ops   [3]int              // acknowledged, refused (disk full), refused after Free returned
	maxT  fence.Token
	seq   int
}

// keyState is what a key may hold after a restart: the acknowledged value (or
// none) and the values of refused puts since.
type keyState struct {
	acked   string // "" none
	refused []string
}

func (k keyState) allows(v string, found bool) bool {
	if !found {
		return k.acked == ""
	}
	if v == k.acked {
		return true
	}
	for _, r := range k.refused {
		if v == r {
			return true
		}
	}
	return false
}

// History is what a workload's clients were told.
type History struct {
	workers []*worker
}

// MaxToken returns the highest token acknowledged to any client.
func (h *History) MaxToken() fence.Token {
	var m fence.Token
	for _, w := range h.workers {
		m = max(m, w.maxT)
	}
	return m
}

// diskFull reports whether err is the refusal a full disk must give: it matches
// fence.ErrUnavailable and says the disk is full.
func diskFull(err error) bool {
	return errors.Is(err, fence.ErrUnavailable) && strings.Contains(err.Error(), "no space left on device")
}

// Run runs workers clients against s, each on a lock name and keys of its own,
// while vol is filled and then freed: a warm-up until each had 5 operations
// acknowledged, Fill, until each had 5 refused (every refusal must be the disk-full
// one), Free, until each had 10 more acknowledged (none refused after Free
// returned: the store recovers without a restart). Each phase is bounded by 15 s.
func Run(t testing.TB, s Store, vol *servers.Volume, workers int) *History {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &History{}
	var wg sync.WaitGroup
	var freed sync.Mutex // held while Free runs; freedAt set after it returned
	var freedAt time.Time
	for i := range workers {
		w := &worker{id: i, name: fmt.Sprintf("diskfull-%d", i), maybe: map[fence.Token]bool{0: true}, keys: map[string]keyState{}}
		h.workers = append(h.workers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil && n < 100000; n++ {
				freed.Lock()
				after := !freedAt.IsZero()
				freed.Unlock()
				if err := w.step(ctx, s); err != nil && ctx.Err() == nil {
					w.mu.Lock()
					switch {
					case !diskFull(err):
						t.Errorf("worker %d: want a disk-full refusal (fence.ErrUnavailable, \"no space left on device\"), got %v", w.id, err)
					case after:
						w.ops[2]++
						t.Errorf("worker %d: refused after the space was freed: %v", w.id, err)
					default:
						w.ops[1]++
					}
					w.mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	until := func(phase string, want func(w *worker) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			ok := true
			for _, w := range h.workers {
				w.mu.Lock()
				ok = ok && want(w)
				w.mu.Unlock()
			}
			if ok {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("disk full: %s: not reached within 15s (%s)", phase, h.counts())
	}
	until("warm-up", func(w *worker) bool { return w.ops[0] >= 5 })
	filled, err := vol.Fill()
	if err != nil {
		t.Fatalf("disk full: %v", err)
	}
	t.Logf("disk full: filler of %d bytes", filled)
	base := make([]int, workers)
	for i, w := range h.workers {
		w.mu.Lock()
		base[i] = w.ops[0]
		w.mu.Unlock()
	}
	until("refusals while full", func(w *worker) bool { return w.ops[1] >= 5 })
	t.Logf("disk full: while full: %s", h.counts())
	freed.Lock()
	err = vol.Free()
	freedAt = time.Now()
	freed.Unlock()
	if err != nil {
		t.Fatalf("disk full: %v", err)
	}
	for i, w := range h.workers {
		w.mu.Lock()
		base[i] = w.ops[0]
		w.mu.Unlock()
	}
	until("recovery after free", func(w *worker) bool { return w.ops[0] >= base[w.id]+10 })
	cancel()
	wg.Wait()
	t.Logf("disk full: done: %s", h.counts())
	return h
}

func (h *History) counts() string {
	var b strings.Builder
	for _, w := range h.workers {
		w.mu.Lock()
		fmt.Fprintf(&b, "[worker %d: %d acknowledged, %d refused] ", w.id, w.ops[0], w.ops[1])
		w.mu.Unlock()
	}
	return strings.TrimSpace(b.String())
}

// step runs one operation of w: a grant when it holds nothing, else a fenced put
// to a fresh key, a put to its counter key, a renewal or a release, in turn. It
// returns the operation's error after recording what the client was told.
func (w *worker) step(ctx context.Context, s Store) error {
	w.mu.Lock()
	lease, tok := w.lease, w.token
	seq := w.seq
	if lease != "" {
		w.seq++ // counts the operations under leases, which take turns
	}
	w.mu.Unlock()
	if lease == "" {
		l, err := s.Acquire(ctx, w.name, grantTTL, fence.WithWait(0))
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.newer = true // a refused grant may be on disk
			return err
		}
		w.ops[0]++
		w.lease, w.token, w.renewed = l.ID(), l.Token(), false
		w.maybe = map[fence.Token]bool{l.Token(): true}
		w.newer = false
		w.maxT = max(w.maxT, l.Token())
		return nil
	}
	f := fence.Fence{Name: w.name, Token: tok, LeaseID: lease}
	switch seq % 4 {
	case 0, 1:
		key := fmt.Sprintf("diskfull/%d/%d", w.id, seq)
		ctr := seq%4 == 1
		if ctr {
			key = fmt.Sprintf("diskfull/%d/counter", w.id)
		}
		val := fmt.Sprintf("%d:%d:%s", w.id, seq, strings.Repeat("v", 200))
		err := s.Put(ctx, key, []byte(val), f)
		w.mu.Lock()
		defer w.mu.Unlock()
		k := w.keys[key]
		if ctr {
			k = w.ctr
		}
		if err != nil {
			k.refused = append(k.refused, val)
		} else {
			k = keyState{acked: val}
			w.ops[0]++
		}
		if ctr {
			w.ctr = k
		} else {
			w.keys[key] = k
		}
		return err
	case 2:
		err := s.Renew(ctx, w.name, lease, renewTTL)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.renewed = false // a refused renewal may or may not be on disk
			return err
		}
		w.ops[0]++
		w.renewed = true
		return nil
	default:
		err := s.Release(ctx, w.name, lease)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.lease, w.renewed = "", false // released, or in doubt: take a new lease
		if err != nil {
			w.maybe[0] = true
			return err
		}
		w.ops[0]++
		w.maybe = map[fence.Token]bool{0: true}
		w.newer = false
		return nil
	}
}

// Verify checks, on s opened again after a restart, that every operation h's
// clients were told succeeded is there: a held lease with its token (renewable
// by its id, and with the renewal's TTL if it was last renewed), a release, every
// acknowledged value; and that the next grant's token is above every token
// handed out.
func (h *History) Verify(t testing.TB, s Store) {
	t.Helper()
	ctx := context.Background()
	keys := 0
	for _, w := range h.workers {
		info, err := s.Inspect(ctx, w.name)
		if err != nil {
			t.Fatalf("inspect %q after the restart: %v", w.name, err)
		}
		got := fence.Token(0)
		if info.Held {
			got = info.Token
		}
		if !w.maybe[got] && !(w.newer && got > w.maxT) {
			t.Errorf("worker %d: %q after the restart: want a holder's token in %v (newer ones too: %v), got held %v token %d",
				w.id, w.name, w.maybe, w.newer, info.Held, info.Token)
		}
		if w.lease != "" && got == w.token && w.renewed {
			// A grant's expiry is at most grantTTL away; only the renewal's is further.
			if left := info.ExpiresIn; left <= grantTTL {
				t.Errorf("worker %d: %q: acknowledged renewal to %v lost: %v left", w.id, w.name, renewTTL, left)
			}
		}
		if w.lease != "" && got == w.token {
			if err := s.Renew(ctx, w.name, w.lease, grantTTL); err != nil {
				t.Errorf("worker %d: renew the lease held before the restart: %v", w.id, err)
			}
		}
		check := func(key string, k keyState) {
			it, err := s.Get(ctx, key)
			found := err == nil
			if err != nil && !errors.Is(err, fence.ErrNotFound) {
				t.Fatalf("get %q after the restart: %v", key, err)
			}
			if !k.allows(string(it.Value), found) {
				t.Errorf("worker %d: %q after the restart: want %.12q (or one of %d refused values), got %.12q (found %v)",
					w.id, key, k.acked, len(k.refused), it.Value, found)
			}
			keys++
		}
		for key, k := range w.keys {
			check(key, k)
		}
		check(fmt.Sprintf("diskfull/%d/counter", w.id), w.ctr)
	}
	l, err := s.Acquire(ctx, "diskfull-after", grantTTL, fence.WithWait(0))
	if err != nil {
		t.Fatalf("acquire after the restart: %v", err)
	}
	if l.Token() <= h.MaxToken() {
		t.Errorf("token after the restart: want above %d, got %d", h.MaxToken(), l.Token())
	}
	t.Logf("disk full: after the restart: %d keys and %d locks as acknowledged", keys, len(h.workers))
}
