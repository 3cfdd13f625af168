package zookeeper

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// A lock's directory is l.dir(name); its nodes are named "n-<tag>-<kind><sequence>",
// where the tag is ownerTag of the lease id's secret, <kind> is "" for a lock, "r-"
// for a shared lease and "l<limit>-" for a semaphore permit, and the lease id is
// "<secret>-<kind><sequence>" (a permit's with "-s<slot>" appended). A node's data
// is "h <ttl ms>" for a holder (or a node that may become one at once), "H <ttl ms>
// <slot>" for a semaphore permit that holds its slot, and "w" for a waiter, each
// followed by " <owner>" if the acquire named one (fence.WithOwner). Data without an
// owner is byte for byte what versions before owners wrote, and decodes as owner "".
//
// A permit's slot k is also the ephemeral node "s-<k>" in the directory, whose
// data is the holder's node name: its creation is what takes the slot (it fails if
// another lease has it). It is created in one transaction with the "H" data of its
// holder's node and deleted in one with that node, so the two always come and go
// together; a session's end deletes both.

// dir returns the lock directory of name.
func (l *Locker) dir(name string) string { return l.root + "/" + encodeName(name) }

// nodePath returns the node of leaseID under name's directory and the permit's
// slot (-1 for a lock or a shared lease), or ok false if the lease id is not of
// this package's form (then no lease of it can exist).
func (l *Locker) nodePath(name, leaseID string) (path string, slot int, ok bool) {
	secret, rest, ok := strings.Cut(leaseID, "-")
	if !ok || len(secret) != 32 {
		return "", -1, false
	}
	if _, err := hex.DecodeString(secret); err != nil {
		return "", -1, false
	}
	slot = -1
	if i := strings.LastIndex(rest, "-s"); i >= 0 {
		k, err := strconv.Atoi(rest[i+2:])
		if err != nil || k < 0 || strconv.Itoa(k) != rest[i+2:] {
			return "", -1, false
		}
		rest, slot = rest[:i], k
	}
	n, ok := parseNode("n-" + ownerTag(secret) + "-" + rest)
	if !ok || len(n.seqText) < 10 || n.kind.unknown || (slot >= 0) != (n.kind.limit > 0) || slot >= max(n.kind.limit, 1) {
		return "", -1, false
	}
	return l.dir(name) + "/" + n.name, slot, true
}

// ownerTag is the part of a node's name derived from the lease's secret: readers of the
// tree see it, but cannot derive the lease id from it.
func ownerTag(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:8])
}

// kind is what a node asks for, as its name says: a lock (limit 0, not shared), a
// semaphore permit (limit 2 to fence.MaxLimit) or a shared lease.
type kind struct {
	limit   int
	shared  bool
	unknown bool // a kind this version cannot read: it is treated as a lock
}

// infix is the kind's part of a node name, between the tag and the sequence.
func (k kind) infix() string {
	switch {
	case k.shared:
		return "r-"
	case k.limit > 0:
		return "l" + strconv.Itoa(k.limit) + "-"
	}
	return ""
}

// limitOf is the kind's limit as fence.LimitError counts it: 1 for a lock or a
// shared lease.
func (k kind) limitOf() int { return max(k.limit, 1) }

// parseKind reads the kind part of a node name ("r", "l3"); anything else is a
// kind this version does not know, which it treats as a lock: it waits for it.
func parseKind(s string) kind {
	if s == "r" {
		return kind{shared: true}
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "l")); err == nil && s == "l"+strconv.Itoa(n) && n >= 2 && n <= fence.MaxLimit {
		return kind{limit: n}
	}
	return kind{unknown: true}
}

// waitData returns the data of a waiter's node for owner.
func waitData(owner string) []byte { return withOwner("w", owner) }

// holdData returns the data of a holder's node with TTL ttl and owner.
func holdData(ttl time.Duration, owner string) []byte {
	return withOwner("h "+strconv.FormatInt(ttl.Milliseconds(), 10), owner)
}

