package redis

import "testing"

// A key tag with a raw brace is not one escapeName makes (found by
// FuzzUnescapeName): List must not report it as a lock name.
func TestUnescapeName_RefusesRawBraces(t *testing.T) {
	for _, s := range []string{"{x}", "a}", "{", "%7B{"} {
		if name, err := unescapeName(s); err == nil {
			t.Errorf("unescapeName(%q) = %q; want an error", s, name)
		}
	}
	if name, err := unescapeName("%7Bx%7D%25"); err != nil || name != "{x}%" {
		t.Errorf("unescapeName of an escaped name = %q, %v", name, err)
	}
}
