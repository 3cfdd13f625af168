package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/etcdmember"
	fenceredis "github.com/fencelock/fence/redis"
)

// The rows, by the names --rows takes.
const (
	RowRedislock = "redislock" // bsm/redislock, waiting with LinearBackoff(10ms)
	// RowRedislockAOF is bsm/redislock on a Redis that, like fence serve's
	// embedded store, has every write on disk before it answers (appendonly yes,
	// appendfsync always): the peer to compare durable rows with.
	RowRedislockAOF = "redislock-aof"
	RowRedsync      = "redsync"     // go-redsync v4 with its defaults
	RowEtcdMutex    = "etcd-mutex"  // etcd's concurrency.Mutex
	RowFenceRedis   = "fence-redis" // fence's redis.Locker
	RowFenceEtcd    = "fence-etcd"  // fence's etcd.Locker
	RowFenceServe   = "fence-serve" // fence serve over HTTP (bolt store), Go client fencehttp
	RowFenceBolt    = "fence-bolt"  // the embedded bolt store in process

	// The cluster rows (ClusterRows) run their servers as processes: three etcd
	// members (this program re-executed, see MemberMain) and fence serve.
	RowEtcd3Mutex         = "etcd3-mutex"          // etcd's concurrency.Mutex on a three-member etcd
	RowEtcd3MutexFollower = "etcd3-mutex-follower" // the same Mutex, each client given one follower's endpoint only
	RowEtcd3MutexLeader   = "etcd3-mutex-leader"   // the same Mutex, each client given the leader's endpoint only
	RowFenceServeEtcd3    = "fence-serve-etcd3"    // fence serve --store etcd:// on that etcd, over HTTP
	RowCluster            = "cluster"              // three fence serve --node processes, the Go client given all three, a follower first
	RowClusterLeader      = "cluster-leader"       // the same cluster, the Go client given all three, the leader first
)

// Rows are the rows of the default table ("all"), in its order.
var Rows = []string{RowRedislock, RowRedislockAOF, RowRedsync, RowEtcdMutex, RowFenceRedis, RowFenceEtcd, RowFenceServe, RowFenceBolt}

// ClusterRows are the rows of cluster mode and its peers, measured only when named
// (--rows): they start six server processes and need the fence binary
// (Options.Fence), and each of their rounds adds a handoff after an expiry of a
// second or more. ParseRows takes "cluster-rows" for all of them.
var ClusterRows = []string{RowEtcd3Mutex, RowEtcd3MutexFollower, RowEtcd3MutexLeader, RowFenceServeEtcd3, RowCluster, RowClusterLeader}

// knownRows are every row, in the order of the table.
var knownRows = append(slices.Clone(Rows), ClusterRows...)

var labels = map[string]string{
	RowRedislock:    "bsm/redislock (LinearBackoff 10 ms)",
	RowRedislockAOF: "bsm/redislock, Redis with appendfsync always",
	RowRedsync:      "redsync v4 defaults",
	RowEtcdMutex:    "etcd concurrency.Mutex",
	RowFenceRedis:   "fence redis",
	RowFenceEtcd:    "fence etcd",
	RowFenceServe:   "fence serve over HTTP (embedded store)",
	RowFenceBolt:    "fence bolt in process",

	RowEtcd3Mutex:         "etcd concurrency.Mutex, 3 members",
	RowEtcd3MutexFollower: "etcd concurrency.Mutex, 3 members, clients on a follower",
	RowEtcd3MutexLeader:   "etcd concurrency.Mutex, 3 members, clients on the leader",
	RowFenceServeEtcd3:    "fence serve --store etcd://, 3 members",
	RowCluster:            "fence cluster, 3 nodes, clients on a follower",
	RowClusterLeader:      "fence cluster, 3 nodes, clients on the leader",
}

// Label returns the table's label of row ("fence redis"), or row itself if it is
// not one of Rows.
func Label(row string) string {
	if l, ok := labels[row]; ok {
		return l
	}
	return row
}

