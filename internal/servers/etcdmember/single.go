package etcdmember

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencelock/fence/internal/servers"
)

// StartSingle starts a single member named name embedded in this process, with its
// data in dir/name, on free ports of 127.0.0.1, with the configuration of
// Config.Embed and its logs discarded; adjust, if not nil, changes that
// configuration before the start (etcd's default timing, say). It waits until the
// member serves clients and returns it with its client URL; the caller closes it
// (and removes dir). It returns an error if no free port could be bound or the
// member did not become ready within servers.StartTimeout.
func StartSingle(dir, name, token string, adjust func(*embed.Config)) (*embed.Etcd, string, error) {
	m := Config{Name: name, Dir: filepath.Join(dir, name), ClusterToken: token}
	var e *embed.Etcd
	err := servers.StartOnFreePort(func(port int) { m.ClientURL = fmt.Sprintf("http://127.0.0.1:%d", port) }, func() error {
		pport, err := servers.FreePort()
		if err != nil {
			return err
		}
		m.PeerURL = fmt.Sprintf("http://127.0.0.1:%d", pport)
		m.InitialCluster = m.Name + "=" + m.PeerURL
		os.RemoveAll(m.Dir) // what a start that failed on a port clash left
		cfg, err := m.Embed()
		if err != nil {
			return err
		}
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		if adjust != nil {
			adjust(cfg)
		}
		e, err = startEmbed(cfg)
		return err
	}, nil)
	if err != nil {
		return nil, "", err
	}
	return e, m.ClientURL, nil
}

// startEmbed starts an embedded member and waits until it is ready.
func startEmbed(cfg *embed.Config) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(servers.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("not ready after %v", servers.StartTimeout)
	}
}

// DefaultMinLeaseTTL is the shortest lease TTL of an etcd member with etcd's default
// timing (100 ms ticks, 1 s election timeout), as StartDefaultTiming starts: 1.5
// election timeouts, rounded up to whole seconds.
const DefaultMinLeaseTTL = 2 * time.Second

// Server is a throwaway single-member etcd embedded in this process, listening on
// free ports of 127.0.0.1, with its data in a fresh temporary directory.
type Server struct {
	Endpoints []string // client URLs, e.g. "http://127.0.0.1:PORT"
	Dir       string   // removed by Close

	once sync.Once
	e    *embed.Etcd
}

// Start starts a single-member embedded etcd with the timing of Config.Embed and
// waits until it serves clients. Its logs are discarded. The caller must Close it.
// It returns an error if no free port could be bound or the server did not become
// ready within servers.StartTimeout.
func Start() (*Server, error) { return start(false) }

// StartDefaultTiming is Start with etcd's default Raft timing instead of the faster
// one of Config.Embed, for measuring what users of an etcd configured by default get
// (its minimum lease TTL is DefaultMinLeaseTTL).
func StartDefaultTiming() (*Server, error) { return start(true) }

func start(defaultTiming bool) (*Server, error) {
	dir, err := servers.MakeDir("etcd")
	if err != nil {
		return nil, err
	}
	var adjust func(*embed.Config)
	if defaultTiming {
		adjust = func(cfg *embed.Config) {
			def := embed.NewConfig()
			cfg.TickMs, cfg.ElectionMs = def.TickMs, def.ElectionMs
		}
	}
	e, url, err := StartSingle(dir, "single", "etcd-single", adjust)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("etcdmember: %w", err)
	}
	return &Server{Endpoints: []string{url}, Dir: dir, e: e}, nil
}

// Close stops the server and removes its directory. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		s.e.Close()
		os.RemoveAll(s.Dir)
	})
}
