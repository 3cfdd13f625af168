package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
)

// DefaultRevisionBump is how far Restore raises the revision of a restored
// cluster above the snapshot's when RestoreConfig.Bump is 0: one billion, as
// etcd's own restore guide suggests.
//
// Why a bump at all: a grant's token is the create revision of its lock key, and
// a restore rolls the revision back to the snapshot's, so without a bump the
// restored cluster would hand out again tokens it handed out after the backup
// (P1). The bump must exceed every revision the lost cluster wrote after the
// backup was taken, and every write is a revision: a grant, a renewal, a
// release, a KV write (a few per lock operation). One billion covers a backup
// taken a day before the loss on a cluster that wrote 10,000 revisions a second
// without pause; with an older backup or a busier cluster, pass a larger bump
// (at that rate about 0.86e9 a day). A bump costs nothing but token values:
// tokens stay far below fence.MaxToken (2^53-1, about 9e15) after millions of
// restores.
const DefaultRevisionBump = 1_000_000_000

// DefaultClusterToken is the initial cluster token of every fence cluster: the
// one Start gives a new member, and the one Restore gives the restored members
// when RestoreConfig.ClusterToken is empty. Every node of one cluster must be
// restored with the same token.
const DefaultClusterToken = "fence-cluster"

// RestoreConfig says what Restore restores and where.
type RestoreConfig struct {
	// Snapshot is the snapshot file: one taken by `fence cluster backup` (etcd's
	// snapshot of a member) or written by Migrate.
	Snapshot string
	// Name is the node this data directory is for; it must be a key of Peers.
	Name string
	// Peers are the cluster's nodes, name -> HOST:PORT of their peer traffic:
	// the same --peers map every node is started with.
	Peers map[string]string
	// Dir is the node's cluster directory, DATA/cluster, as Config.Dir. Restore
	// writes the etcd member's data in it, where Start looks for it (Dir/etcd),
	// which must not exist or be empty: Restore never overwrites a member's data.
	Dir string
	// ClusterToken is the initial cluster token; "" means DefaultClusterToken.
	ClusterToken string
	// PeerTLS says the nodes talk to each other over TLS (https peer URLs).
	PeerTLS bool
	// Bump is how far the restored revision is raised above the snapshot's; 0
	// means DefaultRevisionBump (see there for how to choose it).
	Bump uint64
	// Above is a floor under the bump: the highest token the cluster reached,
	// counting earlier bumps. The revision is raised by Bump above the larger
	// of the snapshot's revision and Above, so that the tokens of the restored
	// cluster start above both (see TokensAbove). A snapshot taken before an
	// earlier restore knows nothing of that restore's bump: restored again
	// without Above, the cluster would issue again tokens it already issued.
	// 0: the snapshot's revision alone.
	Above uint64
}

// TokensAbove returns the token above which the tokens of a cluster restored
// with cfg from a snapshot of revision rev start: the larger of rev and
// cfg.Above, plus the bump (cfg.Bump, or DefaultRevisionBump for 0). The
// caller checks that it stays within fence.MaxToken (Restore does).
func (cfg RestoreConfig) TokensAbove(rev int64) uint64 {
	return max(uint64(max(rev, 0)), cfg.Above) + cfg.bump()
}

func (cfg RestoreConfig) bump() uint64 {
	if cfg.Bump == 0 {
		return DefaultRevisionBump
	}
	return cfg.Bump
}

