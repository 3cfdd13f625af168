package zookeeper

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A lock's directory is l.dir(name); its nodes are named "n-<tag>-<sequence>", where
// the tag is ownerTag of the lease id's secret and the lease id is
// "<secret>-<sequence>". A node's data is "h <ttl ms>" for a holder (or a node that
// may become one at once) and "w" for a waiter, each followed by " <owner>" if the
// acquire named one (fence.WithOwner). Data without an owner is byte for byte what
// versions before owners wrote, and decodes as owner "".

// dir returns the lock directory of name.
func (l *Locker) dir(name string) string { return l.root + "/" + encodeName(name) }

// nodePath returns the node of leaseID under name's directory, or ok false if the lease
// id is not of this package's form (then no lease of it can exist).
func (l *Locker) nodePath(name, leaseID string) (string, bool) {
	secret, seq, ok := strings.Cut(leaseID, "-")
	if !ok || len(secret) != 32 || len(seq) < 10 {
		return "", false
	}
	if _, err := hex.DecodeString(secret); err != nil {
		return "", false
	}
	if _, err := strconv.ParseInt(seq, 10, 64); err != nil {
		return "", false
	}
	return l.dir(name) + "/n-" + ownerTag(secret) + "-" + seq, true
}

// ownerTag is the part of a node's name derived from the lease's secret: readers of the
// tree see it, but cannot derive the lease id from it.
func ownerTag(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:8])
}

// waitData returns the data of a waiter's node for owner.
func waitData(owner string) []byte { return withOwner("w", owner) }

// holdData returns the data of a holder's node with TTL ttl and owner.
func holdData(ttl time.Duration, owner string) []byte {
	return withOwner("h "+strconv.FormatInt(ttl.Milliseconds(), 10), owner)
}

func withOwner(head, owner string) []byte {
	if owner == "" {
		return []byte(head) // as before owners: older versions read it in full
	}
	return []byte(head + " " + owner)
}

// nodeData is a lock node's data decoded.
type nodeData struct {
	held  bool          // "h": a holder (TTL set), not a waiter
	ttl   time.Duration // the holder's TTL
	owner string        // "" if none
}

// parseData decodes a lock node's data. Data that is neither a holder's nor a
// waiter's (written by something else) decodes as a waiter without owner: no TTL to
// judge, so only its deletion ends it, as for a waiter.
func parseData(data []byte) nodeData {
	s := string(data)
	if rest, ok := strings.CutPrefix(s, "h "); ok {
		msText, owner, _ := strings.Cut(rest, " ")
		if ms, err := strconv.ParseInt(msText, 10, 64); err == nil && ms > 0 {
			return nodeData{held: true, ttl: time.Duration(ms) * time.Millisecond, owner: owner}
		}
		return nodeData{}
	}
	if owner, ok := strings.CutPrefix(s, "w "); ok {
		return nodeData{owner: owner}
	}
	return nodeData{}
}

// node is a lock node's name parsed: "n-<tag>-<sequence>".
type node struct {
	name    string
	seqText string
	seq     int64
}

func parseNode(name string) (node, bool) {
	i := strings.LastIndexByte(name, '-')
	if !strings.HasPrefix(name, "n-") || i < 2 {
		return node{}, false
	}
	seq, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return node{}, false
	}
	return node{name: name, seqText: name[i+1:], seq: seq}, true
}

// parseNodes returns the lock nodes among kids in sequence order; other names are
// ignored.
func parseNodes(kids []string) []node {
	out := make([]node, 0, len(kids))
	for _, k := range kids {
		if n, ok := parseNode(k); ok {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}
