package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/internal/cluster"
)

// clusterFlags are the flags of `fence serve` in cluster mode (--node NAME
// --peers NAME=HOST:PORT,...).
type clusterFlags struct {
	node, peers, peerCert, peerKey, peerCA string
	heartbeat, election                    time.Duration
	join, allowPlainPeers                  bool
}

func (f *clusterFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.node, "node", "", "cluster mode: this node's name, one of --peers")
	fs.StringVar(&f.peers, "peers", "", "cluster mode: every node as NAME=HOST:PORT, comma-separated; this node's peer traffic listens on its own entry (on the IP, or every interface for a host name)")
	fs.StringVar(&f.peerCert, "peer-cert", "", "cluster mode: PEM certificate of this node for peer TLS (with --peer-key and --peer-ca)")
	fs.StringVar(&f.peerKey, "peer-key", "", "cluster mode: PEM private key of --peer-cert")
	fs.StringVar(&f.peerCA, "peer-ca", "", "cluster mode: PEM CA that every peer's certificate must chain to (both directions verified)")
	fs.DurationVar(&f.heartbeat, "heartbeat", cluster.DefaultHeartbeat, "cluster mode: Raft heartbeat interval")
	fs.DurationVar(&f.election, "election-timeout", cluster.DefaultElectionTimeout, "cluster mode: Raft election timeout, at least 5 times --heartbeat")
	fs.BoolVar(&f.allowPlainPeers, "allow-plain-peers", false, "cluster mode: the network between the nodes is private, so peer traffic may leave loopback without peer TLS (plain HTTP: anyone who reaches a peer port can read the replicated store); logged as a warning at each start")
	fs.BoolVar(&f.join, "join", false, "cluster mode: this node was just added to a running cluster (fence cluster add); not needed on a restart")
}

// config checks the cluster flags against the others and returns the node's
// configuration, or nil outside cluster mode. Every mistake is a usage error.
func (f *clusterFlags) config(fs *pflag.FlagSet, store, data string, externalLocks bool) (*cluster.Config, error) {
	if f.node == "" {
		for _, name := range []string{"peers", "peer-cert", "peer-key", "peer-ca", "heartbeat", "election-timeout", "join", "allow-plain-peers"} {
			if fs.Changed(name) {
				return nil, usagef("--%s is for cluster mode: it needs --node NAME (and --peers)", name)
			}
		}
		return nil, nil
	}
	if f.peers == "" {
		return nil, usagef("--node needs --peers NAME=HOST:PORT,... (every node of the cluster, this one included)")
	}
	if store != "" {
		return nil, usagef("--node and --store do not go together: a cluster node keeps its store in DATA/cluster")
	}
	if externalLocks {
		return nil, usagef("--node and --external-locks do not go together: the cluster issues its own tokens")
	}
	peers, err := parsePeers(f.peers)
	if err != nil {
		return nil, err
	}
	if _, ok := peers[f.node]; !ok {
		return nil, usagef("--node %q is not in --peers (%s)", f.node, strings.Join(sortedNames(peers), ", "))
	}
	tlsFiles := cluster.TLSFiles{Cert: f.peerCert, Key: f.peerKey, CA: f.peerCA}
	if tlsFiles != (cluster.TLSFiles{}) {
		if f.peerCert == "" || f.peerKey == "" || f.peerCA == "" {
			return nil, usagef("--peer-cert, --peer-key and --peer-ca go together")
		}
		for _, p := range []string{f.peerCert, f.peerKey, f.peerCA} {
			if _, err := os.Stat(p); err != nil {
				return nil, usagef("peer TLS: %v", err)
			}
		}
	}
	if tlsFiles == (cluster.TLSFiles{}) && !f.allowPlainPeers {
		if name, addr, open := plainPeerOffLoopback(peers); open {
			return nil, usagef("--peers %s=%s is off loopback, and plain peer traffic lets anyone who reaches a peer port read the replicated store and send Raft messages: give --peer-cert, --peer-key and --peer-ca, or --allow-plain-peers if the network is private", name, addr)
		}
	}
	cfg := &cluster.Config{Name: f.node, Peers: peers, Dir: filepath.Join(data, "cluster"), PeerTLS: tlsFiles,
		Heartbeat: f.heartbeat, ElectionTimeout: f.election, Join: f.join, AllowPlainPeers: f.allowPlainPeers}
	if err := cfg.Validate(); err != nil {
		var inv *fence.InvalidError
		if errors.As(err, &inv) {
			return nil, usagef("--%s %q: %s", inv.Field, inv.Value, inv.Reason)
		}
		return nil, usageError{err}
	}
	return cfg, nil
}

// plainPeerOffLoopback returns the first peer, by name, whose address is off
// loopback (cluster.PeerOffLoopback), and whether there is one: without peer
// TLS, every node's traffic to it would leave the machine in the clear.
func plainPeerOffLoopback(peers map[string]string) (name, addr string, found bool) {
	for _, n := range sortedNames(peers) {
		if cluster.PeerOffLoopback(peers[n]) {
			return n, peers[n], true
		}
	}
	return "", "", false
}

// parsePeers reads --peers: NAME=HOST:PORT,... with distinct names and addresses.
func parsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	addrs := map[string]string{}
	for _, entry := range strings.Split(s, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || name == "" || addr == "" {
			return nil, usagef("--peers %q: entry %q: want NAME=HOST:PORT", s, entry)
		}
		if _, err := cluster.PeerURL("http", addr); err != nil {
			return nil, usagef("--peers: %s: %v", name, err)
		}
		if _, dup := peers[name]; dup {
			return nil, usagef("--peers: node %q is named twice", name)
		}
		if other, dup := addrs[addr]; dup {
			return nil, usagef("--peers: %s and %s have the same address %s", other, name, addr)
		}
		peers[name], addrs[addr] = addr, name
	}
	return peers, nil
}

func sortedNames(m map[string]string) []string {
	names := slices.Collect(maps.Keys(m))
	slices.Sort(names)
	return names
}

// apiURL is the URL a cluster node publishes for its API: the listener's
// address, with the host of the node's --peers entry when it listens on every
// interface (an unspecified address is no use to a client).
func apiURL(scheme, addr, peer string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return scheme + "://" + addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host, _, _ = net.SplitHostPort(peer)
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// openClusterStore starts the node of cfg (waiting, until ctx ends, for a
// majority of the cluster) and returns the store served over its in-process
// client: package etcd's Locker and KV under etcd.DefaultPrefix, as --store
// etcd:// would serve them, with cluster mode's options on: FastExpiry (a
// waiter ends a holder silent for its whole TTL, on the waiter's own clock,
// rather than after etcd's whole-second lease) and FIFO (waiters granted in
// the order of their create revisions, across every node). Every node runs the
// same options, as package etcd requires of Lockers sharing a prefix.
func openClusterStore(ctx context.Context, cfg cluster.Config) (*servedStore, *cluster.Node, error) {
	clock, err := processClock()
	if err != nil {
		return nil, nil, err
	}
	node, err := cluster.Start(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: %w", err)
	}
	s := etcd.NewStore(node.Client(), &etcd.Options{Prefix: etcd.DefaultPrefix, Clock: clock, FastExpiry: true, FIFO: true})
	closeAll := func() error {
		return errors.Join(s.Close(), node.Close())
	}
	return &servedStore{locker: s, kv: s, close: closeAll, desc: "cluster:" + cfg.Name}, node, nil
}