// ParseRows parses a comma-separated list of row names ("" or "all": Rows;
// "cluster-rows": ClusterRows) into rows in the table's order, without repeats. It
// returns an error matching fence.ErrInvalid that names the known rows for an
// unknown one.
func ParseRows(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" || strings.TrimSpace(list) == "all" {
		return slices.Clone(Rows), nil
	}
	want := map[string]bool{}
	for _, r := range strings.Split(list, ",") {
		r = strings.TrimSpace(r)
		switch {
		case r == "":
			continue
		case r == "all":
			for _, k := range Rows {
				want[k] = true
			}
			continue
		case r == "cluster-rows":
			for _, k := range ClusterRows {
				want[k] = true
			}
			continue
		case !slices.Contains(knownRows, r):
			return nil, fmt.Errorf("bench: %w: unknown row %q: want a comma-separated list of %s (or all, cluster-rows)", fence.ErrInvalid, r, strings.Join(knownRows, ","))
		}
		want[r] = true
	}
	var rows []string
	for _, r := range knownRows {
		if want[r] {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("bench: %w: no rows in %q", fence.ErrInvalid, list)
	}
	return rows, nil
}

// Env holds the throwaway servers of a run: a redis-server, a single-member
// embedded etcd, bolt stores and fence serve's handler, each started only if one
// of its rows needs it. Its clients' connections are its servers'.
type Env struct {
	dir       string // bolt stores, etcd data; removed by Close
	redis     *servers.Redis
	redisAOF  *servers.Redis // appendonly yes, appendfsync always
	etcd      *embed.Etcd
	etcdURL   string
	bolt      *bolt.Store // the in-process row's store
	serveBolt *bolt.Store // fence serve's store
	http      *http.Server
	httpURL   string

	etcd3 *etcdmember.Cluster // three members, processes
	// The client URLs of a member of etcd3 that is not its leader, and of its leader.
	etcd3Follower, etcd3Leader string
	serveEtcd3URL              string   // fence serve --store etcd:// on etcd3
	clusterURLs                []string // the three fence serve --node processes
	// The cluster rows' server lists (comma-separated): a follower first and the
	// leader last, or the leader first.
	clusterFollowerFirst, clusterLeaderFirst string
	procs                                    []*servers.Process // the fence serve processes

	closeOnce sync.Once
	closeErr  error
}

// Start is StartWith without Options: it cannot start the rows that run the fence
// binary (fence-serve-etcd3, cluster).
func Start(ctx context.Context, rows []string) (*Env, error) {
	return StartWith(ctx, rows, Options{})
}

