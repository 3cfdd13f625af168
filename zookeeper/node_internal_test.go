package zookeeper

import (
	"testing"
	"time"
)

func TestNodeData_RoundTripsOwner(t *testing.T) {
	for _, owner := range []string{"", "w", "h 5", " lead and trail ", "worker-7:4242 ünïcødé job --flag"} {
		if got := parseData(holdData(1500*time.Millisecond, owner)); got != (nodeData{held: true, ttl: 1500 * time.Millisecond, owner: owner}) {
			t.Errorf("parseData(holdData(1.5s, %q)) = %+v; want held, 1.5s, that owner", owner, got)
		}
		if got := parseData(waitData(owner)); got != (nodeData{owner: owner}) {
			t.Errorf("parseData(waitData(%q)) = %+v; want a waiter with that owner", owner, got)
		}
	}
}

// Without an owner the data is what versions before owners wrote and read ("h <ms>",
// "w"), and their data decodes as owner "".
func TestNodeData_WithoutOwner_AsBeforeOwners(t *testing.T) {
	if got := string(holdData(time.Minute, "")); got != "h 60000" {
		t.Errorf("holdData(1m, \"\") = %q; want \"h 60000\"", got)
	}
	if got := string(waitData("")); got != "w" {
		t.Errorf("waitData(\"\") = %q; want \"w\"", got)
	}
	if got := parseData([]byte("h 60000")); got != (nodeData{held: true, ttl: time.Minute}) {
		t.Errorf("parseData(\"h 60000\") = %+v; want held, 1m, owner \"\"", got)
	}
	for _, other := range []string{"w", "", "h", "h ", "h x", "h 0", "h -5", "h 5x y", "x 5", "wait"} {
		if got := parseData([]byte(other)); got != (nodeData{}) {
			t.Errorf("parseData(%q) = %+v; want a waiter without owner", other, got)
		}
	}
}

func TestNodeData_Permit_RoundTripsSlotAndOwner(t *testing.T) {
	for _, owner := range []string{"", "a b", "H 5 3"} {
		d := parseData(permitData(2*time.Second, 7, owner))
		if d != (nodeData{held: true, ttl: 2 * time.Second, owner: owner, permit: true, slot: 7}) {
			t.Errorf("parseData(permitData(2s, 7, %q)) = %+v; want held, 2s, slot 7, that owner", owner, d)
		}
		if got := parseData(d.withTTL(time.Second)); got.slot != 7 || !got.permit || got.ttl != time.Second || got.owner != owner {
			t.Errorf("renewed permit data = %+v; want slot 7, 1s, owner %q", got, owner)
		}
	}
	for _, bad := range []string{"H", "H 5", "H 5 x", "H 0 1", "H 5 -1", "H 5 1024"} {
		if got := parseData([]byte(bad)); got != (nodeData{}) {
			t.Errorf("parseData(%q) = %+v; want a waiter without owner", bad, got)
		}
	}
}

// Node names carry the kind between the tag and the sequence; a kind this version
// does not know is read as a lock, which every other acquire waits for.
func TestParseNode_Kinds(t *testing.T) {
	for name, want := range map[string]kind{
		"n-0123abcd-0000000007":       {},
		"n-0123abcd-r-0000000007":     {shared: true},
		"n-0123abcd-l5-0000000007":    {limit: 5},
		"n-0123abcd-l1-0000000007":    {unknown: true},
		"n-0123abcd-q-0000000007":     {unknown: true},
		"n-0123abcd--0000000007":      {unknown: true},
		"n-0123abcd-l1025-0000000007": {unknown: true},
	} {
		n, ok := parseNode(name)
		if !ok || n.kind != want || n.seq != 7 {
			t.Errorf("parseNode(%q) = %+v, %v; want kind %+v, seq 7", name, n, ok, want)
		}
	}
	l := &Locker{root: "/r"}
	secret := "0123456789abcdef0123456789abcdef"
	for id, want := range map[string]struct {
		node string
		slot int
		ok   bool
	}{
		secret + "-0000000007":       {"n-" + ownerTag(secret) + "-0000000007", -1, true},
		secret + "-r-0000000007":     {"n-" + ownerTag(secret) + "-r-0000000007", -1, true},
		secret + "-l3-0000000007-s2": {"n-" + ownerTag(secret) + "-l3-0000000007", 2, true},
		secret + "-l3-0000000007":    {ok: false}, // a permit's id names its slot
		secret + "-l3-0000000007-s3": {ok: false}, // outside [0, 3)
		secret + "-0000000007-s0":    {ok: false}, // a lock has no slot
		secret + "-q-0000000007":     {ok: false},
		secret + "-7":                {ok: false},
		"nothex-0000000007":          {ok: false},
	} {
		path, slot, ok := l.nodePath("x", id)
		if ok != want.ok || (ok && (path != "/r/x/"+want.node || slot != want.slot)) {
			t.Errorf("nodePath(%q) = %q, %d, %v; want %q, %d, %v", id, path, slot, ok, "/r/x/"+want.node, want.slot, want.ok)
		}
	}
}

func TestGroup_HoldingRun(t *testing.T) {
	mk := func(ks ...kind) []node {
		ns := make([]node, len(ks))
		for i, k := range ks {
			ns[i] = node{kind: k}
		}
		return ns
	}
	x, r, s2, s3 := kind{}, kind{shared: true}, kind{limit: 2}, kind{limit: 3}
	for _, tc := range []struct {
		nodes []node
		want  int
	}{
		{nil, 0},
		{mk(x, x), 1},
		{mk(x, r), 1},
		{mk(r, r, x, r), 2},
		{mk(s2, s2, s2), 2},
		{mk(s3, s2, s3), 1},
		{mk(s3, s3, r), 2},
	} {
		if got := group(tc.nodes); got != tc.want {
			t.Errorf("group(%+v) = %d; want %d", tc.nodes, got, tc.want)
		}
	}
}

// Found by the fuzz targets: data or names this package never writes are not read
// as if it had. A TTL too large for a time.Duration is no holder (it overflowed
// to a negative TTL: a holder expired at once); "l03" is not the kind "l3"; a
// slot "+1" is not slot 1; "a.b" is no lock directory's name (that is "a%2Eb").
func TestParse_RefusesWhatThePackageNeverWrites(t *testing.T) {
	for _, data := range []string{"h 9223372036854775", "H 92233720368548 1"} {
		if d := parseData([]byte(data)); d.held {
			t.Errorf("parseData(%q) = %+v; want a waiter (no TTL to judge)", data, d)
		}
	}
	if d := parseData([]byte("h 86400000")); !d.held || d.ttl != 24*time.Hour {
		t.Errorf("parseData of a 24h holder = %+v", d)
	}
	if n, ok := parseNode("n-x-l03-0000000001"); !ok || !n.kind.unknown {
		t.Errorf("parseNode with kind l03 = %+v, %v; want an unknown kind", n, ok)
	}
	l := &Locker{root: "/fence/locks"}
	secret := "0123456789abcdef0123456789abcdef"
	if _, _, ok := l.nodePath("a", secret+"-l3-0000000042-s+1"); ok {
		t.Errorf("nodePath with slot +1: ok, want refused")
	}
	if p, slot, ok := l.nodePath("a", secret+"-l3-0000000042-s1"); !ok || slot != 1 || p == "" {
		t.Errorf("nodePath with slot 1 = %q, %d, %v", p, slot, ok)
	}
	for _, s := range []string{"a.b", "%41", "a/b"} {
		if name, ok := decodeName(s); ok {
			t.Errorf("decodeName(%q) = %q, ok; want refused", s, name)
		}
	}
}
