// Package cluster runs the cluster mode of `fence serve`: each node embeds one
// etcd member (go.etcd.io/etcd/server/v3/embed), so three or five `fence serve`
// processes form a consensus store with no etcd binary beside them. The fence
// server talks to its own member through an in-process client (v3client): no
// etcd client port is opened, so nothing reaches the store around fence's auth.
//
// What a node runs beside its member:
//
//   - Registration: the node publishes its fence API URL under
//     NodesPrefix+NAME with a lease of RegistrationTTL, kept alive while the node
//     runs and published again when it is lost (after a partition) or on a
//     restart. Status reads these keys.
//   - Compaction and quota: etcd compacts its history automatically (periodic
//     mode, AutoCompactionRetention), and its database is capped at QuotaBytes
//     (DefaultQuotaBytes if zero). When the cap is hit etcd raises a NOSPACE
//     alarm and refuses writes; the node's alarm loop then compacts at the
//     current revision, defragments its own member and disarms the alarm, so the
//     cluster takes writes again.
//   - Request bounds: every KV and lease request of Client gets at most
//     RequestTimeout, so a node cut off from the majority answers
//     fence.ErrUnavailable in bounded time instead of waiting on a quorum; and
//     the requests in flight when a new leader is elected end then, since a
//     proposal sent to a dead leader is never answered.
//
// The package is product code: it never imports testing.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// Defaults of Config, tuned for nodes on one LAN.
const (
	// DefaultHeartbeat is the Raft heartbeat interval.
	DefaultHeartbeat = 50 * time.Millisecond
	// DefaultElectionTimeout is the Raft election timeout: a leader that dies is
	// replaced within about twice it.
	DefaultElectionTimeout = 500 * time.Millisecond
	// DefaultQuotaBytes caps a member's database: etcd's own default, 2 GiB.
	DefaultQuotaBytes = 2 << 30
	// AutoCompactionRetention is how much history a member keeps (etcd's
	// periodic compaction): revisions older than this are compacted away.
	// fence reads only current keys; a watch that starts from a compacted
	// revision is restarted by package etcd.
	AutoCompactionRetention = 5 * time.Minute
	// RegistrationTTL is the lease of a node's registration key: a node that
	// stops, or is cut off from the majority, shows unhealthy within about it.
	RegistrationTTL = 2 * time.Second
	// NodesPrefix is the etcd key prefix of the nodes' registrations (value: the
	// node's API URL).
	NodesPrefix = "fence/cluster/nodes/"
	// apiPrefix keeps each node's last published API URL, without a lease, so
	// that Status can name it while the node is down.
	apiPrefix = "fence/cluster/api/"
	// addedPrefix names members added by AddMember, by member id, until their
	// node starts and registers under its own name.
	addedPrefix = "fence/cluster/added/"
	// alarmCheck is how often a node looks for a NOSPACE alarm.
	alarmCheck = time.Second
)

// TLSFiles are the PEM files of peer TLS: the node's certificate and key, and
// the CA that every peer's certificate must chain to, in both directions.
type TLSFiles struct{ Cert, Key, CA string }

