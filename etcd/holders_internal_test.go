package etcd

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A holder key's kind and slot are four digits exactly as holder writes them: a
// key this package did not write ("+001", "-000", found by FuzzParseHolder) is
// ErrCorrupt, not a holder of slot 1 or 0.
func TestParseHolder_OnlyKeysHolderWrites(t *testing.T) {
	k := keys{"fence/"}
	for _, key := range []string{
		k.base("a") + "h0002\x00+001", k.base("a") + "hsh\x00-000", k.base("a") + "h+002\x000001",
		k.base("a") + "h0002\x00 001", k.base("a") + "h0002\x0000001",
	} {
		if h, err := k.parseHolder("a", &mvccpb.KeyValue{Key: []byte(key)}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("parseHolder(%q) = %+v, %v; want ErrCorrupt", key, h, err)
		}
	}
	for _, c := range []struct {
		kind        string
		limit, slot int
	}{{"0002", 2, 1}, {sharedKind, 0, 0}, {"1024", 1024, 1023}} {
		key := k.holder("a", c.kind, c.slot)
		if h, err := k.parseHolder("a", &mvccpb.KeyValue{Key: []byte(key)}); err != nil || h.limit != c.limit || h.slot != c.slot || h.shared != (c.kind == sharedKind) {
			t.Errorf("parseHolder(%q) = %+v, %v", key, h, err)
		}
	}
}
