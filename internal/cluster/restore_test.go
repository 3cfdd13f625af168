package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/etcd"
)

// The tests run real etcd members embedded in the test process, their peer
// traffic on free ports of 127.0.0.1, their data in t.TempDir().

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// peersOn returns a peers map of names on free loopback ports.
func peersOn(t *testing.T, names ...string) map[string]string {
	t.Helper()
	peers := map[string]string{}
	for _, n := range names {
		addr, err := freeLoopback()
		if err != nil {
			t.Fatal(err)
		}
		peers[n] = addr
	}
	return peers
}

// startMembers starts the members of peers (cluster directory dirs[name], the
// member's data in it where Start keeps it) together, as a
// cluster needs a majority up to elect a leader, and closes them at cleanup.
func startMembers(t *testing.T, peers map[string]string, dirs map[string]string) map[string]*member {
	t.Helper()
	ctx := testCtx(t)
	var mu sync.Mutex
	var wg sync.WaitGroup
	ms := map[string]*member{}
	var errs []error
	for n := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := startMember(ctx, memberSpec{name: n, dir: etcdDataDir(dirs[n]), peers: peers})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ms[n] = m
		}()
	}
	wg.Wait()
	for _, m := range ms {
		t.Cleanup(m.close)
	}
	if len(errs) > 0 {
		t.Fatalf("start members: %v", errors.Join(errs...))
	}
	return ms
}

// grant acquires name on l, releases it and returns its token.
func grant(t *testing.T, l *etcd.Locker, name string) fence.Token {
	t.Helper()
	ctx := testCtx(t)
	lease, err := l.Acquire(ctx, name, 5*time.Second, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release(%q): %v", name, err)
	}
	return lease.Token()
}

func newLocker(t *testing.T, m *member) *etcd.Locker {
	t.Helper()
	l := etcd.NewLocker(m.cli, nil)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// backupScene is a single-member cluster that issued tokens and wrote a KV key,
// was snapshotted, then issued more tokens (lost with the cluster).
type backupScene struct {
	snap      string
	beforeMax fence.Token // highest token before the snapshot
	lostMax   fence.Token // highest token after it: lost with the cluster
	item      fence.Item  // "ledger" as the snapshot has it
}

func newBackupScene(t *testing.T) backupScene {
	t.Helper()
	ctx := testCtx(t)
	dir := t.TempDir()
	peers := peersOn(t, "a")
	m := startMembers(t, peers, map[string]string{"a": filepath.Join(dir, "a")})["a"]
	l := newLocker(t, m)
	kv := etcd.NewKV(m.cli, nil)
	var sc backupScene
	for i := range 5 {
		sc.beforeMax = max(sc.beforeMax, grant(t, l, fmt.Sprintf("job/%d", i%2)))
	}
	lease, err := l.Acquire(ctx, "writer", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sc.beforeMax = max(sc.beforeMax, lease.Token())
	sc.item = fence.Item{Value: []byte("balance=10"), Fence: lease.Fence()}
	if err := kv.Put(ctx, "ledger", sc.item.Value, sc.item.Fence); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	sc.snap = filepath.Join(dir, "backup.db")
	if err := saveSnapshot(ctx, m.cli, sc.snap); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		sc.lostMax = max(sc.lostMax, grant(t, l, fmt.Sprintf("job/%d", i%3)))
	}
	if err := kv.Put(ctx, "ledger", []byte("lost"), fence.Fence{Name: "writer", Token: sc.lostMax}); err != nil {
		t.Fatal(err)
	}
	if sc.lostMax <= sc.beforeMax {
		t.Fatalf("tokens after the snapshot (%d) not above those before (%d)", sc.lostMax, sc.beforeMax)
	}
	m.close()
	return sc
}

// restoreAll restores snap for every node of peers into dir/NAME with bump.
func restoreAll(t *testing.T, snap, dir string, peers map[string]string, bump uint64) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for n := range peers {
		dirs[n] = filepath.Join(dir, n, "cluster")
		if err := Restore(testCtx(t), RestoreConfig{Snapshot: snap, Name: n, Peers: peers, Dir: dirs[n], Bump: bump}); err != nil {
			t.Fatalf("Restore(%s): %v", n, err)
		}
	}
	return dirs
}