// Restore writes the member data of node cfg.Name into cfg.Dir from the
// snapshot file cfg.Snapshot, with the revision raised by cfg.Bump (above
// cfg.Above when that is higher than the snapshot's revision) and every
// revision up to the new one marked compacted, so that the tokens the restored
// cluster issues exceed every token issued before the loss (P1), those of
// earlier restores included when cfg.Above names them. Each node of
// the cluster restores from the same file with the same Peers; then each starts
// with its usual flags.
//
// It returns an error matching fence.ErrInvalid for a missing or damaged
// snapshot, a name not in Peers, a bad peer address, a Dir that already holds
// data, or a bump (from the snapshot's revision or cfg.Above) that would take
// tokens past fence.MaxToken; ctx's error if ctx ended before it began; an
// error of the file system otherwise. A failed
// Restore removes what it wrote.
func Restore(ctx context.Context, cfg RestoreConfig) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if cfg.Snapshot == "" || cfg.Dir == "" {
		return fmt.Errorf("cluster: restore: %w", fmt.Errorf("a snapshot file and a data directory are required: %w", fence.ErrInvalid))
	}
	initial, self, err := initialCluster(cfg.Name, cfg.Peers, cfg.PeerTLS)
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	rev, err := SnapshotRevision(cfg.Snapshot)
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	bump, floor := cfg.bump(), max(uint64(rev), cfg.Above)
	if bump > uint64(fence.MaxToken) || floor > uint64(fence.MaxToken) || floor+bump > uint64(fence.MaxToken) {
		return fmt.Errorf("cluster: restore: bump %d above %d passes the largest token %d: %w", bump, floor, uint64(fence.MaxToken), fence.ErrInvalid)
	}
	// etcd raises the snapshot's revision by what it is given: from the floor.
	bump += floor - uint64(rev)
	dir := etcdDataDir(cfg.Dir)
	if err := emptyOrMissing(dir); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	existed, parentExisted := dirExists(dir), dirExists(cfg.Dir)
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        cfg.Snapshot,
		Name:                cfg.Name,
		OutputDataDir:       dir,
		PeerURLs:            []string{self},
		InitialCluster:      initial,
		InitialClusterToken: orDefault(cfg.ClusterToken, DefaultClusterToken),
		RevisionBump:        bump,
		MarkCompacted:       true,
	})
	if err != nil {
		clearDir(dir, existed)
		if !parentExisted {
			_ = os.Remove(cfg.Dir) // empty now, unless someone else wrote there
		}
		return fmt.Errorf("cluster: restore %s into %s: %w", cfg.Snapshot, cfg.Dir, err)
	}
	return nil
}

// SnapshotRevision returns the revision of the snapshot file at path: tokens of a
// cluster restored from it with a bump of B start above the revision plus B. It
// reads the file with etcd's snapshot status, which checks every page first.
// It returns an error matching fence.ErrInvalid if path does not exist, is a
// directory or is not an intact etcd snapshot.
func SnapshotRevision(path string) (rev int64, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, fmt.Errorf("snapshot %s: no such file: %w", path, fence.ErrInvalid)
	case err != nil:
		return 0, fmt.Errorf("snapshot %s: %w", path, err)
	case fi.IsDir():
		return 0, fmt.Errorf("snapshot %s: is a directory, want a snapshot file: %w", path, fence.ErrInvalid)
	}
	if err := checkDigest(path, fi.Size()); err != nil {
		return 0, err
	}
	defer func() {
		if r := recover(); r != nil { // bbolt on a page it cannot read
			rev, err = 0, fmt.Errorf("snapshot %s: not an intact etcd snapshot (%v): %w", path, r, fence.ErrInvalid)
		}
	}()
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return 0, fmt.Errorf("snapshot %s: not an intact etcd snapshot (%s): %w", path, strings.Join(strings.Fields(err.Error()), " "), fence.ErrInvalid)
	}
	return st.Revision, nil
}

// checkDigest checks the SHA-256 digest that ends a snapshot taken from a
// member (etcd appends it to the stream Maintenance.Snapshot sends, and its
// restore checks it), before anything opens the file as a database: a file cut
// short would otherwise be mapped past its end, which kills the process rather
// than fail. It returns an error matching fence.ErrInvalid if the file is too
// short or its digest does not match.
func checkDigest(path string, size int64) error {
	damaged := func(why string) error {
		return fmt.Errorf("snapshot %s: %s: not a whole snapshot taken by fence cluster backup or migrate: %w", path, why, fence.ErrInvalid)
	}
	if size <= sha256.Size {
		return damaged(fmt.Sprintf("only %d bytes", size))
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, size-sha256.Size); err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return damaged("its SHA-256 digest does not match (cut short, changed, or copied from a data directory)")
	}
	return nil
}

