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

// keysFor makes the documented keys, escaped, in one allocation.
func TestKeysFor_LayoutAndOneAllocation(t *testing.T) {
	l := &Locker{prefix: "fence:"}
	got := l.keysFor("a{b}%")
	want := keys{
		lock: "fence:{a%7Bb%7D%25}:lock", token: "fence:{a%7Bb%7D%25}:token", wake: "fence:{a%7Bb%7D%25}:wake",
		holders: "fence:{a%7Bb%7D%25}:holders", expiry: "fence:{a%7Bb%7D%25}:expiry", slots: "fence:{a%7Bb%7D%25}:slots",
	}
	if got != want {
		t.Fatalf("keysFor = %+v; want %+v", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = l.keysFor("orders") }); n != 1 {
		t.Errorf("keysFor of a plain name: %v allocations; want 1", n)
	}
}