// Config is what a node needs to start.
type Config struct {
	// Name is this node's name: a key of Peers.
	Name string
	// Peers maps every node's name to its peer address, HOST:PORT. A node
	// listens on its own entry's address: on that IP, or on every interface when
	// HOST is a name (which it advertises to the others).
	Peers map[string]string
	// Dir holds the member's data (DATA/cluster); created with mode 0700.
	Dir string
	// PeerTLS, if any file is set, makes peer traffic TLS with client
	// certificates verified: all three files are then required.
	PeerTLS TLSFiles
	// Heartbeat and ElectionTimeout are the Raft timing; zero means the
	// defaults. ElectionTimeout must be at least 5 times Heartbeat.
	Heartbeat, ElectionTimeout time.Duration
	// QuotaBytes caps the member's database (etcd's quota-backend-bytes); zero
	// means DefaultQuotaBytes.
	QuotaBytes int64
	// RequestTimeout bounds each KV and lease request of Client; zero means 5
	// times ElectionTimeout (2.5 s by default).
	RequestTimeout time.Duration
	// AllowPlainPeers lets peer traffic without PeerTLS go beyond loopback (a
	// peer address for which PeerOffLoopback is true): only on a network that
	// nobody else reaches. Without it such a Config is refused: anyone who
	// reaches a plain peer port can read the replicated store and send the
	// member Raft messages (docs/cluster.md).
	AllowPlainPeers bool
	// Join starts a node that AddMember added to a running cluster (initial
	// cluster state "existing"). A restart on existing data ignores it: etcd
	// rejoins from its write-ahead log either way.
	Join bool
	// APIURL is this node's fence API URL, published for Status.
	APIURL string
	// LogOutput receives etcd's own logs (errors only); nil means stderr.
	LogOutput string
}

// Node is a running cluster node: an embedded etcd member, its in-process
// client, and the node's background loops. Its methods are safe for
// concurrent use.
type Node struct {
	cfg      Config
	etcd     *embed.Etcd
	cli      *clientv3.Client // the in-process client, with request timeouts
	peerURLs map[string]string

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closed    atomic.Bool // set by Close: the member's server must not be called after it
	closeOnce sync.Once
	closeErr  error

	mu    sync.Mutex
	lease clientv3.LeaseID // the registration's lease, under mu
}

// Start validates cfg, starts the node's etcd member and waits until the member
// has joined its cluster (which needs a majority of the members running), then
// starts the node's loops. It returns an error matching fence.ErrInvalid for a
// bad Config, fence.ErrUnavailable (with ctx's error) if ctx ends before the
// member is ready, and etcd's error, wrapped, if the member cannot start.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	ecfg, peerURLs, err := cfg.embed()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data directory: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data directory: %w", err)
	}
	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: node %s: starting its etcd member: %w", cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("cluster: node %s: etcd member: %w", cfg.Name, err)
	case <-e.Server.StopNotify():
		e.Close()
		return nil, fmt.Errorf("cluster: node %s: etcd member stopped while starting (removed from the cluster?)", cfg.Name)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("cluster: node %s: waiting for a majority of %d members: %w: %w",
			cfg.Name, len(cfg.Peers), fence.ErrUnavailable, ctx.Err())
	}
	n := &Node{cfg: cfg, etcd: e, peerURLs: peerURLs}
	b := newBound(cfg.requestTimeout(), func() bool { return e.Server.Leader() != 0 })
	n.cli = withTimeouts(v3client.New(e.Server), b)
	lctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(3)
	go n.register(lctx)
	go n.alarms(lctx)
	go n.leaderChanges(lctx, b)
	return n, nil
}

// Client returns the node's in-process etcd client. Every KV and lease request
// on it is bounded by Config.RequestTimeout. The Node owns it: Close closes it.
func (n *Node) Client() *clientv3.Client { return n.cli }

// Done returns a channel closed when the node's member has stopped on its own:
// removed from the cluster, or failed.
func (n *Node) Done() <-chan struct{} { return n.etcd.Server.StopNotify() }

// Err returns the channel on which the member reports an error that stops it
// serving its peers (its peer listener failed). The node is then of no use
// to the cluster: its owner should close it.
func (n *Node) Err() <-chan error { return n.etcd.Err() }

// Close revokes the node's registration (so Status shows it unhealthy at once),
// stops its loops, hands the leadership over if its member leads (see
// handOver), and stops its client and its member. The member's data stays in Dir,
// for a restart. It returns the client's close error, if any; calling it again
// returns the same.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		n.mu.Lock()
		id := n.lease
		n.mu.Unlock()
		if id != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = n.cli.Revoke(ctx, id)
			cancel()
		}
		n.cancel()
		n.wg.Wait()
		n.handOver()
		if err := n.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			n.closeErr = fmt.Errorf("cluster: close: %w", err)
		}
		// Stopped here, the member skips etcd's own transfer on shutdown, which
		// waits up to 5 s plus two election timeouts when no peer can take over.
		n.etcd.Server.HardStop()
		n.etcd.Close()
	})
	return n.closeErr
}