// initialCluster returns etcd's initial cluster of peers ("a=URL,b=URL", sorted by
// name) and the peer URL of name, or an error matching fence.ErrInvalid.
func initialCluster(name string, peers map[string]string, tls bool) (initial, self string, err error) {
	if len(peers) == 0 {
		return "", "", fmt.Errorf("no peers: want NAME=HOST:PORT for every node: %w", fence.ErrInvalid)
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	names := slices.Sorted(maps.Keys(peers))
	var parts []string
	for _, n := range names {
		addr := peers[n]
		host, port, err := net.SplitHostPort(addr)
		if n == "" || strings.ContainsAny(n, "=, ") || err != nil || host == "" || port == "" {
			return "", "", &fence.InvalidError{Field: "peer", Value: n + "=" + addr, Reason: "want NAME=HOST:PORT"}
		}
		u := (&url.URL{Scheme: scheme, Host: addr}).String()
		parts = append(parts, n+"="+u)
		if n == name {
			self = u
		}
	}
	if self == "" {
		return "", "", &fence.InvalidError{Field: "node", Value: name, Reason: fmt.Sprintf("is not one of the peers (%s)", strings.Join(names, ", "))}
	}
	return strings.Join(parts, ","), self, nil
}

// emptyOrMissing returns nil if dir does not exist or is an empty directory, an
// error matching fence.ErrInvalid if it holds anything.
func emptyOrMissing(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %v: %w", dir, err, fence.ErrInvalid)
	case len(ents) > 0:
		return fmt.Errorf("%s already holds a member's data: restore never overwrites it; move it away first: %w", dir, fence.ErrInvalid)
	}
	return nil
}

// etcdDataDir is where the etcd member of a node with cluster directory dir
// (Config.Dir) keeps its data, as Start lays it out.
func etcdDataDir(dir string) string { return filepath.Join(dir, "etcd") }

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// clearDir removes what a failed restore wrote into dir: dir itself if it did
// not exist before, else its contents (it was empty).
func clearDir(dir string, existed bool) {
	if !existed {
		_ = os.RemoveAll(dir)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// member is an etcd member embedded in this process, for the moves of this file
// (Migrate's throwaway members) and their tests: no client port, a client in
// process.
type member struct {
	e    *embed.Etcd
	cli  *clientv3.Client
	once sync.Once
}

// memberSpec is what startMember needs: a member of peers (name -> HOST:PORT on
// loopback or the node's address) with its data in dir; existing data (a
// restored directory) is used as it is.
type memberSpec struct {
	name  string
	dir   string
	peers map[string]string
	token string
	// noSync skips fsync: for a throwaway member whose data is read back only
	// through a snapshot while it runs (Migrate's), never after a crash.
	noSync bool
}

// startTimeout bounds how long startMember waits for its member to be ready.
const startTimeout = 30 * time.Second

// startMember starts the member of s and waits until it is ready to serve (it
// has a leader) or ctx ends. The caller closes it.
func startMember(ctx context.Context, s memberSpec) (*member, error) {
	initial, self, err := initialCluster(s.name, s.peers, false)
	if err != nil {
		return nil, err
	}
	purl, err := url.Parse(self)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = s.name, s.dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls, cfg.ListenMetricsUrls = nil, nil, nil
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = orDefault(s.token, DefaultClusterToken)
	cfg.TickMs, cfg.ElectionMs = 50, 500
	cfg.UnsafeNoFsync = s.noSync
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", s.name, err)
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd member %s: %w", s.name, err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("etcd member %s: not ready after %v: %w", s.name, startTimeout, fence.ErrUnavailable)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &member{e: e, cli: v3client.New(e.Server)}, nil
}

// close stops the member and waits until it has. It is idempotent.
func (m *member) close() {
	m.once.Do(func() {
		_ = m.cli.Close()
		m.e.Close()
	})
}

// freeLoopback returns a 127.0.0.1 address with a port that was free a moment
// ago, for a throwaway member's peer listener.
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
