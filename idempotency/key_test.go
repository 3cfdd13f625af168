package idempotency_test

import (
	"regexp"
	"testing"

	"github.com/fencelock/fence/idempotency"
)

func TestKey_SameWorkItemSameKey_DifferentItemsDiffer(t *testing.T) {
	a := idempotency.Key("batch-2026-11-29", "17")
	if b := idempotency.Key("batch-2026-11-29", "17"); a != b {
		t.Fatalf("want the same key for the same work item, got %q and %q", a, b)
	}
	if !regexp.MustCompile(`^ik_[0-9a-f]{32}$`).MatchString(a) {
		t.Fatalf("want ik_ and 32 hex digits, got %q", a)
	}
	if _, err := idempotency.ParseKey(a); err != nil {
		t.Fatalf("a derived key must be a valid header value: %v", err)
	}
	others := []string{
		idempotency.Key("batch-2026-11-29", "18"),
		idempotency.Key("batch-2026-11-29", "1", "7"),
		idempotency.Key("batch-2026-11-2", "917"),
		idempotency.Key("batch-2026-11-29"),
		idempotency.Key(),
	}
	seen := map[string]bool{a: true}
	for _, k := range others {
		if seen[k] {
			t.Fatalf("two different work items share key %q", k)
		}
		seen[k] = true
	}
}

func TestScopedKey_IdentitySeparates(t *testing.T) {
	if idempotency.ScopedKey("alice", "k") == idempotency.ScopedKey("bob", "k") {
		t.Fatal("want different store keys for different identities")
	}
	if idempotency.ScopedKey("", "k") == idempotency.ScopedKey("alice", "k") {
		t.Fatal("want an unscoped key to differ from a scoped one")
	}
}
