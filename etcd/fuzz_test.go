package etcd

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Fuzz targets of what the package reads back from etcd: KV records, holder keys
// and the lease ids that name them. Each runs its seeds as a test; a longer run:
//
//	go test ./etcd -run '^$' -fuzz '^FuzzDecodeRecord$' -fuzztime 5m

// FuzzDecodeRecord: a KV record either decodes to a valid fence, which encodes to a
// record that decodes to the same, or is refused with ErrCorrupt.
func FuzzDecodeRecord(f *testing.F) {
	id := driver.NewLeaseID()
	for _, r := range []record{
		{fence: fence.Fence{Name: "jobs/a", Token: 1, LeaseID: id}, hasValue: true, value: []byte("v")},
		{fence: fence.Fence{Name: "ünï", Token: fence.MaxToken}, hasValue: true, value: []byte{}},
		{fence: fence.Fence{Name: "x", Token: 42, LeaseID: id}},
		{fence: fence.Fence{Name: "a", Token: 3, LeaseID: id}, hasValue: true, value: []byte("v"), attempts: []string{"a1", id}},
		{fence: fence.Fence{Name: strings.Repeat("n", 200), Token: 7, LeaseID: strings.Repeat("l", 128)}, hasValue: true, value: bytes.Repeat([]byte{0}, 300)},
	} {
		f.Add(r.encode())
	}
	f.Add([]byte{recMagic, recVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeRecord(%q): %v, want ErrCorrupt", b, err)
			}
			return
		}
		if err := r.fence.Validate(); err != nil {
			t.Fatalf("decodeRecord(%q): invalid fence %+v: %v", b, r.fence, err)
		}
		if r.hasValue != (r.value != nil) {
			t.Fatalf("decodeRecord(%q): hasValue %v with value %q", b, r.hasValue, r.value)
		}
		again, err := decodeRecord(r.encode())
		if err != nil || again.fence != r.fence || again.hasValue != r.hasValue || !bytes.Equal(again.value, r.value) || !slices.Equal(again.attempts, r.attempts) {
			t.Fatalf("decodeRecord(%q) = %+v; its encoding decodes as %+v, %v", b, r, again, err)
		}
	})
}

// FuzzParseHolder: a key under a name's holder range is accepted only if it is the
// key holder writes for what it parsed to (exactly those bytes), else refused with
// ErrCorrupt.
func FuzzParseHolder(f *testing.F) {
	k := keys{"fence/"}
	for _, s := range []struct {
		name, kind string
		slot       int
	}{{"a", "0002", 1}, {"jobs/x", "1024", 1023}, {"r", sharedKind, 0}, {"r", sharedKind, 1023}, {"ü", "0003", 0}} {
		f.Add(s.name, k.holder(s.name, s.kind, s.slot))
	}
	f.Fuzz(func(t *testing.T, name, key string) {
		h, err := k.parseHolder(name, &mvccpb.KeyValue{Key: []byte(key)})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("parseHolder(%q, %q): %v, want ErrCorrupt", name, key, err)
			}
			return
		}
		kind := sharedKind
		switch {
		case h.shared && h.limit == 0 && h.slot >= 0 && h.slot < fence.MaxLimit:
		case !h.shared && h.limit >= 2 && h.limit <= fence.MaxLimit && h.slot >= 0 && h.slot < h.limit:
			kind = fmt.Sprintf("%04d", h.limit)
		default:
			t.Fatalf("parseHolder(%q, %q) = %+v: out of range", name, key, h)
		}
		if want := k.holder(name, kind, h.slot); want != key {
			t.Fatalf("parseHolder(%q, %q) = %+v, which is the key %q", name, key, h, want)
		}
	})
}

// FuzzLeaseKey: leaseKey maps an id holderID made to its holder key, and any other
// id to the lock key; a holder key it returns is one parseHolder accepts, for the
// kind and slot that the id's suffix names.
func FuzzLeaseKey(f *testing.F) {
	k := keys{"fence/"}
	id := driver.NewLeaseID()
	for _, s := range []string{holderID(id, "0002", 1), holderID(id, sharedKind, 5), holderID(id, "1024", 1023), id, "a.b.c", ".2.1", "x.02.1", "x.2.01", "x.r.-0", "x.r.1024", "x.3.+1"} {
		f.Add("jobs/a", s)
	}
	f.Fuzz(func(t *testing.T, name, leaseID string) {
		key, holder := k.leaseKey(name, leaseID)
		if !holder {
			if key != k.lock(name) {
				t.Fatalf("leaseKey(%q, %q) = %q, not a holder key and not the lock key", name, leaseID, key)
			}
			return
		}
		h, err := k.parseHolder(name, &mvccpb.KeyValue{Key: []byte(key)})
		if err != nil {
			t.Fatalf("leaseKey(%q, %q) = %q, which parseHolder refuses: %v", name, leaseID, key, err)
		}
		kind := sharedKind
		if !h.shared {
			kind = fmt.Sprintf("%04d", h.limit)
		}
		prefix := leaseID[:strings.LastIndexByte(leaseID[:strings.LastIndexByte(leaseID, '.')], '.')]
		if again := holderID(prefix, kind, h.slot); again != leaseID {
			t.Fatalf("leaseKey(%q, %q) = %q (%+v), whose lease id is %q", name, leaseID, key, h, again)
		}
	})
}