// A restore rolls the revision back to the snapshot's; with the bump the tokens
// after it exceed every token issued before the loss, the lost ones included,
// and the KV holds what it held at the snapshot, fences included.
func TestRestore_TokensExceedEveryTokenIssuedBeforeTheLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	sc := newBackupScene(t)
	ctx := testCtx(t)
	peers := peersOn(t, "a")
	dirs := restoreAll(t, sc.snap, t.TempDir(), peers, 0)
	m := startMembers(t, peers, dirs)["a"]
	l := newLocker(t, m)
	for _, name := range []string{"job/0", "job/2", "fresh"} {
		if tok := grant(t, l, name); tok <= sc.lostMax {
			t.Errorf("%s after the restore: token %d; want above %d, the highest issued before the loss (P1)", name, tok, sc.lostMax)
		} else if tok < DefaultRevisionBump {
			t.Errorf("%s after the restore: token %d; want the bump %d in it", name, tok, DefaultRevisionBump)
		}
	}
	kv := etcd.NewKV(m.cli, nil)
	it, err := kv.Get(ctx, "ledger")
	if err != nil || !bytes.Equal(it.Value, sc.item.Value) || it.Fence != sc.item.Fence {
		t.Fatalf("ledger after the restore = %+v, %v; want the snapshot's %+v", it, err, sc.item)
	}
	stale := sc.item.Fence
	stale.Token--
	if err := kv.Put(ctx, "ledger", []byte("stale"), stale); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Put with a fence below the ledger's: %v; want fence.ErrStaleToken", err)
	}
}

// The control: restored with a bump of 1, the cluster hands out again tokens
// that were issued after the backup. The test above would catch a Restore that
// did not bump.
func TestRestore_SmallBumpReissuesLostTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	sc := newBackupScene(t)
	peers := peersOn(t, "a")
	dirs := restoreAll(t, sc.snap, t.TempDir(), peers, 1)
	m := startMembers(t, peers, dirs)["a"]
	if tok := grant(t, newLocker(t, m), "job/0"); tok > sc.lostMax {
		t.Fatalf("restored with bump 1: token %d; expected a reissued one (at most %d): the control shows nothing", tok, sc.lostMax)
	}
}

// Three nodes restored from one snapshot form a cluster and grant on every node.
func TestRestore_ThreeMembersFormAndGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	sc := newBackupScene(t)
	ctx := testCtx(t)
	peers := peersOn(t, "a", "b", "c")
	dirs := restoreAll(t, sc.snap, t.TempDir(), peers, 0)
	ms := startMembers(t, peers, dirs)
	prev := sc.lostMax
	for _, n := range []string{"a", "b", "c"} {
		tok := grant(t, newLocker(t, ms[n]), "job/0")
		if tok <= prev {
			t.Fatalf("grant on %s: token %d; want above %d", n, tok, prev)
		}
		prev = tok
		it, err := etcd.NewKV(ms[n].cli, nil).Get(ctx, "ledger")
		if err != nil || it.Fence != sc.item.Fence {
			t.Fatalf("ledger on %s = %+v, %v; want fence %+v", n, it, err, sc.item.Fence)
		}
	}
	resp, err := ms["a"].cli.MemberList(ctx)
	if err != nil || len(resp.Members) != 3 {
		t.Fatalf("member list = %v, %v; want 3 members", resp, err)
	}
}

// boltScene is a single node's store, stopped: names granted, one healed far
// above the shared counter, one held when it stopped, and fenced KV items.
type boltScene struct {
	dir   string
	last  map[string]fence.Token
	items map[string]fence.Item
	max   fence.Token
}