// handOver moves the leadership, if this node's member has it, to another voting
// member whose node is registered (by this member's own view: no quorum is
// needed to look), within two election timeouts. A node stopped on its own (a
// rolling restart) then costs the cluster no election; when every node stops at
// once nobody can take over, and the member stops at that bound rather than
// etcd's own (5 s plus two election timeouts).
func (n *Node) handOver() {
	s := n.etcd.Server
	if s.Leader() != s.MemberID() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.electionTimeout())
	defer cancel()
	resp, err := n.cli.Get(ctx, NodesPrefix, clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		return
	}
	registered := map[string]bool{}
	for _, kv := range resp.Kvs {
		registered[strings.TrimPrefix(string(kv.Key), NodesPrefix)] = true
	}
	for _, m := range s.Cluster().Members() {
		if m.ID == s.MemberID() || m.IsLearner || !registered[m.Name] {
			continue
		}
		if s.MoveLeader(ctx, s.Lead(), uint64(m.ID)) == nil || ctx.Err() != nil {
			return
		}
	}
}

// Validate returns an error matching fence.ErrInvalid (a *fence.InvalidError
// naming the field) if Start would refuse c, without opening anything.
func (c Config) Validate() error {
	_, _, err := c.embed()
	return err
}

// embed returns the embed configuration of c and every node's peer URL by name,
// or an error matching fence.ErrInvalid.
func (c Config) embed() (*embed.Config, map[string]string, error) {
	bad := func(field, value, reason string) error {
		return fmt.Errorf("cluster: %w", &fence.InvalidError{Field: field, Value: value, Reason: reason})
	}
	if c.Name == "" {
		return nil, nil, bad("node", "", "a node name is required")
	}
	if err := checkName(c.Name); err != nil {
		return nil, nil, bad("node", c.Name, err.Error())
	}
	if _, ok := c.Peers[c.Name]; !ok {
		return nil, nil, bad("peers", c.Name, "the node is not one of the peers")
	}
	if c.Dir == "" {
		return nil, nil, bad("dir", "", "a data directory is required")
	}
	tlsOn := c.PeerTLS != (TLSFiles{})
	if tlsOn && (c.PeerTLS.Cert == "" || c.PeerTLS.Key == "" || c.PeerTLS.CA == "") {
		return nil, nil, bad("peer-tls", "", "peer TLS needs a certificate, its key and a CA, all three")
	}
	hb, el := c.heartbeat(), c.electionTimeout()
	if hb < time.Millisecond || hb%time.Millisecond != 0 {
		return nil, nil, bad("heartbeat", hb.String(), "want a whole number of milliseconds, at least 1ms")
	}
	if el%time.Millisecond != 0 || el < 5*hb {
		return nil, nil, bad("election-timeout", el.String(), fmt.Sprintf("want at least 5 times the heartbeat (%v), in whole milliseconds", 5*hb))
	}
	if el > 50*time.Second {
		return nil, nil, bad("election-timeout", el.String(), "want at most 50s")
	}
	if c.QuotaBytes < 0 {
		return nil, nil, bad("quota", strconv.FormatInt(c.QuotaBytes, 10), "must not be negative")
	}
	if c.RequestTimeout < 0 {
		return nil, nil, bad("request-timeout", c.RequestTimeout.String(), "must not be negative")
	}
	scheme := "http"
	if tlsOn {
		scheme = "https"
	}
	peerURLs := map[string]string{}
	var initial []string
	for _, name := range sortedKeys(c.Peers) {
		if err := checkName(name); err != nil {
			return nil, nil, bad("peers", name, err.Error())
		}
		u, err := PeerURL(scheme, c.Peers[name])
		if err != nil {
			return nil, nil, bad("peers", name+"="+c.Peers[name], err.Error())
		}
		if !tlsOn && !c.AllowPlainPeers && PeerOffLoopback(c.Peers[name]) {
			return nil, nil, bad("peers", name+"="+c.Peers[name], errPlainPeer)
		}
		peerURLs[name] = u
		initial = append(initial, name+"="+u)
	}
	host, port, _ := net.SplitHostPort(c.Peers[c.Name])
	listenHost := "0.0.0.0" // a name: every interface, advertising the name
	if ip := net.ParseIP(host); ip != nil {
		listenHost = host
	}
	listen := url.URL{Scheme: scheme, Host: net.JoinHostPort(listenHost, port)}
	advertise, _ := url.Parse(peerURLs[c.Name])

	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = filepath.Join(c.Dir, "etcd")
	cfg.ListenPeerUrls = []url.URL{listen}
	cfg.AdvertisePeerUrls = []url.URL{*advertise}
	// No client listener at all: the node's fence server uses v3client.
	cfg.ListenClientUrls = nil
	cfg.ListenClientHttpUrls = nil
	cfg.AdvertiseClientUrls = nil
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.InitialClusterToken = DefaultClusterToken
	// "new" on a first start; etcd ignores the state when the data directory
	// already has a write-ahead log, so a restart with the same flags rejoins.
	cfg.ClusterState = embed.ClusterStateFlagNew
	if c.Join {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.TickMs = uint(hb / time.Millisecond)
	cfg.ElectionMs = uint(el / time.Millisecond)
	cfg.QuotaBackendBytes = c.QuotaBytes
	if cfg.QuotaBackendBytes == 0 {
		cfg.QuotaBackendBytes = DefaultQuotaBytes
	}
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = AutoCompactionRetention.String()
	if tlsOn {
		cfg.PeerTLSInfo.CertFile = c.PeerTLS.Cert
		cfg.PeerTLSInfo.KeyFile = c.PeerTLS.Key
		cfg.PeerTLSInfo.TrustedCAFile = c.PeerTLS.CA
		cfg.PeerTLSInfo.ClientCertAuth = true
	}
	cfg.LogLevel = "error"
	out := c.LogOutput
	if out == "" {
		out = "stderr"
	}
	cfg.LogOutputs = []string{out}
	return cfg, peerURLs, nil
}

func (c Config) heartbeat() time.Duration {
	if c.Heartbeat == 0 {
		return DefaultHeartbeat
	}
	return c.Heartbeat
}

func (c Config) electionTimeout() time.Duration {
	if c.ElectionTimeout == 0 {
		return DefaultElectionTimeout
	}
	return c.ElectionTimeout
}

func (c Config) requestTimeout() time.Duration {
	if c.RequestTimeout == 0 {
		return 5 * c.electionTimeout()
	}
	return c.RequestTimeout
}

// checkName returns an error for a node name that cannot stand in --peers
// (NAME=HOST:PORT,...) or in an etcd key.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty node name")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("node name %q: want letters, digits, '-', '_' or '.'", name)
		}
	}
	return nil
}