// StartWith starts the servers rows need. It returns an error matching
// servers.ErrNotFound, whose message names the package to install, if
// redis-server is missing, one matching fence.ErrInvalid if a row needs
// opts.Fence and it is empty or not an executable, or the error of a server that does not start. The
// three-member etcd's members are this program re-executed: it must call
// MemberMain first. The caller must Close the Env.
func StartWith(ctx context.Context, rows []string, opts Options) (_ *Env, err error) {
	e := &Env{}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	need := func(rs ...string) bool {
		for _, r := range rs {
			if slices.Contains(rows, r) {
				return true
			}
		}
		return false
	}
	if e.dir, err = servers.MakeDir("bench"); err != nil {
		return nil, err
	}
	if need(RowRedislock, RowRedsync, RowFenceRedis) {
		if e.redis, err = servers.StartRedis(); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	if need(RowRedislockAOF) {
		// Its append-only file is in its own temporary directory, on the same
		// file system as the bolt stores.
		if e.redisAOF, err = servers.StartRedis("--appendonly", "yes", "--appendfsync", "always"); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	if need(RowEtcdMutex, RowFenceEtcd) {
		if err = e.startEtcd(); err != nil {
			return nil, fmt.Errorf("bench: etcd: %w", err)
		}
	}
	if need(RowFenceBolt) {
		if e.bolt, err = bolt.Open(filepath.Join(e.dir, "bolt.db"), nil); err != nil {
			return nil, fmt.Errorf("bench: bolt: %w", err)
		}
	}
	if need(RowFenceServe) {
		if err = e.startServe(); err != nil {
			return nil, fmt.Errorf("bench: fence serve: %w", err)
		}
	}
	if NeedsFence(rows) {
		if opts.Fence == "" {
			return nil, fmt.Errorf("bench: %w: rows %s run the fence binary: give its path (--fence)", fence.ErrInvalid, strings.Join(fenceRows, ", "))
		}
		if _, err := exec.LookPath(opts.Fence); err != nil {
			return nil, fmt.Errorf("bench: %w: --fence %s: not an executable fence binary: %v", fence.ErrInvalid, opts.Fence, err)
		}
	}
	if need(RowEtcd3Mutex, RowEtcd3MutexFollower, RowEtcd3MutexLeader, RowFenceServeEtcd3) {
		if err = e.startEtcd3(ctx); err != nil {
			return nil, fmt.Errorf("bench: three-member etcd: %w", err)
		}
	}
	if need(RowFenceServeEtcd3) {
		if err = e.startServeEtcd3(opts.Fence); err != nil {
			return nil, fmt.Errorf("bench: fence serve --store etcd://: %w", err)
		}
	}
	if need(RowCluster, RowClusterLeader) {
		if err = e.startCluster(ctx, opts.Fence); err != nil {
			return nil, fmt.Errorf("bench: fence cluster: %w", err)
		}
	}
	return e, nil
}

// startEtcd starts the single-member embedded etcd of internal/servers/etcdmember (fast
// raft timing, durable: every write is fsynced) on free ports.
func (e *Env) startEtcd() (err error) {
	e.etcd, e.etcdURL, err = etcdmember.StartSingle(e.dir, "bench", "fence-bench", nil)
	return err
}

// startServe serves fence serve's handler (fencehttp.Server on a bolt store, as
// `fence serve` runs it) on a free port of 127.0.0.1, in this process.
func (e *Env) startServe() error {
	s, err := bolt.Open(filepath.Join(e.dir, "serve.db"), nil)
	if err != nil {
		return err
	}
	e.serveBolt = s
	srv, err := fencehttp.NewServer(fencehttp.Config{Locker: s, KV: s})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	e.http = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	e.httpURL = "http://" + ln.Addr().String()
	go func() { _ = e.http.Serve(ln) }()
	return nil
}

// Close stops the servers and removes their data. It returns the first error of
// closing a store; it is idempotent.
func (e *Env) Close() error {
	e.closeOnce.Do(func() {
		var errs []error
		if e.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, ignoreClosed(e.http.Shutdown(ctx)))
			cancel()
		}
		for _, p := range e.procs {
			p.Kill()
		}
		if e.etcd3 != nil {
			e.etcd3.Close()
		}
		for _, s := range []*bolt.Store{e.serveBolt, e.bolt} {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
		if e.etcd != nil {
			e.etcd.Close()
		}
		for _, r := range []*servers.Redis{e.redis, e.redisAOF} {
			if r != nil {
				r.Close()
			}
		}
		if e.dir != "" {
			errs = append(errs, os.RemoveAll(e.dir))
		}
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// NewClient returns a new client of row's system, with connections of its own
// (the in-process bolt row: a handle on the one store). It returns an error if the
// Env was started without row's server, or the library's error.
func (e *Env) NewClient(row string) (Client, error) {
	switch row {
	case RowRedislock, RowRedsync, RowFenceRedis:
		if e.redis == nil {
			return nil, fmt.Errorf("bench: %s: no redis-server started", row)
		}
		rc := goredis.NewClient(&goredis.Options{Addr: e.redis.Addr})
		switch row {
		case RowRedislock:
			return &redislockClient{rc: rc, c: redislock.New(rc)}, nil
		case RowRedsync:
			return &redsyncClient{rc: rc, rs: redsync.New(redsyncgoredis.NewPool(rc))}, nil
		}
		l, err := fenceredis.NewLocker(rc, nil)
		if err != nil {
			rc.Close()
			return nil, err
		}
		return &lockerClient{l: l, close: func() error { return errors.Join(l.Close(), rc.Close()) }}, nil
	case RowRedislockAOF:
		if e.redisAOF == nil {
			return nil, fmt.Errorf("bench: %s: no redis-server with appendfsync always started", row)
		}
		rc := goredis.NewClient(&goredis.Options{Addr: e.redisAOF.Addr})
		return &redislockClient{rc: rc, c: redislock.New(rc)}, nil
	case RowEtcdMutex, RowFenceEtcd:
		if e.etcd == nil {
			return nil, fmt.Errorf("bench: %s: no etcd started", row)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		if row == RowEtcdMutex {
			sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(lockTTL/time.Second)))
			if err != nil {
				cli.Close()
				return nil, err
			}
			return &etcdMutexClient{cli: cli, sess: sess}, nil
		}
		l := etcd.NewLocker(cli, nil)
		return &lockerClient{l: l, close: func() error { return errors.Join(l.Close(), cli.Close()) }}, nil
	case RowFenceServe:
		if e.http == nil {
			return nil, fmt.Errorf("bench: %s: no fence serve started", row)
		}
		return newHTTPClient(e.httpURL)
	case RowFenceBolt:
		if e.bolt == nil {
			return nil, fmt.Errorf("bench: %s: no bolt store opened", row)
		}
		return &lockerClient{l: e.bolt, close: func() error { return nil }}, nil
	case RowEtcd3Mutex, RowEtcd3MutexFollower, RowEtcd3MutexLeader, RowFenceServeEtcd3, RowCluster, RowClusterLeader:
		return e.newClusterRowClient(row)
	}
	return nil, fmt.Errorf("bench: %w: unknown row %q", fence.ErrInvalid, row)
}

// lockerClient is a client of a fence.Locker: fence's rows.
type lockerClient struct {
	l     fence.Locker
	close func() error
}

func (c *lockerClient) Lock(name string) Lock { return &lockerLock{l: c.l, name: name} }
func (c *lockerClient) Close() error          { return c.close() }

type lockerLock struct {
	l     fence.Locker
	name  string
	lease *fence.Lease
}

func (l *lockerLock) Acquire(ctx context.Context, wait bool) error {
	var opts []fence.AcquireOption
	if wait {
		opts = append(opts, fence.WithWait(waitTimeout))
	}
	lease, err := l.l.Acquire(ctx, l.name, lockTTL, opts...)
	if err != nil {
		return err
	}
	l.lease = lease
	return nil
}

func (l *lockerLock) Release(ctx context.Context) error {
	if l.lease == nil {
		return errors.New("bench: release of a lock not acquired")
	}
	lease := l.lease
	l.lease = nil
	return lease.Release(ctx)
}

// redislockClient is a client of bsm/redislock.
type redislockClient struct {
	rc *goredis.Client
	c  *redislock.Client
}

func (c *redislockClient) Lock(name string) Lock { return &redislockLock{c: c.c, name: name} }
func (c *redislockClient) Close() error          { return c.rc.Close() }

type redislockLock struct {
	c    *redislock.Client
	name string
	lock *redislock.Lock
}

// waitingRetry is how bsm/redislock waits in the table: it polls every 10ms.
var waitingRetry = &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}

func (l *redislockLock) Acquire(ctx context.Context, wait bool) error {
	var opts *redislock.Options // no retry
	if wait {
		opts = waitingRetry
	}
	lock, err := l.c.Obtain(ctx, l.name, lockTTL, opts)
	if err != nil {
		return err
	}
	l.lock = lock
	return nil
}

func (l *redislockLock) Release(ctx context.Context) error {
	if l.lock == nil {
		return errors.New("bench: release of a lock not acquired")
	}
	lock := l.lock
	l.lock = nil
	return lock.Release(ctx)
}

// redsyncClient is a client of redsync with its default options (which retry 32
// times, 50 to 250ms apart, whether asked to wait or not).
type redsyncClient struct {
	rc *goredis.Client
	rs *redsync.Redsync
}

func (c *redsyncClient) Lock(name string) Lock { return &redsyncLock{m: c.rs.NewMutex(name)} }
func (c *redsyncClient) Close() error          { return c.rc.Close() }

type redsyncLock struct{ m *redsync.Mutex }

func (l *redsyncLock) Acquire(ctx context.Context, _ bool) error { return l.m.LockContext(ctx) }

func (l *redsyncLock) Release(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reported the lock not held")
	}
	return err
}

// etcdMutexClient is a client of etcd's concurrency.Mutex, on a session (lease)
// of its own.
type etcdMutexClient struct {
	cli  *clientv3.Client
	sess *concurrency.Session
}

func (c *etcdMutexClient) Lock(name string) Lock {
	return &etcdMutexLock{m: concurrency.NewMutex(c.sess, "/fence-bench/"+name)}
}

func (c *etcdMutexClient) Close() error { return errors.Join(c.sess.Close(), c.cli.Close()) }

type etcdMutexLock struct{ m *concurrency.Mutex }

// Acquire calls Lock, waiting or not: Lock is how the Mutex is used (TryLock would
// save Lock's one read of the earlier waiters on a free lock).
func (l *etcdMutexLock) Acquire(ctx context.Context, _ bool) error { return l.m.Lock(ctx) }

func (l *etcdMutexLock) Release(ctx context.Context) error { return l.m.Unlock(ctx) }
