package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/etcd"
)

// migrateWriters bounds the KV writes Migrate has in flight: each is a
// transaction of its own (the KV's fenced write), and etcd commits those in
// flight together, so a store's items are carried over several times faster than
// one by one (BenchmarkMigrate_KVItems).
const migrateWriters = 32

// MigratedKey is the etcd key under which a snapshot written by Migrate records
// what it carried over (a JSON Report). Its revision is the snapshot's, above
// every token of the single node.
const MigratedKey = etcd.DefaultPrefix + "cluster/migrated"

// MigrateConfig says what Migrate moves.
type MigrateConfig struct {
	// From is the single node's data directory (its --data; the store is
	// From/fence.db) or the store's file itself.
	From string
	// Out is the snapshot file to write. It must not exist.
	Out string
	// Timeout bounds the wait for the store's file lock (0: bolt's default): a
	// store still open in a running `fence serve` is refused after it.
	Timeout time.Duration
}

// Report is what Migrate carried over.
type Report struct {
	From     string `json:"from"`     // the store's file
	Snapshot string `json:"snapshot"` // the snapshot written
	Names    int    `json:"names"`    // lock names with a last token
	Items    int    `json:"items"`    // fenced KV keys copied with their values and fences
	// MaxToken is the highest token the single node issued or promised (heal
	// floors included): every name's next token in the cluster is above it.
	MaxToken uint64 `json:"max_token"`
	// Revision is the snapshot's revision, above MaxToken: a cluster restored from
	// the snapshot issues tokens above it plus its bump.
	Revision int64 `json:"revision"`
}

// Migrate writes the snapshot file cfg.Out from the single node's store in
// cfg.From, for Restore on every node of a new cluster. In the restored cluster
// every fenced KV key keeps its value and fence (a stale writer is still
// refused) and every name's next token exceeds every token the single node
// issued, heal floors included (P1): the snapshot's own revision is above them,
// so the minimum lives in the snapshot and no restore can forget it.
//
// Leases are not carried over: stop the single node first (Migrate refuses a
// store open in a running process); its holders' writes after the move are
// refused by the fences of the new holders.
//
// It works on a throwaway etcd member in a directory beside cfg.Out, listening
// on a free port of 127.0.0.1 for its peer traffic only, removed at the end.
//
// It returns an error matching fence.ErrInvalid if cfg.From holds no fence store
// or cfg.Out exists or its directory does not, bolt.ErrNotStore or bolt.ErrCorrupt for a store it cannot
// read, fence.ErrUnavailable if the store is in use or the throwaway member
// could not start, and ctx's error if ctx ends first. A failed Migrate leaves
// no file at cfg.Out.
func Migrate(ctx context.Context, cfg MigrateConfig) (Report, error) {
	if cfg.From == "" || cfg.Out == "" {
		return Report{}, fmt.Errorf("cluster: migrate: %w", fmt.Errorf("the single node's data directory and the snapshot file to write are required: %w", fence.ErrInvalid))
	}
	path := cfg.From
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "fence.db")
	}
	if _, err := os.Lstat(cfg.Out); !errors.Is(err, os.ErrNotExist) {
		return Report{}, fmt.Errorf("cluster: migrate: %s exists: migrate never overwrites a file; choose another --out: %w", cfg.Out, fence.ErrInvalid)
	}
	if !dirExists(filepath.Dir(cfg.Out)) {
		return Report{}, fmt.Errorf("cluster: migrate: the directory of %s does not exist: %w", cfg.Out, fence.ErrInvalid)
	}
	contents, err := bolt.ReadContents(path, cfg.Timeout)
	if err != nil {
		if errors.Is(err, fence.ErrUnavailable) {
			err = fmt.Errorf("%w; stop the single node's fence serve first", err)
		}
		return Report{}, fmt.Errorf("cluster: migrate: %w", err)
	}
	rep := Report{From: path, Snapshot: cfg.Out, Names: len(contents.Last), Items: len(contents.Items), MaxToken: uint64(contents.Max())}
	work, err := os.MkdirTemp(filepath.Dir(cfg.Out), ".fence-migrate-")
	if err != nil {
		return Report{}, fmt.Errorf("cluster: migrate: %w", err)
	}
	defer os.RemoveAll(work)
	rev, err := migrate(ctx, work, contents, &rep)
	if err != nil {
		return Report{}, fmt.Errorf("cluster: migrate %s: %w", path, err)
	}
	rep.Revision = rev
	// A link, unlike a rename, never replaces a file created at cfg.Out meanwhile.
	if err := os.Link(filepath.Join(work, "out.db"), cfg.Out); err != nil {
		if errors.Is(err, os.ErrExist) {
			err = fmt.Errorf("%s was created meanwhile: %w", cfg.Out, fence.ErrInvalid)
		}
		return Report{}, fmt.Errorf("cluster: migrate: %w", err)
	}
	return rep, nil
}

