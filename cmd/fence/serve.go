package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/cluster"
)

// servedStore is what `fence serve` serves: a Locker, the fenced KV that lives in the
// same store (so servers sharing a store share the data), and how to close them.
type servedStore struct {
	locker fence.Locker
	kv     fence.KV
	close  func() error
	desc   string // for the log, without credentials
}

// storeOpener opens the store of a --store URL. dataDir is --data.
type storeOpener func(ctx context.Context, u *url.URL, dataDir string) (*servedStore, error)

// storeOpeners maps --store URL schemes to their openers, each in its backend's
// file (store_BACKEND.go). Adding a backend is one entry here and its opener.
var storeOpeners = map[string]storeOpener{
	"bolt":       openBoltStore,
	"etcd":       openEtcdStore,
	"postgres":   openPostgresStore,
	"postgresql": openPostgresStore,
	"redis":      openRedisStore,
	"rediss":     openRedisStore,
	"zk":         openZooKeeperStore,
	"zookeeper":  openZooKeeperStore,
}

// openBoltStore opens the embedded store: --store bolt:PATH (or bolt:///abs/path),
// or DATA/fence.db when --store is omitted.
func openBoltStore(_ context.Context, u *url.URL, dataDir string) (*servedStore, error) {
	return openBolt(u, dataDir, false)
}

// openExternalLocksStore opens the embedded store of --store (bolt:PATH, or
// DATA/fence.db when store is "") for --external-locks: its KV admits fences of
// another locker (bolt.Options.ExternalLocks). Any other store is a usage error:
// it keeps its own locks, whose tokens it checks.
func openExternalLocksStore(store, dataDir string) (*servedStore, error) {
	if store == "" {
		return openBolt(nil, dataDir, true)
	}
	scheme, _, _ := strings.Cut(store, ":")
	if !strings.EqualFold(scheme, "bolt") {
		return nil, usagef("--external-locks: only the embedded store (bolt) takes the fences of another locker, not --store %q", redactURL(store))
	}
	u, err := url.Parse(store)
	if err != nil {
		return nil, usagef("--store %q: %v", redactURL(store), err)
	}
	return openBolt(u, dataDir, true)
}

// openBolt opens the embedded store of u (DATA/fence.db if u is nil); with
// externalLocks, its KV admits fences it never issued.
func openBolt(u *url.URL, dataDir string, externalLocks bool) (*servedStore, error) {
	path := filepath.Join(dataDir, "fence.db")
	if u != nil {
		path = u.Opaque
		if path == "" {
			path = u.Path
		}
		if path == "" {
			return nil, usagef("--store bolt:PATH: the path is empty")
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("serve: data directory: %w", err)
	}
	clock, err := processClock()
	if err != nil {
		return nil, err
	}
	s, err := bolt.Open(path, &bolt.Options{Clock: clock, ExternalLocks: externalLocks})
	if err != nil {
		return nil, err
	}
	return &servedStore{locker: s, kv: s, close: s.Close, desc: "bolt:" + path}, nil
}

// openStore picks the opener for --store.
func openStore(ctx context.Context, store, dataDir string) (*servedStore, error) {
	if store == "" {
		return openBoltStore(ctx, nil, dataDir)
	}
	// The scheme decides; each opener parses the rest its own way (etcd://h1:2379,h2:2379
	// is not one URL host).
	scheme, _, ok := strings.Cut(store, ":")
	scheme = strings.ToLower(scheme)
	if !ok || scheme == "" {
		return nil, usagef("--store %q: want a URL such as bolt:PATH, redis://HOST:PORT, etcd://HOST:PORT,HOST:PORT, postgres://..., zk://HOST:PORT", redactURL(store))
	}
	if open, found := storeOpeners[scheme]; found {
		u, err := url.Parse(store)
		if err != nil {
			return nil, usagef("--store %q: %v", redactURL(store), err)
		}
		return open(ctx, u, dataDir)
	}
	return nil, usagef("--store %q: unknown store scheme %q", redactURL(store), scheme)
}

// redactURL drops a password from a store URL, for messages and logs. A URL it
// cannot parse is cut after the scheme, in case it holds credentials.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		scheme, _, _ := strings.Cut(s, ":")
		return scheme + ":..."
	}
	return u.Redacted()
}