// permitData returns the data of a semaphore permit's node that holds slot, with
// TTL ttl and owner.
func permitData(ttl time.Duration, slot int, owner string) []byte {
	return withOwner("H "+strconv.FormatInt(ttl.Milliseconds(), 10)+" "+strconv.Itoa(slot), owner)
}

func withOwner(head, owner string) []byte {
	if owner == "" {
		return []byte(head) // as before owners: older versions read it in full
	}
	return []byte(head + " " + owner)
}

// nodeData is a lock node's data decoded.
type nodeData struct {
	held   bool          // "h" or "H": a holder (TTL set), not a waiter
	ttl    time.Duration // the holder's TTL
	owner  string        // "" if none
	permit bool          // "H": a semaphore permit that holds its slot
	slot   int           // the permit's slot
}

// withTTL returns the data of d's node renewed to ttl: the same owner and slot.
func (d nodeData) withTTL(ttl time.Duration) []byte {
	if d.permit {
		return permitData(ttl, d.slot, d.owner)
	}
	return holdData(ttl, d.owner)
}

// slotOf returns the slot d's node holds, -1 if none.
func (d nodeData) slotOf() int {
	if d.permit {
		return d.slot
	}
	return -1
}

// maxTTLms is the largest TTL in milliseconds that a time.Duration holds: data
// with a larger one (which no version writes) would overflow to a negative TTL,
// a holder that expired at once.
const maxTTLms = math.MaxInt64 / int64(time.Millisecond)

// parseData decodes a lock node's data. Data that is neither a holder's nor a
// waiter's (written by something else) decodes as a waiter without owner: no TTL to
// judge, so only its deletion ends it, as for a waiter.
func parseData(data []byte) nodeData {
	s := string(data)
	if rest, ok := strings.CutPrefix(s, "h "); ok {
		msText, owner, _ := strings.Cut(rest, " ")
		if ms, err := strconv.ParseInt(msText, 10, 64); err == nil && ms > 0 && ms <= maxTTLms {
			return nodeData{held: true, ttl: time.Duration(ms) * time.Millisecond, owner: owner}
		}
		return nodeData{}
	}
	if rest, ok := strings.CutPrefix(s, "H "); ok {
		msText, rest, _ := strings.Cut(rest, " ")
		slotText, owner, _ := strings.Cut(rest, " ")
		ms, err := strconv.ParseInt(msText, 10, 64)
		slot, serr := strconv.Atoi(slotText)
		if err == nil && serr == nil && ms > 0 && ms <= maxTTLms && slot >= 0 && slot < fence.MaxLimit {
			return nodeData{held: true, ttl: time.Duration(ms) * time.Millisecond, owner: owner, permit: true, slot: slot}
		}
		return nodeData{}
	}
	if owner, ok := strings.CutPrefix(s, "w "); ok {
		return nodeData{owner: owner}
	}
	return nodeData{}
}

// node is a lock node's name parsed: "n-<tag>-<kind><sequence>".
type node struct {
	name    string
	rest    string // what follows the tag: the lease id's part after the secret
	seqText string
	seq     int64
	kind    kind
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
	t := strings.IndexByte(name[2:], '-') + 2 // the dash after the tag: i >= 2 is one
	n := node{name: name, rest: name[t+1:], seqText: name[i+1:], seq: seq}
	if t < i {
		n.kind = parseKind(name[t+1 : i])
	}
	return n, true
}

// slotNode returns the name of slot k's node.
func slotNode(k int) string { return "s-" + strconv.Itoa(k) }

// countSlots returns how many slots below limit kids take.
func countSlots(kids []string, limit int) int {
	n := 0
	for _, taken := range parseSlots(kids, limit) {
		if taken {
			n++
		}
	}
	return n
}

// parseSlots returns the slots among kids that are taken (their "s-<k>" node
// exists), as a set of at most limit; other names are ignored.
func parseSlots(kids []string, limit int) []bool {
	used := make([]bool, limit)
	for _, k := range kids {
		if s, ok := strings.CutPrefix(k, "s-"); ok {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < limit {
				used[n] = true
			}
		}
	}
	return used
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
