// Package etcdmember starts throwaway etcd members: a single member embedded in this
// process (Start, StartSingle), or a Cluster whose members are processes the caller
// chooses (StartCluster), all on the same embedded configuration (Config, Serve) and
// finding their leader the same way. The chaos harness's clusters (members are the
// fence binary) and the tests' (members are the test binary, see
// internal/servers/servertest/etcdtest) both use it.
//
// It is for programs as well as tests and must never import testing. It is apart from
// internal/servers because it links the etcd server: only what starts etcd imports it.
package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Raft timing of the members: 50 ms ticks and a 500 ms election timeout, so a new
// leader is elected within about a second. etcd derives its minimum lease TTL from
// them (ceil(1.5 * ElectionMs) in whole seconds): MinLeaseTTL.
const (
	TickMs      = 50
	ElectionMs  = 500
	MinLeaseTTL = time.Second
)

// ErrConfig matches (errors.Is) the errors of Config.Embed for a configuration a
// member cannot start with. The package imports nothing of fence's domain, so a
// caller that reports it as fence.ErrInvalid wraps it so.
var ErrConfig = errors.New("bad etcd member configuration")

// Config is what one member needs to start. It is plain data, so a parent can pass
// it to a member process (as flags or JSON).
type Config struct {
	Name           string // member name, e.g. "m0"
	Dir            string // data directory, kept across restarts
	ClientURL      string // e.g. "http://127.0.0.1:PORT"
	PeerURL        string // e.g. "http://127.0.0.1:PORT"
	InitialCluster string // "m0=PEERURL,m1=PEERURL,..." (a single member names itself)
	ClusterToken   string
	Existing       bool // initial cluster state "existing" (a restart) rather than "new"
}

// Embed returns the embed configuration of c: loopback URLs, the timing above, logs
// at error level on stderr. It returns an error matching ErrConfig for a
// missing name, data directory or initial cluster, or a client or peer URL without
// a host.
func (c Config) Embed() (*embed.Config, error) {
	if c.Name == "" || c.Dir == "" || c.InitialCluster == "" {
		return nil, fmt.Errorf("etcdmember: %w: name, data dir and initial cluster are required", ErrConfig)
	}
	curl, err := url.Parse(c.ClientURL)
	if err != nil || curl.Host == "" {
		return nil, fmt.Errorf("etcdmember %s: %w: bad client URL %q", c.Name, ErrConfig, c.ClientURL)
	}
	purl, err := url.Parse(c.PeerURL)
	if err != nil || purl.Host == "" {
		return nil, fmt.Errorf("etcdmember %s: %w: bad peer URL %q", c.Name, ErrConfig, c.PeerURL)
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = c.InitialCluster
	cfg.InitialClusterToken = c.ClusterToken
	cfg.ClusterState = embed.ClusterStateFlagNew
	if c.Existing {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.TickMs = TickMs
	cfg.ElectionMs = ElectionMs
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	return cfg, nil
}

// Serve runs the embedded member of cfg (see Config.Embed) until ctx ends, then closes
// it and returns nil. It returns etcd's error if the member does not start or stops
// serving.
func Serve(ctx context.Context, cfg *embed.Config) error {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
}

// Ping makes one linearizable read through endpoint only, within a second (or until
// ctx ends). It returns nil once the member serves clients, the client's error
// otherwise.
func Ping(ctx context.Context, endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = cli.Get(rctx, "etcdmember-ping")
	return err
}

// Leader asks every member at clientURLs (the live ones) for its status and returns
// the index in clientURLs of the member they all agree is the leader. It makes one
// attempt: it returns an error if a member cannot be asked, if they disagree or
// know no leader, or if the leader is not among clientURLs.
func Leader(ctx context.Context, clientURLs []string) (int, error) {
	if len(clientURLs) == 0 {
		return 0, errors.New("etcdmember: leader: no live members")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: clientURLs, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, fmt.Errorf("etcdmember: leader: %w", err)
	}
	defer cli.Close()
	ids := map[uint64]int{}
	var leader uint64
	for i, ep := range clientURLs {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("etcdmember: status of %s: %w", ep, err)
		}
		ids[st.Header.MemberId] = i
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return 0, errors.New("etcdmember: no agreed leader")
		}
		leader = st.Leader
	}
	i, ok := ids[leader]
	if !ok {
		return 0, errors.New("etcdmember: the leader is not a live member")
	}
	return i, nil
}
