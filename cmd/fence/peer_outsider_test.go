package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// peerMember is a member as etcd's peer handler answers GET /members.
type peerMember struct {
	ID       uint64   `json:"id"`
	Name     string   `json:"name"`
	PeerURLs []string `json:"peerURLs"`
}

// What an outsider can do against a plain peer port (docs/cluster.md, "Peer
// traffic"), shown on loopback: with no credential at all, GET /members names
// every member with its id and the cluster id, GET /version the versions; with
// those, GET /raft/stream/... as a follower makes the leader stream to the
// outsider the Raft entries meant for that follower: values written through
// fence's API and the lease ids of grants. This is why a node refuses plain
// peers off loopback without --allow-plain-peers.
func TestServeCluster_PlainPeerPort_OutsiderReadsTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := startCluster(t, 3)
	leader := leaderOf(waitMembers(t, c.node("n0").url, healthy(3)))
	api := c.node(leader).url
	peerOf := map[string]string{}
	for _, e := range strings.Split(c.peers, ",") {
		name, addr, _ := strings.Cut(e, "=")
		peerOf[name] = "http://" + addr
	}
	peer := peerOf[leader]
	raw := &http.Client{Timeout: 5 * time.Second}

	// 1. GET /members: every member, its id, peer URLs, and the cluster id.
	resp, err := raw.Get(peer + "/members")
	if err != nil {
		t.Fatal(err)
	}
	var members []peerMember
	err = json.NewDecoder(resp.Body).Decode(&members)
	resp.Body.Close()
	cid := resp.Header.Get("X-Etcd-Cluster-ID")
	if resp.StatusCode != http.StatusOK || err != nil || len(members) != 3 || cid == "" {
		t.Fatalf("GET %s/members: %d, %d members, cluster id %q, %v; want 200, the 3 members and the cluster id", peer, resp.StatusCode, len(members), cid, err)
	}
	ids := map[string]uint64{}
	for _, m := range members {
		ids[m.Name] = m.ID
	}
	t.Logf("GET /members, no credential: cluster id %s, members %+v", cid, members)

	// 2. GET /version.
	resp, err = raw.Get(peer + "/version")
	if err != nil {
		t.Fatal(err)
	}
	var version struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
	}
	err = json.NewDecoder(resp.Body).Decode(&version)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || version.Server == "" {
		t.Fatalf("GET %s/version: %d %+v %v; want 200 and the versions", peer, resp.StatusCode, version, err)
	}
	t.Logf("GET /version, no credential: %+v", version)

	// 3. Streams as a follower: the leader hands the outsider that follower's
	// streams. The live follower dials again and takes them back within about
	// 100 ms (a follower that is down or cut off would not), so the outsider
	// dials again too, while fence's clients go on granting and writing.
	var follower string
	for _, n := range c.names {
		if n != leader {
			follower = n
			break
		}
	}
	secret := make([]byte, 12)
	_, _ = rand.Read(secret)
	marker := "outsider-can-read-" + hex.EncodeToString(secret)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		got      bytes.Buffer
		leases   []string
		attached int
		refused  string
		wg       sync.WaitGroup
	)
	defer wg.Wait()
	defer cancel()
	for _, stream := range []string{"msgapp", "message"} {
		path := fmt.Sprintf("/raft/stream/%s/%s", stream, strconv.FormatUint(ids[follower], 16))
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, peer+path, nil)
				req.Header.Set("X-Etcd-Cluster-ID", cid)
				req.Header.Set("X-Raft-To", strconv.FormatUint(ids[leader], 16))
				req.Header.Set("X-Server-Version", version.Server)
				req.Header.Set("X-Min-Cluster-Version", version.Cluster)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				if resp.StatusCode != http.StatusOK {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					mu.Lock()
					refused = fmt.Sprintf("GET %s: %d %s", path, resp.StatusCode, b)
					mu.Unlock()
					return
				}
				mu.Lock()
				attached++
				mu.Unlock()
				for {
					n, err := resp.Body.Read(buf)
					mu.Lock()
					got.Write(buf[:n])
					mu.Unlock()
					if err != nil {
						break
					}
				}
				resp.Body.Close()
			}
		}()
	}
	// fence's clients at work: a grant and a write of the marker, over and over.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("outsider-%d", i)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/locks/"+name+"/acquire", strings.NewReader(`{"ttl_ms":10000}`))
			resp, err := raw.Do(req)
			if err != nil {
				continue
			}
			var g grant
			err = json.NewDecoder(resp.Body).Decode(&g)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				continue
			}
			mu.Lock()
			leases = append(leases, g.Lease)
			mu.Unlock()
			req, _ = http.NewRequestWithContext(ctx, http.MethodPut, api+"/v1/kv/secret", strings.NewReader(marker))
			req.Header.Set("Fence-Token", strconv.FormatUint(g.Token, 10))
			req.Header.Set("Fence-Lock", name)
			req.Header.Set("Fence-Lease", g.Lease)
			if resp, err := raw.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	found, withLease := false, false
	var n, tries int
	for !(found && withLease) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		found = bytes.Contains(got.Bytes(), []byte(marker))
		withLease = false
		for _, l := range leases {
			withLease = withLease || bytes.Contains(got.Bytes(), []byte(l))
		}
		n, tries = got.Len(), attached
		mu.Unlock()
	}
	cancel()
	mu.Lock()
	if refused != "" {
		t.Fatalf("as follower %s: %s; want 200, the stream", follower, refused)
	}
	mu.Unlock()
	if !found || !withLease {
		t.Fatalf("the leader's streams as follower %s, attached %d times in 20s: %d bytes, the value written in them %v, a grant's lease id %v; want both", follower, tries, n, found, withLease)
	}
	t.Logf("GET /raft/stream as %s, with the cluster and member ids from /members: attached %d times, %d bytes of Raft messages, the value written (%q) and a grant's lease id among them",
		follower, tries, n, marker)
}