// errPlainPeer says why a peer address off loopback without peer TLS is refused.
const errPlainPeer = "off loopback, and without peer TLS anyone who reaches a peer port can read the replicated store and send Raft messages: set peer TLS, or allow plain peers if the network is private"

// PeerOffLoopback reports whether the peer traffic of a node at addr
// (HOST:PORT, an entry of Config.Peers) may leave this machine, decided from
// the text alone, without DNS. Any host name counts, localhost included: a
// node listens on every interface for a name (see Config.Peers); so does any
// address outside 127.0.0.0/8 and ::1 (a zone or an IPv4-mapped form judged as
// its address), and an addr it cannot read.
func PeerOffLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return true
	}
	return !ip.Unmap().IsLoopback()
}

// PeerURL returns the peer URL of addr (HOST:PORT) with scheme ("http" or
// "https"), or an error saying what is wrong with addr.
func PeerURL(scheme, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsAny(host, " \t/,=") {
		return "", fmt.Errorf("peer address %q: want HOST:PORT", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("peer address %q: port: want a number from 1 to 65535", addr)
	}
	return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}).String(), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// register publishes the node's API URL under NodesPrefix+NAME with a lease it
// keeps alive, and publishes it again whenever the lease is lost (a partition
// longer than RegistrationTTL), until ctx ends.
func (n *Node) register(ctx context.Context) {
	defer n.wg.Done()
	retry := 100 * time.Millisecond
	for ctx.Err() == nil {
		ch, err := n.publish(ctx)
		if err == nil {
			retry = 100 * time.Millisecond
			for range ch { // drain keepalive answers until the lease is lost or ctx ends
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
		retry = min(2*retry, RegistrationTTL)
	}
}

// publish grants a registration lease, puts the node's key on it and starts its
// keepalive, returning the keepalive's channel.
func (n *Node) publish(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	g, err := n.cli.Grant(ctx, int64(RegistrationTTL/time.Second))
	if err != nil {
		return nil, err
	}
	if _, err := n.cli.Txn(ctx).Then(
		clientv3.OpPut(NodesPrefix+n.cfg.Name, n.cfg.APIURL, clientv3.WithLease(g.ID)),
		clientv3.OpPut(apiPrefix+n.cfg.Name, n.cfg.APIURL),
	).Commit(); err != nil {
		return nil, err
	}
	ch, err := n.cli.KeepAlive(ctx, g.ID)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.lease = g.ID
	n.mu.Unlock()
	return ch, nil
}

// leaderChanges ends the requests in flight whenever a new leader is elected
// (see bound), until ctx ends.
func (n *Node) leaderChanges(ctx context.Context, b *bound) {
	defer n.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.etcd.Server.LeaderChangedNotify():
			b.leaderChanged()
		}
	}
}

