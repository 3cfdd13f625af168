package zookeeper

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Fuzz targets of what the package reads back from ZooKeeper: lock node data,
// lock node names and lease ids, the names of lock directories and KV records.
// They need no server, so they run under -short; a longer run of one:
//
//	go test -short ./zookeeper -run '^$' -fuzz '^FuzzParseData$' -fuzztime 5m

// FuzzParseData: node data decodes as a holder with a positive TTL (and a permit
// with a slot in range) or as a waiter, and the data the package writes for what
// it decoded decodes to the same.
func FuzzParseData(f *testing.F) {
	for _, owner := range []string{"", "w", "h 5", "worker-7 ünï"} {
		f.Add(holdData(1500*time.Millisecond, owner))
		f.Add(permitData(fence.MaxTTL, fence.MaxLimit-1, owner))
		f.Add(waitData(owner))
	}
	f.Add([]byte("h 0"))
	f.Add([]byte("H 1 -1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := parseData(data)
		again := parseData(waitData(d.owner))
		if d.held {
			if d.ttl <= 0 || d.ttl%time.Millisecond != 0 {
				t.Fatalf("parseData(%q) = %+v: a holder's TTL must be a positive number of ms", data, d)
			}
			if d.permit && (d.slot < 0 || d.slot >= fence.MaxLimit) || !d.permit && d.slot != 0 {
				t.Fatalf("parseData(%q) = %+v: slot out of range", data, d)
			}
			again = parseData(d.withTTL(d.ttl))
		} else if d.permit || d.ttl != 0 || d.slot != 0 {
			t.Fatalf("parseData(%q) = %+v: a waiter with a TTL or slot", data, d)
		}
		if again != d {
			t.Fatalf("parseData(%q) = %+v, but its data re-encoded decodes as %+v", data, d, again)
		}
	})
}

// FuzzParseNode: a node name parses to the name itself, its sequence and its kind;
// a kind this version knows is exactly the infix it writes.
func FuzzParseNode(f *testing.F) {
	tag := ownerTag(strings.Repeat("a", 32))
	for _, k := range []kind{{}, {shared: true}, {limit: 2}, {limit: fence.MaxLimit}} {
		f.Add("n-" + tag + "-" + k.infix() + "0000000042")
	}
	f.Add("n--1")
	f.Fuzz(func(t *testing.T, name string) {
		n, ok := parseNode(name)
		if !ok {
			return
		}
		if n.name != name || !strings.HasSuffix(name, "-"+n.seqText) || !strings.HasSuffix(name, n.rest) {
			t.Fatalf("parseNode(%q) = %+v: not the parts of the name", name, n)
		}
		if k := n.kind; !k.unknown && !strings.HasSuffix(name, "-"+k.infix()+n.seqText) {
			t.Fatalf("parseNode(%q) = %+v: kind %+v is written %q", name, n, k, k.infix())
		}
	})
}

// FuzzNodePath: a lease id maps to a node only if it is of the package's form, and
// then the node's name and the slot give back the lease id.
func FuzzNodePath(f *testing.F) {
	secret := strings.Repeat("0123456789abcdef", 2)
	for _, rest := range []string{"0000000042", "r-0000000042", "l3-0000000042-s2", "l1024-0000000001-s1023", "l3-0000000042-s3", "0000000042-s0"} {
		f.Add(secret + "-" + rest)
	}
	l := &Locker{root: "/fence/locks"}
	f.Fuzz(func(t *testing.T, leaseID string) {
		path, slot, ok := l.nodePath("jobs/a", leaseID)
		if !ok {
			return
		}
		dir, nodeName, _ := strings.Cut(path, l.dir("jobs/a")+"/")
		n, nok := parseNode(nodeName)
		if dir != "" || !nok || n.kind.unknown || (slot >= 0) != (n.kind.limit > 0) || slot >= max(n.kind.limit, 1) {
			t.Fatalf("nodePath(%q) = %q, %d: not a node of a known kind and its slot", leaseID, path, slot)
		}
		want := leaseID[:32] + "-" + n.rest
		if slot >= 0 {
			want += "-s" + strconv.Itoa(slot)
		}
		if want != leaseID || nodeName != "n-"+ownerTag(leaseID[:32])+"-"+n.rest {
			t.Fatalf("nodePath(%q) = %q, %d, whose lease id is %q", leaseID, path, slot, want)
		}
	})
}

// FuzzDecodeName: a directory name decodes only if encodeName makes it from what
// it decodes to (as decodeName's doc says), and every valid lock name round-trips.
func FuzzDecodeName(f *testing.F) {
	for _, s := range []string{"a", "jobs/x", "100%", "ünï", ".", "..", "a b", "A-z_0"} {
		f.Add(encodeName(s))
	}
	f.Add("%2f")
	f.Add("%")
	f.Fuzz(func(t *testing.T, s string) {
		if fence.ValidateName(s) == nil {
			if got, ok := decodeName(encodeName(s)); !ok || got != s {
				t.Fatalf("decodeName(encodeName(%q)) = %q, %v", s, got, ok)
			}
		}
		name, ok := decodeName(s)
		if ok && encodeName(name) != s {
			t.Fatalf("decodeName(%q) = %q, whose directory is %q", s, name, encodeName(name))
		}
	})
}

// FuzzDecodeRecord: a KV record decodes to valid fences, and its JSON encoding (as
// Put writes it) decodes to the same; anything else is refused with ErrInvalid.
func FuzzDecodeRecord(f *testing.F) {
	w := fence.Fence{Name: "jobs/a", Token: 3, LeaseID: driver.NewLeaseID()}
	for _, r := range []record{
		{Fence: w, Writer: &w, Value: []byte("v\x00")},
		{Fence: fence.Fence{Name: "ü", Token: fence.MaxToken}},
		{Fence: w, Writer: &fence.Fence{Name: "jobs/a", Token: 2}, Value: []byte{}},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"fence":{"name":"a","token":1},"value":"AA=="}`))
	f.Add([]byte(`{"fence":{"name":"a","token":0}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("decodeRecord(%q): %v, want ErrInvalid", data, err)
			}
			return
		}
		if r.Fence.Validate() != nil || r.Writer != nil && (r.Writer.Validate() != nil || r.Value == nil) {
			t.Fatalf("decodeRecord(%q) = %+v: invalid fences or a writer without a value", data, r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeRecord(b)
		if err != nil || again.Fence != r.Fence || (again.Writer == nil) != (r.Writer == nil) ||
			r.Writer != nil && *again.Writer != *r.Writer || !bytes.Equal(again.Value, r.Value) {
			t.Fatalf("decodeRecord(%q) = %+v; its encoding %s decodes as %+v, %v", data, r, b, again, err)
		}
	})
}
