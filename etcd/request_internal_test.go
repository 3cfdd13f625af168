package etcd

import "testing"

// Holder values written before request ids (two fields) still parse, with no
// request id; those written with one give it back.
func TestSplitHolderValue_CompatibleWithoutRequestID(t *testing.T) {
	for _, tc := range []struct{ in, lease, owner, rid string }{
		{holderValue("L.3.1", "host:1 job", ""), "L.3.1", "host:1 job", ""},
		{"L.3.1\x00", "L.3.1", "", ""},
		{holderValue("L.r.7", "", "req-1"), "L.r.7", "", "req-1"},
		{holderValue("L.r.7", "me", "req-1"), "L.r.7", "me", "req-1"},
	} {
		lease, owner, rid, ok := splitHolderValue(tc.in)
		if !ok || lease != tc.lease || owner != tc.owner || rid != tc.rid {
			t.Errorf("splitHolderValue(%q) = %q, %q, %q, %v; want %q, %q, %q, true", tc.in, lease, owner, rid, ok, tc.lease, tc.owner, tc.rid)
		}
	}
	if _, _, _, ok := splitHolderValue("no-separator"); ok {
		t.Error(`splitHolderValue("no-separator") is ok; want false: not a holder value`)
	}
}