// alarms handles the NOSPACE alarm until ctx ends: see Package cluster.
func (n *Node) alarms(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(alarmCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.clearNoSpace(ctx); err != nil && ctx.Err() == nil {
			n.etcd.Server.Logger().Warn("fence cluster: handling the NOSPACE alarm: " + err.Error())
		}
	}
}

// clearNoSpace, if a NOSPACE alarm is raised, compacts the store at its current
// revision, defragments this node's member (each node does its own) and
// disarms every NOSPACE alarm. A member still over its quota raises it again on
// its next write, and the next round starts over.
func (n *Node) clearNoSpace(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := n.cli.AlarmList(ctx)
	if err != nil {
		return fmt.Errorf("alarm list: %w", err)
	}
	var nospace []*etcdserverpb.AlarmMember
	for _, a := range list.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			nospace = append(nospace, a)
		}
	}
	if len(nospace) == 0 {
		return nil
	}
	// Read the current revision; a read is allowed under NOSPACE.
	r, err := n.cli.Get(ctx, NodesPrefix, clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("revision: %w", err)
	}
	if _, err := n.cli.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical()); err != nil &&
		!errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("compact at %d: %w", r.Header.Revision, err)
	}
	// The member's own Defragment: v3client's maintenance server has no health
	// notifier, and its Defragment would dereference it.
	if err := n.etcd.Server.Defragment(); err != nil {
		return fmt.Errorf("defragment: %w", err)
	}
	for _, a := range nospace {
		if _, err := n.cli.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			return fmt.Errorf("disarm: %w", err)
		}
	}
	return nil
}