// readAuthTokens reads the token file of --auth-token-file (see
// fencehttp.ParseAuthTokens): one token a line, with its rights and names if
// scoped; blank lines and lines starting with # are skipped.
func readAuthTokens(path string) ([]fencehttp.AuthToken, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--auth-token-file: %v", err)
	}
	defer f.Close()
	toks, err := fencehttp.ParseAuthTokens(f)
	if err != nil {
		return nil, usagef("--auth-token-file %s: %s", path, strings.TrimPrefix(err.Error(), "fencehttp: token file "))
	}
	if len(toks) == 0 {
		return nil, usagef("--auth-token-file %s: no token in it (one a line)", path)
	}
	return toks, nil
}

func newServeCmd() *cobra.Command {
	var (
		listen, data, store, tlsCert, tlsKey, authFile, logLevel string
		maxValue                                                 int64
		maxWaiters, gcPercent                                    int
		externalLocks, allowNoAuth                               bool
		maxWait, shutdownTimeout, headerTimeout, readTimeout     time.Duration
		cf                                                       clusterFlags
	)
	cmd := &cobra.Command{
		Use:   "serve [--listen 127.0.0.1:7420] [--data ./fence-data] [--store URL | --node NAME --peers NAME=HOST:PORT,...]",
		Short: "Run the fence lock server (HTTP API v1) over the embedded store or --store",
		Long: `serve runs the lock server: fenced locks and a fenced key-value store over HTTP (see
package fencehttp for the API). Without --store it keeps everything in the embedded
durable store DATA/fence.db: tokens and leases survive kill -9. With --store the
locks and the KV live in that store, so several servers can share it:

  --store bolt:PATH                      another embedded file
  --store etcd://h1:2379,h2:2379[/pfx/]  etcd cluster (the way past one machine; a lock
                                         not released is held at least etcd's minimum
                                         lease TTL, 2s by default, whatever its TTL)
  --store postgres://user@host/db        PostgreSQL (tables created if missing)
  --store redis://host:6379[/db]         Redis (tokens best effort across failover)
  --store zk://h1:2181,h2:2181[/root]    ZooKeeper ensemble

The KV refuses a fence its store never issued: a token above the last one granted
for Fence-Lock, a lock never granted, or a Fence-Lease other than the lease the
token went to (409 unissued_token), so a typo cannot fence out the real holder.
--external-locks is for clients that take their locks elsewhere (a Redis) and
write here: the embedded store then admits their tokens by the guard rule alone.

--auth-token-file makes every request but /healthz need Authorization: Bearer TOKEN
(clients read $FENCE_AUTH_TOKEN). The file has one token a line, alone (every
right) or scoped: "TOKEN RIGHTS [NAME...]", RIGHTS from read, lock, write, admin
(revoke, heal, /metrics; unscoped, cluster backups and member changes) or all,
each NAME a lock name or key, or a prefix ending in '*' ("jobs/*"); a token is
refused (403) what its scope does not cover. --tls-cert and
--tls-key serve HTTPS, over HTTP/1.1 or HTTP/2; without them the server speaks HTTP/1.1
and HTTP/2 with prior knowledge (h2c). Logs go to stderr (JSON with -o json).

Closed by default: --listen beyond loopback (":PORT", 0.0.0.0, ::, a host name
other than localhost, an address outside 127.0.0.0/8 and ::1; judged without DNS)
needs --auth-token-file, or --allow-no-auth to say that the network is private;
otherwise serve exits 2 before it opens anything.

Cluster mode: --node NAME --peers a=HOST:PORT,b=HOST:PORT,c=HOST:PORT on three (or
five) machines, each naming itself with --node, makes the servers one cluster: each
node embeds an etcd member (peer traffic on its --peers address, data in
DATA/cluster, no etcd client port) and serves the whole API from the cluster's
store, so any node answers any request and the cluster keeps serving while a
majority of its nodes runs. A node cut off from the majority answers 503 to grants
and writes, within 5 election timeouts, and to GET /readyz (200 while the node
sees a leader; outside cluster mode, 200 unless shutting down). Restarting a node with the same flags and
data rejoins it; --join starts a node just added with fence cluster add. Peer TLS:
--peer-cert, --peer-key and --peer-ca (every peer's certificate must chain to the
CA, in both directions). A peer address off loopback (any host name, localhost
included, since a node listens on every interface for a name) without peer TLS
is refused (exit 2) unless --allow-plain-peers says the network between the nodes
is private. See docs/cluster.md.

Waiting acquires of a lock are granted in the order they reached this server, and
none is jumped by a newcomer; with --store shared by several servers each server
orders its own waiters only.

Slow or hostile clients are cut off: a request's headers must arrive within
--header-timeout (else the connection is closed), and the whole request, headers and
body, within --read-timeout (else 503 and close); headers beyond 64 KiB get 431.
Neither bound limits a long poll, which waits up to --max-wait once its request is
read. Each open connection costs the server one file descriptor (the server raises
its soft open-files limit to the hard one: make the hard limit, ulimit -Hn, exceed
the clients and waiters you expect, plus a few dozen), and each waiting request
about 22 KB of memory: --max-waiters caps them (one more is answered 503 with
Retry-After).

Memory: over the embedded store a held lease costs the server about 280 bytes of RSS
at a million leases. The Go GC runs at --gc-percent 50 (GOGC, if set, replaces that
default; GOMEMLIMIT works as usual): the heap grows to 1.5 times what is live between
collections, against 2 times at Go's default of 100, for some more GC CPU.

SIGTERM or SIGINT shuts down gracefully: /healthz turns 503, long polls and blocking
queries end, requests in flight finish (up to --shutdown-timeout), then the store is
closed cleanly.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Every flag is checked before the store is opened, so that a mistake is
			// named as such, not as the store's refusal (another server holding it).
			addr, err := listenAddr(listen)
			if err != nil {
				return err
			}
			if err := refuseOpenListener("--listen", addr, authFile != "", allowNoAuth); err != nil {
				return err
			}
			if (tlsCert == "") != (tlsKey == "") {
				return usagef("--tls-cert and --tls-key go together")
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level %q: want debug, info, warn or error", logLevel)
			}
			if maxWaiters < 0 {
				return usagef("--max-waiters must not be negative (0: no cap)")
			}
			if gcPercent < -1 || gcPercent == 0 {
				return usagef("--gc-percent %d: want a positive percentage, or -1 for no collection but GOMEMLIMIT's", gcPercent)
			}
			if _, fromEnv := os.LookupEnv("GOGC"); !fromEnv || cmd.Flags().Changed("gc-percent") {
				debug.SetGCPercent(gcPercent)
			}
			if maxValue <= 0 || maxWait <= 0 || shutdownTimeout <= 0 || headerTimeout <= 0 || readTimeout <= 0 {
				return usagef("--max-value, --max-wait, --header-timeout, --read-timeout and --shutdown-timeout must be positive")
			}
			clusterCfg, err := cf.config(cmd.Flags(), store, data, externalLocks)
			if err != nil {
				return err
			}
			var toks []fencehttp.AuthToken
			if authFile != "" {
				var err error
				if toks, err = readAuthTokens(authFile); err != nil {
					return err
				}
			}
			var tlsConf *tls.Config
			if tlsCert != "" {
				cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usagef("--tls-cert/--tls-key: %v", err)
				}
				tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			}
			opts := &slog.HandlerOptions{Level: level}
			var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
			if output == "json" {
				h = slog.NewJSONHandler(os.Stderr, opts)
			}
			log := slog.New(h)
			return serve(cmd.Context(), log, serveConfig{
				listen: addr, data: data, store: store, tls: tlsConf, tokens: toks,
				maxValue: maxValue, maxWait: maxWait, shutdownTimeout: shutdownTimeout,
				headerTimeout: headerTimeout, readTimeout: readTimeout, maxWaiters: maxWaiters, externalLocks: externalLocks,
				cluster: clusterCfg,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:7420", "address to listen on: HOST:PORT; a bare PORT means 127.0.0.1:PORT (loopback only), :PORT every interface; port 0: any free port, logged")
	f.StringVar(&data, "data", "./fence-data", "directory of the embedded store")
	f.StringVar(&store, "store", "", "store URL instead of the embedded one: bolt:PATH, redis://, etcd://h1,h2/, postgres://, zk://h1,h2")
	f.StringVar(&tlsCert, "tls-cert", "", "PEM certificate (chain) to serve HTTPS")
	f.StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&authFile, "auth-token-file", "", "file of accepted bearer tokens, one a line: TOKEN [RIGHTS [NAME|PREFIX* ...]]")
	f.BoolVar(&allowNoAuth, "allow-no-auth", false, "the network is private: serve without --auth-token-file on an address beyond loopback (refused otherwise), with a warning at each start")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.Int64Var(&maxValue, "max-value", fencehttp.DefaultMaxValueBytes, "largest KV value, in bytes (413 beyond)")
	f.DurationVar(&maxWait, "max-wait", fencehttp.DefaultMaxWait, "longest single long poll of a waiting acquire or blocking query (GET /v1/locks/NAME?index=N)")
	f.IntVar(&maxWaiters, "max-waiters", 0, "most waiting acquires and blocking queries at once, each about 22 KB of memory and a file descriptor (one more: 503); 0: no cap")
	f.IntVar(&gcPercent, "gc-percent", defaultServeGCPercent, "Go GC target (as GOGC; the GOGC variable, if set, wins over the default): heap growth between collections, in percent of the live heap; lower keeps RSS nearer the lease table at more GC CPU")
	f.DurationVar(&headerTimeout, "header-timeout", 10*time.Second, "longest time a client may take to send a request's headers (then the connection is closed)")
	f.DurationVar(&readTimeout, "read-timeout", time.Minute, "longest time a client may take to send a whole request, headers and body (then 503); a long poll's wait is not counted")
	f.DurationVar(&shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for requests in flight")
	cf.add(f)
	f.BoolVar(&externalLocks, "external-locks", false, "the KV's fences come from another locker (say a Redis the clients lock on), not from this server: the embedded store then admits tokens it never issued, by the guard rule alone")
	return cmd
}

// defaultServeGCPercent is the GC target of fence serve (Go's default is 100).
// The server's live heap is mostly its lease table, which lives as long as the
// leases; at GOGC=100 the heap grows to twice it between collections, and the
// RSS with it. At 50 the RSS is about 1.5 times the table; the price is GC
// CPU, which BenchmarkServe_HeldLeaseMemory reports (server-cpu-us/acquire).
const defaultServeGCPercent = 50

type serveConfig struct {
	listen, data, store string
	tls                 *tls.Config
	tokens              []fencehttp.AuthToken
	maxValue            int64
	maxWait             time.Duration
	shutdownTimeout     time.Duration
	headerTimeout       time.Duration // http.Server.ReadHeaderTimeout
	readTimeout         time.Duration // http.Server.ReadTimeout
	maxWaiters          int
	externalLocks       bool            // --external-locks
	cluster             *cluster.Config // cluster mode (--node), or nil
}

func serve(ctx context.Context, log *slog.Logger, c serveConfig) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	scheme := "http"
	if c.tls != nil {
		scheme = "https"
	}
	var (
		st       *servedStore
		err      error
		ln       net.Listener
		node     *cluster.Node
		nodeDone <-chan struct{} // closed when the cluster member stops on its own; nil outside cluster mode
		nodeErr  <-chan error    // the cluster member's fatal errors; nil outside cluster mode
	)
	switch {
	case c.cluster != nil:
		// The node publishes its API URL, port included: with --listen's port 0
		// the port is known once listening, so listen first (requests then wait
		// for the majority); otherwise listen once the node is ready, so that a
		// client is refused at once meanwhile and tries another node.
		addr := c.listen
		if _, port, _ := net.SplitHostPort(c.listen); port == "0" {
			if ln, err = net.Listen("tcp", c.listen); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			addr = ln.Addr().String()
		}
		cfg := *c.cluster
		cfg.APIURL = apiURL(scheme, addr, cfg.Peers[cfg.Name])
		if name, peer, open := plainPeerOffLoopback(cfg.Peers); open && cfg.PeerTLS == (cluster.TLSFiles{}) {
			log.Warn("peer traffic leaves loopback in plain HTTP (--allow-plain-peers): anyone who reaches a peer port can read the replicated store, every lease id included, and send this node Raft messages; keep the network private or use --peer-cert, --peer-key and --peer-ca", "peer", name+"="+peer)
		}
		log.Info("cluster mode: starting this node's member, waiting for a majority of the nodes", "node", cfg.Name, "peers", len(cfg.Peers), "data", cfg.Dir)
		if st, node, err = openClusterStore(ctx, cfg); err != nil {
			if ln != nil {
				ln.Close()
			}
			return err
		}
		nodeDone, nodeErr = node.Done(), node.Err()
	case c.externalLocks:
		st, err = openExternalLocksStore(c.store, c.data)
	default:
		st, err = openStore(ctx, c.store, c.data)
	}
	if err != nil {
		return err
	}
	closeStore := func() {
		if err := st.close(); err != nil {
			log.Error("closing the store", "store", st.desc, "err", err)
		}
	}
	hcfg := fencehttp.Config{
		Locker: st.locker, KV: st.kv, Logger: log, Tokens: c.tokens,
		MaxValueBytes: c.maxValue, MaxWait: c.maxWait, MaxWaiters: c.maxWaiters,
	}
	if node != nil { // never a nil *cluster.Node in the interface
		hcfg.Cluster = node
		hcfg.Ready = node.Ready // ready while this node's member sees a leader
	}
	srv, err := fencehttp.NewServer(hcfg)
	if err != nil {
		closeStore()
		if ln != nil {
			ln.Close()
		}
		return err
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", c.listen); err != nil {
			closeStore()
			return fmt.Errorf("serve: %w", err)
		}
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: c.headerTimeout,
		// ReadTimeout bounds a slow body too. It does not cut a long poll: net/http
		// lifts the read deadline once the body is read (TestServe_LongPollsOutliveHeaderAndReadTimeouts shows
		// it), before the handler waits.
		ReadTimeout:    c.readTimeout,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// No WriteTimeout: long polls and blocking queries legitimately stay open up
		// to --max-wait.
		Protocols: serveProtocols(c.tls != nil),
		TLSConfig: c.tls,
	}
	if len(c.tokens) == 0 && (offLoopback(c.listen) || offLoopback(ln.Addr().String())) {
		log.Warn("listening beyond loopback without auth tokens (--allow-no-auth): anyone who can connect can take, release and revoke locks, read and write every value, and in cluster mode back up the whole store and change its members")
	}
	served := make(chan error, 1)
	go func() {
		if c.tls != nil {
			served <- hs.ServeTLS(ln, "", "") // the certificate is in hs.TLSConfig
			return
		}
		served <- hs.Serve(ln)
	}()
	log.Info("fence serve listening", "url", scheme+"://"+ln.Addr().String(), "store", st.desc, "auth", len(c.tokens) > 0)

	select {
	case err := <-served: // the listener failed
		closeStore()
		return fmt.Errorf("serve: %w", err)
	case <-nodeDone:
		err = errors.New("serve: this node's cluster member stopped (removed from the cluster, or failed; see the log)")
		log.Error(err.Error())
	case merr := <-nodeErr:
		err = fmt.Errorf("serve: this node's cluster member failed: %w", merr)
		log.Error(err.Error())
	case <-ctx.Done():
	}
	stopErr := err
	log.Info("shutting down: finishing requests in flight", "timeout", c.shutdownTimeout)
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err = hs.Shutdown(sctx); err != nil {
		log.Warn("requests still in flight at the shutdown timeout were cut", "err", err)
		_ = hs.Close()
	}
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		log.Warn("serve ended", "err", serr)
	}
	if err := st.close(); err != nil {
		return errors.Join(stopErr, fmt.Errorf("serve: closing the store: %w", err))
	}
	log.Info("stopped")
	return stopErr
}

// serveProtocols are the protocols fence serve speaks: HTTP/1.1 and HTTP/2,
// negotiated by ALPN over TLS, and without TLS HTTP/2 with prior knowledge
// (h2c) beside HTTP/1.1.
func serveProtocols(tls bool) *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if tls {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return p
}

// maxHeaderBytes bounds a request's headers; beyond it the server answers 431.
const maxHeaderBytes = 64 << 10
