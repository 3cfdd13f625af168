package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// NemesisDisk puts fence serve's data directory on a small file system of its own
// and fills it, then frees it.
const NemesisDisk = "disk"

// diskVolumeSize is the size of the data directory's tmpfs: room for the bbolt
// file and the lease log, which grows to 4 MiB between checkpoints.
const diskVolumeSize = 16 << 20

// diskNemesis mounts a tmpfs of diskVolumeSize as fence serve's data directory
// (it needs root) and, at each fault, fills it with a filler file for 2 to 6 TTLs,
// then removes the filler. While the disk is full fence serve answers 503 to every
// write it cannot make durable (grants, renewals, releases, KV writes); workers
// retry, and none of what it acknowledged may be lost.
type diskNemesis struct {
	vol *servers.Volume
	ttl time.Duration
}

func (*diskNemesis) name() string { return NemesisDisk }

func (n *diskNemesis) setup(_ context.Context, r *run) error {
	vol, err := servers.MountTmpfs(r.srv.data, diskVolumeSize)
	if err != nil {
		return fmt.Errorf("chaos: disk: %w", err)
	}
	r.onClose(func() { _ = vol.Unmount() }) // after fence serve stopped
	n.vol, n.ttl = vol, r.cfg.TTL
	return nil
}

func (n *diskNemesis) inject(_ context.Context, rng *rand.Rand) (*fault, error) {
	if _, err := n.vol.Fill(); err != nil {
		return nil, fmt.Errorf("chaos: disk: %w", err)
	}
	return &fault{kind: "full", hold: 2*n.ttl + time.Duration(rng.Int64N(int64(4*n.ttl))), heal: func() error {
		if err := n.vol.Free(); err != nil {
			return fmt.Errorf("chaos: disk: %w", err)
		}
		return nil
	}}, nil
}