func newBoltScene(t *testing.T) boltScene {
	t.Helper()
	ctx := testCtx(t)
	sc := boltScene{dir: t.TempDir(), last: map[string]fence.Token{}, items: map[string]fence.Item{}}
	s, err := bolt.Open(filepath.Join(sc.dir, "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 9 {
		n := fmt.Sprintf("job/%d", i%3)
		l, err := s.Acquire(ctx, n, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		sc.last[n] = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	healed := sc.last["job/0"] + fence.MaxHealAhead
	if err := s.Heal(ctx, "healed", healed); err != nil {
		t.Fatal(err)
	}
	sc.last["healed"] = healed
	held, err := s.Acquire(ctx, "held", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sc.last["held"] = held.Token()
	put := func(key string, value []byte, f fence.Fence) {
		t.Helper()
		if err := s.Put(ctx, key, value, f); err != nil {
			t.Fatal(err)
		}
		sc.items[key] = fence.Item{Value: value, Fence: f}
	}
	put("orders/1", []byte("paid"), held.Fence())
	put("empty", []byte{}, held.Fence())
	if err := s.Fence(ctx, "fenced-only", held.Fence()); err != nil {
		t.Fatal(err)
	}
	sc.items["fenced-only"] = fence.Item{Fence: held.Fence()}
	for _, tok := range sc.last {
		sc.max = max(sc.max, tok)
	}
	return sc
}

// Moving from one node's bolt store to a cluster: every name's next token
// exceeds every token of the store (the healed floor included), the KV keeps
// its values and fences, and a stale fence is still refused.
func TestMigrate_TokensRiseAndKVKept(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	sc := newBoltScene(t)
	ctx := testCtx(t)
	out := filepath.Join(t.TempDir(), "migrated.db")
	rep, err := Migrate(ctx, MigrateConfig{From: sc.dir, Out: out})
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if rep.Names != len(sc.last) || rep.Items != len(sc.items) || rep.MaxToken != uint64(sc.max) || rep.Revision <= int64(sc.max) {
		t.Fatalf("report %+v; want %d names, %d items, max token %d and a revision above it", rep, len(sc.last), len(sc.items), sc.max)
	}
	if rev, err := SnapshotRevision(out); err != nil || rev != rep.Revision {
		t.Fatalf("SnapshotRevision = %d, %v; want the report's %d", rev, err, rep.Revision)
	}
	peers := peersOn(t, "a", "b", "c")
	dirs := restoreAll(t, out, t.TempDir(), peers, 0)
	ms := startMembers(t, peers, dirs)
	l := newLocker(t, ms["b"])
	kv := etcd.NewKV(ms["c"].cli, nil)
	for n := range sc.last {
		if tok := grant(t, l, n); tok <= sc.max {
			t.Errorf("%s after the migration: token %d; want above %d, the store's highest (its own last: %d)", n, tok, sc.max, sc.last[n])
		}
	}
	for k, want := range sc.items {
		it, err := kv.Get(ctx, k)
		if err != nil || it.Fence != want.Fence || !bytes.Equal(it.Value, want.Value) || (it.Value == nil) != (want.Value == nil) {
			t.Errorf("%s after the migration = %+v, %v; want %+v", k, it, err, want)
		}
	}
	// The old holder of "held" (not carried over) is fenced off once a new holder
	// writes; a fence below the key's is refused at once.
	lease, err := l.Acquire(ctx, "held", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, "orders/1", []byte("refunded"), lease.Fence()); err != nil {
		t.Fatalf("Put by the new holder: %v", err)
	}
	if err := kv.Put(ctx, "orders/1", []byte("zombie"), sc.items["orders/1"].Fence); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Put by the single node's holder after the new one wrote: %v; want fence.ErrStaleToken", err)
	}
	stale := sc.items["fenced-only"].Fence
	stale.Token--
	if err := kv.Put(ctx, "fenced-only", []byte("x"), stale); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Put below a migrated fence: %v; want fence.ErrStaleToken", err)
	}
	if _, err := ms["a"].cli.Get(ctx, MigratedKey); err != nil {
		t.Fatal(err)
	}
}

// Bad input: clear errors matching fence.ErrInvalid (or bolt's and the lock's),
// and nothing left behind.
func TestRestoreMigrate_BadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	sc := newBackupScene(t)
	dir := t.TempDir()
	peers := map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}
	good, err := os.ReadFile(sc.snap)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := bytes.Clone(good)
	for i := len(flipped) / 3; i < len(flipped)/3+64; i++ {
		flipped[i] ^= 0xff
	}
	used := filepath.Join(dir, "used")
	if err := os.MkdirAll(filepath.Join(used, "etcd", "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		what string
		cfg  RestoreConfig
	}{
		{"missing snapshot", RestoreConfig{Snapshot: filepath.Join(dir, "nope.db"), Name: "a", Peers: peers}},
		{"snapshot is a directory", RestoreConfig{Snapshot: dir, Name: "a", Peers: peers}},
		{"junk snapshot", RestoreConfig{Snapshot: write("junk.db", bytes.Repeat([]byte("junk"), 8192)), Name: "a", Peers: peers}},
		{"truncated snapshot", RestoreConfig{Snapshot: write("cut.db", good[:len(good)/2]), Name: "a", Peers: peers}},
		{"flipped bytes", RestoreConfig{Snapshot: write("flipped.db", flipped), Name: "a", Peers: peers}},
		{"node not in peers", RestoreConfig{Snapshot: sc.snap, Name: "z", Peers: peers}},
		{"no peers", RestoreConfig{Snapshot: sc.snap, Name: "a"}},
		{"bad peer address", RestoreConfig{Snapshot: sc.snap, Name: "a", Peers: map[string]string{"a": "nohostport"}}},
		{"existing member dir", RestoreConfig{Snapshot: sc.snap, Name: "a", Peers: peers, Dir: used}},
		{"bump past the largest token", RestoreConfig{Snapshot: sc.snap, Name: "a", Peers: peers, Bump: uint64(fence.MaxToken)}},
	}
	for i, c := range cases {
		if c.cfg.Dir == "" {
			c.cfg.Dir = filepath.Join(dir, fmt.Sprintf("out%d", i))
		}
		err := Restore(testCtx(t), c.cfg)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: Restore = %v; want fence.ErrInvalid", c.what, err)
			continue
		}
		t.Logf("%s: %v", c.what, err)
		if c.cfg.Dir != used {
			if _, err := os.Stat(c.cfg.Dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %s left behind", c.what, c.cfg.Dir)
			}
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(used, "etcd")); len(ents) != 1 {
		t.Errorf("the existing member dir was changed: %v", ents)
	}

	// Migrate: no store, an existing output, a store in use.
	out := filepath.Join(dir, "m.db")
	if _, err := Migrate(testCtx(t), MigrateConfig{From: filepath.Join(dir, "empty-dir"), Out: out}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Migrate from a directory without a store: %v; want fence.ErrInvalid", err)
	}
	if _, err := Migrate(testCtx(t), MigrateConfig{From: dir, Out: sc.snap}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Migrate onto an existing file: %v; want fence.ErrInvalid", err)
	}
	if _, err := Migrate(testCtx(t), MigrateConfig{From: dir, Out: filepath.Join(dir, "no-dir", "m.db")}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Migrate into a missing directory: %v; want fence.ErrInvalid", err)
	}
	bdir := t.TempDir()
	s, err := bolt.Open(filepath.Join(bdir, "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Migrate(testCtx(t), MigrateConfig{From: bdir, Out: out, Timeout: 100 * time.Millisecond}); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Migrate of a store in use: %v; want fence.ErrUnavailable", err)
	} else {
		t.Logf("store in use: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Migrate left %s", out)
	}
}

// BenchmarkMigrate_KVItems measures Migrate of a single node's store holding
// 10,000 KV items (one lease's fence each), its members' starts and snapshots
// included. With 50,000 items and -benchtime 1x, one run each: 19.1k items/s with
// 32 writers in flight, 9.2k items/s one by one.
//
//	go test -run '^$' -bench Migrate_KVItems -benchtime 3x ./internal/cluster/
func BenchmarkMigrate_KVItems(b *testing.B) {
	const items = 10000
	ctx := context.Background()
	dir := b.TempDir()
	s, err := bolt.Open(filepath.Join(dir, "fence.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	held, err := s.Acquire(ctx, "held", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for i := range items {
		if err := s.Put(ctx, fmt.Sprintf("orders/%06d", i), []byte("paid"), held.Fence()); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		rep, err := Migrate(ctx, MigrateConfig{From: dir, Out: filepath.Join(b.TempDir(), fmt.Sprintf("out-%d.db", i))})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Items != items {
			b.Fatalf("report %+v; want %d items", rep, items)
		}
	}
	b.ReportMetric(float64(items*b.N)/b.Elapsed().Seconds(), "items/s")
}

// Two restores: the cluster restored once (its tokens past the snapshot's
// revision plus the bump) is lost again and restored from the same older
// backup. With the default bump alone the second cluster issues again tokens
// the first one issued: the snapshot knows nothing of the first bump. Above,
// the highest token reached, counting that bump, is the floor the second bump
// is counted from.
func TestRestore_Twice_AboveKeepsTokensRising(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	sc := newBackupScene(t)
	rev, err := SnapshotRevision(sc.snap)
	if err != nil {
		t.Fatal(err)
	}

	// The first restore, and the tokens its cluster issued before it was lost.
	peers := peersOn(t, "a")
	first := startMembers(t, peers, restoreAll(t, sc.snap, t.TempDir(), peers, 0))["a"]
	var reached fence.Token
	l := newLocker(t, first)
	for i := range 10 {
		reached = max(reached, grant(t, l, fmt.Sprintf("job/%d", i%3)))
	}
	first.close()

	// The control: restored again from the older backup with the default bump.
	peers = peersOn(t, "a")
	again := startMembers(t, peers, restoreAll(t, sc.snap, t.TempDir(), peers, 0))["a"]
	if tok := grant(t, newLocker(t, again), "job/0"); tok > reached {
		t.Fatalf("second restore with the default bump: token %d; expected one at most %d, already issued: the control shows nothing", tok, reached)
	}
	again.close()

	// With the floor: every token above every one issued, by the whole bump.
	peers = peersOn(t, "a")
	cfg := RestoreConfig{Snapshot: sc.snap, Name: "a", Peers: peers, Dir: filepath.Join(t.TempDir(), "a", "cluster"), Above: uint64(reached)}
	if err := Restore(testCtx(t), cfg); err != nil {
		t.Fatalf("Restore with Above %d: %v", reached, err)
	}
	if want := uint64(reached) + DefaultRevisionBump; cfg.TokensAbove(rev) != want {
		t.Fatalf("TokensAbove(%d) with Above %d = %d; want %d", rev, reached, cfg.TokensAbove(rev), want)
	}
	floor := startMembers(t, peers, map[string]string{"a": cfg.Dir})["a"]
	l = newLocker(t, floor)
	for _, name := range []string{"job/0", "job/1", "fresh"} {
		if tok := grant(t, l, name); uint64(tok) <= cfg.TokensAbove(rev) {
			t.Errorf("%s after the restore with Above %d: token %d; want above %d, past every token issued (P1)", name, reached, tok, cfg.TokensAbove(rev))
		}
	}

	// A floor that would take tokens past the largest is refused, nothing written.
	bad := RestoreConfig{Snapshot: sc.snap, Name: "a", Peers: peers, Dir: filepath.Join(t.TempDir(), "cluster"), Above: uint64(fence.MaxToken)}
	if err := Restore(testCtx(t), bad); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Restore with Above at the largest token: %v; want fence.ErrInvalid", err)
	}
	if _, err := os.Stat(bad.Dir); !os.IsNotExist(err) {
		t.Fatalf("a refused restore left %s: %v", bad.Dir, err)
	}
}