// Status returns every member of the cluster as this node sees it: its name,
// peer URL, whether it is the leader this node follows, whether it is healthy,
// and the API URL its node last published. A member is healthy when its node's registration
// key (NodesPrefix+NAME, on a lease of RegistrationTTL that the node renews
// through the leader) is present in a linearizable read: its node runs and
// reaches the majority, as of at most RegistrationTTL (plus a leader change's
// lease extension) ago. When this node cannot make a linearizable read (it is
// cut off from the majority), every member is reported unhealthy and none as
// leader: the node knows nothing current. It returns an error matching
// fence.ErrUnavailable if even this node's member list cannot be read, and
// fence.ErrClosed after Close (as AddMember, RemoveMember and Snapshot do).
func (n *Node) Status(ctx context.Context) ([]fencehttp.ClusterMember, error) {
	if err := n.check("status"); err != nil {
		return nil, err
	}
	ml, err := n.cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, fmt.Errorf("cluster: status: %w", unavailable(err))
	}
	rctx, cancel := context.WithTimeout(ctx, n.cfg.requestTimeout())
	defer cancel()
	nodes, nerr := n.cli.Get(rctx, "fence/cluster/", clientv3.WithPrefix())
	registered := map[string]bool{}
	api := map[string]string{}
	added := map[string]string{}
	if nerr == nil {
		for _, kv := range nodes.Kvs {
			k := string(kv.Key)
			if name, ok := strings.CutPrefix(k, NodesPrefix); ok {
				registered[name] = true
			} else if name, ok := strings.CutPrefix(k, apiPrefix); ok {
				api[name] = string(kv.Value)
			} else if id, ok := strings.CutPrefix(k, addedPrefix); ok {
				added[id] = string(kv.Value)
			}
		}
	}
	leader := uint64(n.etcd.Server.Leader())
	out := make([]fencehttp.ClusterMember, 0, len(ml.Members))
	for _, m := range ml.Members {
		name := m.Name
		if name == "" {
			name = added[strconv.FormatUint(m.ID, 16)]
		}
		cm := fencehttp.ClusterMember{Name: name, API: api[m.Name], Leader: nerr == nil && m.ID == leader,
			Healthy: nerr == nil && m.Name != "" && registered[m.Name]}
		if len(m.PeerURLs) > 0 {
			cm.Peer = m.PeerURLs[0]
		}
		out = append(out, cm)
	}
	slices.SortFunc(out, func(a, b fencehttp.ClusterMember) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// AddMember adds a member named name with peer address peer (HOST:PORT, same
// scheme as this node's peers) to the cluster. Its node is then started with
// the cluster's --peers plus its own entry and --join. It returns an error
// matching fence.ErrInvalid for a bad name or address, one a member already
// has, or an address off loopback (PeerOffLoopback) on a node whose peers speak
// plain HTTP without Config.AllowPlainPeers; and fence.ErrUnavailable if the
// cluster cannot take the change (no
// quorum, or etcd's check that the change leaves a quorum of started members).
func (n *Node) AddMember(ctx context.Context, name, peer string) error {
	if err := n.check("add"); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return fmt.Errorf("cluster: add: %w", &fence.InvalidError{Field: "name", Value: name, Reason: err.Error()})
	}
	scheme := "http"
	if n.cfg.PeerTLS != (TLSFiles{}) {
		scheme = "https"
	}
	u, err := PeerURL(scheme, peer)
	if err != nil {
		return fmt.Errorf("cluster: add: %w", &fence.InvalidError{Field: "peer", Value: peer, Reason: err.Error()})
	}
	if scheme == "http" && !n.cfg.AllowPlainPeers && PeerOffLoopback(peer) {
		// This node's peer traffic would leave loopback in the clear: the
		// cluster was started with none off it, and no node may change that.
		return fmt.Errorf("cluster: add: %w", &fence.InvalidError{Field: "peer", Value: peer,
			Reason: "off loopback, and this node's peers speak plain HTTP (no peer TLS, no allowance for plain peers): its peer traffic would leave the machine unencrypted"})
	}
	members, err := n.Status(ctx)
	if err != nil {
		return err
	}
	for _, m := range members {
		if m.Name == name {
			return fmt.Errorf("cluster: add: %w", &fence.InvalidError{Field: "name", Value: name, Reason: "already a member"})
		}
		if m.Peer == u {
			return fmt.Errorf("cluster: add: %w", &fence.InvalidError{Field: "peer", Value: peer, Reason: "already the peer address of member " + m.Name})
		}
	}
	resp, err := n.cli.MemberAdd(ctx, []string{u})
	if err != nil {
		return fmt.Errorf("cluster: add %s: %w", name, unavailable(err))
	}
	if _, err := n.cli.Put(ctx, addedPrefix+strconv.FormatUint(resp.Member.ID, 16), name); err != nil {
		return fmt.Errorf("cluster: add %s: added, but its name is not recorded: %w", name, unavailable(err))
	}
	return nil
}

