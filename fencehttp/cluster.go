package fencehttp

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/fencelock/fence"
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

// addMemberRequest is the body of POST /v1/cluster/members.
type addMemberRequest struct {
	Name string `json:"name"`
	Peer string `json:"peer"`
}

// handleCluster serves the cluster routes (Config.Cluster is set: the router
// answers them 404 otherwise).
func (s *Server) handleCluster(w http.ResponseWriter, r *http.Request, rt route) {
	c := s.cfg.Cluster
	switch rt.kind {
	case routeCluster:
		s.clusterStatus(w, r, "cluster status", "")
	case routeClusterMembers:
		var req addMemberRequest
		valid := func() error {
			if req.Name == "" {
				return &fence.InvalidError{Field: "name", Reason: "is empty"}
			}
			if req.Peer == "" {
				return &fence.InvalidError{Field: "peer", Reason: "is empty: want HOST:PORT"}
			}
			return nil
		}
		if !s.readBody(w, r, "add member", "", &req, valid) {
			return
		}
		if err := c.AddMember(r.Context(), req.Name, req.Peer); err != nil {
			s.fail(w, r, "add member", req.Name, err)
			return
		}
		s.log.Info("cluster member added", "name", req.Name, "peer", req.Peer)
		s.clusterStatus(w, r, "add member", req.Name)
	case routeClusterMember:
		name, err := url.PathUnescape(rt.esc)
		if err != nil || name == "" {
			s.fail(w, r, "remove member", "", &fence.InvalidError{Field: "name", Value: rt.esc, Reason: "is not a member name"})
			return
		}
		if err := c.RemoveMember(r.Context(), name); err != nil {
			s.fail(w, r, "remove member", name, err)
			return
		}
		s.log.Info("cluster member removed", "name", name)
		s.clusterStatus(w, r, "remove member", name)
	case routeClusterSnapshot:
		s.snapshot(w, r)
	}
}

// clusterStatus answers the members (ClusterStatus), for op on name.
func (s *Server) clusterStatus(w http.ResponseWriter, r *http.Request, op, name string) {
	ms, err := s.cfg.Cluster.Status(r.Context())
	if err != nil {
		s.fail(w, r, op, name, err)
		return
	}
	if ms == nil {
		ms = []ClusterMember{}
	}
	s.ok(w, r, ClusterStatus{Members: ms})
}

// snapshot streams a snapshot of the cluster's store. Headers go out with its
// first bytes, so a snapshot that fails before any is answered with its error;
// one that fails after is cut off (the client sees a broken body, never a
// short snapshot passed for whole).
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	sw := &snapshotWriter{w: w}
	if r.Method == http.MethodHead { // the headers only: no snapshot is taken
		sw.start()
		s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
		return
	}
	err := s.cfg.Cluster.Snapshot(r.Context(), sw)
	switch {
	case err != nil && !sw.started:
		s.fail(w, r, "snapshot", "", err)
	case err != nil:
		s.log.Error("snapshot cut off", "bytes", sw.n, "err", err)
		panic(http.ErrAbortHandler)
	default:
		if !sw.started {
			sw.start()
		}
		s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
		s.log.Info("snapshot sent", "bytes", sw.n)
	}
}

// snapshotWriter writes the snapshot's headers before its first bytes.
type snapshotWriter struct {
	w       http.ResponseWriter
	started bool
	n       int64
}

func (sw *snapshotWriter) start() {
	sw.started = true
	h := sw.w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="fence-snapshot.db"`)
	h.Set("Cache-Control", "no-store")
	sw.w.WriteHeader(http.StatusOK)
}

func (sw *snapshotWriter) Write(p []byte) (int, error) {
	if !sw.started {
		sw.start()
	}
	n, err := sw.w.Write(p)
	sw.n += int64(n)
	return n, err
}
