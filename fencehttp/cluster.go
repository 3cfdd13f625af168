package fencehttp

import (
	"context"
	"io"
)

// ClusterMember is one member of a cluster-mode server's cluster, as GET
// /v1/cluster and `fence cluster status -o json` show it.
type ClusterMember struct {
	// Name is the member's node name (its --node); empty for a member added but
	// never started under a name the cluster knows.
	Name string `json:"name"`
	// Peer is the member's peer URL (its --peers entry, with scheme).
	Peer string `json:"peer"`
	// Leader is true for the member the answering node knows as the leader.
	Leader bool `json:"leader"`
	// Healthy is the answering node's verdict on the member: see the cluster
	// implementation's definition (internal/cluster: Node.Status).
	Healthy bool `json:"healthy"`
	// API is the fence HTTP API URL the member's node published, if any.
	API string `json:"api"`
}

// ClusterStatus is the body of GET /v1/cluster.
type ClusterStatus struct {
	Members []ClusterMember `json:"members"`
}

// Cluster is what a server in cluster mode offers on /v1/cluster (Config.Cluster).
// Its methods return errors matching fence.ErrInvalid for bad input,
// fence.ErrNotFound for an unknown member, and fence.ErrUnavailable when the
// cluster cannot answer (no quorum).
type Cluster interface {
	// Status returns every member of the cluster, as the answering node sees it.
	Status(ctx context.Context) ([]ClusterMember, error)
	// AddMember adds a member named name whose peer address is peer (HOST:PORT)
	// to the running cluster; its node must then be started with --join.
	AddMember(ctx context.Context, name, peer string) error
	// RemoveMember removes the member named name from the cluster.
	RemoveMember(ctx context.Context, name string) error
	// Snapshot writes a snapshot of the cluster's store (etcd's format) to w.
	Snapshot(ctx context.Context, w io.Writer) error
}