// RemoveMember removes the member named name from the cluster (its node's
// member stops). It returns an error matching fence.ErrNotFound if no member
// has that name, and fence.ErrUnavailable if the cluster cannot take the change.
func (n *Node) RemoveMember(ctx context.Context, name string) error {
	if err := n.check("remove"); err != nil {
		return err
	}
	ml, err := n.cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("cluster: remove %s: %w", name, unavailable(err))
	}
	g, err := n.cli.Get(ctx, addedPrefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("cluster: remove %s: %w", name, unavailable(err))
	}
	added := map[string]string{}
	for _, kv := range g.Kvs {
		added[strings.TrimPrefix(string(kv.Key), addedPrefix)] = string(kv.Value)
	}
	for _, m := range ml.Members {
		hexID := strconv.FormatUint(m.ID, 16)
		if m.Name != name && (m.Name != "" || added[hexID] != name) {
			continue
		}
		if _, err := n.cli.MemberRemove(ctx, m.ID); err != nil {
			return fmt.Errorf("cluster: remove %s: %w", name, unavailable(err))
		}
		_, _ = n.cli.Delete(ctx, addedPrefix+hexID)
		_, _ = n.cli.Delete(ctx, NodesPrefix+name)
		_, _ = n.cli.Delete(ctx, apiPrefix+name)
		return nil
	}
	return fmt.Errorf("cluster: remove %s: %w: no member of that name", name, fence.ErrNotFound)
}

// Snapshot writes a snapshot of this node's member (etcd's snapshot format, as
// etcdutl restores it) to w. It returns an error matching fence.ErrUnavailable
// if the member cannot send one, or w's error.
func (n *Node) Snapshot(ctx context.Context, w io.Writer) error {
	if err := n.check("snapshot"); err != nil {
		return err
	}
	rc, err := n.cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("cluster: snapshot: %w", unavailable(err))
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("cluster: snapshot: %w", err)
	}
	return nil
}

// Ready returns nil while this node's member sees a leader, which is what lets
// the node grant: a member cut off from the majority loses its leader within
// about two election timeouts (a follower stops hearing heartbeats and
// campaigns; a leader that hears from no majority steps down), so a node
// cut off turns not ready in that time, and ready again once it rejoins a
// majority. It reads the member's own state and never waits, whatever ctx.
// It returns an error saying "the cluster has no leader" otherwise, and one
// matching fence.ErrClosed after Close.
func (n *Node) Ready(ctx context.Context) error {
	if err := n.check("ready"); err != nil {
		return err
	}
	if n.etcd.Server.Leader() == 0 {
		return errNoLeader
	}
	return nil
}

// errNoLeader is Ready's answer when this node's member sees no leader: the
// reason /readyz gives.
var errNoLeader = errors.New("the cluster has no leader (this node reaches no majority of its members)")

// check returns an error matching fence.ErrClosed after Close: the in-process
// client would call into a stopped member.
func (n *Node) check(op string) error {
	if n.closed.Load() {
		return fmt.Errorf("cluster: %s: node %s: %w", op, n.cfg.Name, fence.ErrClosed)
	}
	return nil
}

// unavailable wraps an etcd error as fence.ErrUnavailable, keeping it for
// errors.Is.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
}