// migrate does Migrate's work in the directory work and leaves the snapshot in
// work/out.db. It returns the snapshot's revision.
//
// First member: the KV items are written through package etcd's KV (which
// admits them by fence.Admit, a fresh key admitting any fence), then
// snapshotted. That snapshot is restored with its revision bumped up to
// contents.Max(), and a second member started on it writes rep under
// MigratedKey, at the first revision above every token of the single node; its
// snapshot is the result.
func migrate(ctx context.Context, work string, contents *bolt.Contents, rep *Report) (int64, error) {
	const name = "migrate"
	first := filepath.Join(work, "first.db")
	err := withMember(ctx, filepath.Join(work, "m1"), name, func(m *member) error {
		kv := etcd.NewKV(m.cli, nil)
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(migrateWriters)
		for key, it := range contents.Items {
			g.Go(func() error {
				var err error
				if it.Value != nil {
					err = kv.Put(gctx, key, it.Value, it.Fence)
				} else {
					err = kv.Fence(gctx, key, it.Fence)
				}
				if err != nil {
					return fmt.Errorf("key %q: %w", key, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		return saveSnapshot(ctx, m.cli, first)
	})
	if err != nil {
		return 0, err
	}
	rev, err := SnapshotRevision(first)
	if err != nil {
		return 0, err
	}
	bump := uint64(1) // a bump of 0 would not mark the revisions compacted
	if top := int64(contents.Max()); top > rev {
		bump = uint64(top - rev)
	}
	dir := filepath.Join(work, "m2")
	addr, err := freeLoopback()
	if err != nil {
		return 0, err
	}
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: first, Name: name, OutputDataDir: dir,
		PeerURLs: []string{"http://" + addr}, InitialCluster: name + "=http://" + addr,
		InitialClusterToken: DefaultClusterToken, RevisionBump: bump, MarkCompacted: true,
	})
	if err != nil {
		return 0, fmt.Errorf("bump the revision: %w", err)
	}
	out := filepath.Join(work, "out.db")
	var written int64
	err = withMemberAt(ctx, dir, name, addr, func(m *member) error {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		resp, err := m.cli.Put(ctx, MigratedKey, string(b))
		if err != nil {
			return fmt.Errorf("write %s: %w", MigratedKey, err)
		}
		written = resp.Header.Revision
		if uint64(written) <= rep.MaxToken {
			return fmt.Errorf("revision %d after the bump is not above the store's highest token %d", written, rep.MaxToken)
		}
		n, err := m.cli.Get(ctx, etcd.DefaultPrefix+"kv/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if n.Count != int64(len(contents.Items)) {
			return fmt.Errorf("%d KV keys after the bump; want %d", n.Count, len(contents.Items))
		}
		return saveSnapshot(ctx, m.cli, out)
	})
	if err != nil {
		return 0, err
	}
	rev, err = SnapshotRevision(out)
	if err != nil {
		return 0, err
	}
	if rev < written {
		return 0, fmt.Errorf("snapshot revision %d below the revision %d written", rev, written)
	}
	return rev, nil
}

// withMember starts a new single member named name in dir on a free loopback
// port, runs f on it and closes it.
func withMember(ctx context.Context, dir, name string, f func(*member) error) error {
	addr, err := freeLoopback()
	if err != nil {
		return err
	}
	return withMemberAt(ctx, dir, name, addr, f)
}

// withMemberAt starts the single member name with its data in dir (new or
// restored) and its peer listener on addr, runs f on it and closes it.
func withMemberAt(ctx context.Context, dir, name, addr string, f func(*member) error) error {
	m, err := startMember(ctx, memberSpec{name: name, dir: dir, peers: map[string]string{name: addr}, noSync: true})
	if err != nil {
		return err
	}
	defer m.close()
	return f(m)
}

// saveSnapshot writes the member's snapshot (etcd's, with its integrity hash) to
// the new file path and syncs it.
func saveSnapshot(ctx context.Context, cli *clientv3.Client, path string) error {
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
