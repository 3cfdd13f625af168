package zookeeper

import (
	"strings"
	"testing"
)

func TestEncodeName_RoundTripsAndIsZnodeSafe(t *testing.T) {
	for _, name := range []string{"a", ".", "..", "a/b", "x%41", "ünï 锁", "zookeeper", strings.Repeat("z", 255), "-_AZaz09"} {
		enc := encodeName(name)
		if strings.ContainsAny(enc, "/.") || enc == "" {
			t.Errorf("encodeName(%q) = %q; want no '/' or '.', not empty", name, enc)
		}
		dec, ok := decodeName(enc)
		if !ok || dec != name {
			t.Errorf("decodeName(encodeName(%q)) = %q, %v; want %q, true", name, dec, ok, name)
		}
	}
	for _, bad := range []string{"%", "%4", "%zz"} {
		if _, ok := decodeName(bad); ok {
			t.Errorf("decodeName(%q) ok; want false", bad)
		}
	}
}
