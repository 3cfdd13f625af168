package fence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fence"
)

func TestWriteAttempt_RoundTripsThroughContext(t *testing.T) {
	if got := fence.WriteAttempt(context.Background()); got != "" {
		t.Fatalf("WriteAttempt(Background) = %q; want \"\"", got)
	}
	ctx := fence.WithWriteAttempt(context.Background(), "a1")
	if got := fence.WriteAttempt(ctx); got != "a1" {
		t.Fatalf("WriteAttempt = %q; want a1", got)
	}
}

func TestValidateAttemptID(t *testing.T) {
	for _, id := range []string{"a", strings.Repeat("x", fence.MaxAttemptIDLen)} {
		if err := fence.ValidateAttemptID(id); err != nil {
			t.Errorf("ValidateAttemptID(%q) = %v; want nil", id, err)
		}
	}
	for _, id := range []string{"", "a b", strings.Repeat("x", fence.MaxAttemptIDLen+1), "é"} {
		var inv *fence.InvalidError
		if err := fence.ValidateAttemptID(id); !errors.As(err, &inv) || inv.Field != "attempt" {
			t.Errorf("ValidateAttemptID(%q) = %v; want an *InvalidError naming attempt", id, err)
		}
	}
}

func TestReplayed_OnlyUnderTheSameFence(t *testing.T) {
	f := fence.Fence{Name: "n", Token: 5, LeaseID: "L"}
	ids := []string{"a", "b"}
	for _, tc := range []struct {
		cur  fence.Fence
		id   string
		want bool
	}{
		{f, "a", true},
		{f, "c", false},
		{f, "", false},
		{fence.Fence{Name: "n", Token: 6, LeaseID: "L"}, "a", false},
		{fence.Fence{Name: "n", Token: 5, LeaseID: "M"}, "a", false},
		{fence.Fence{Name: "m", Token: 5, LeaseID: "L"}, "a", false},
	} {
		if got := fence.Replayed(tc.cur, ids, f, tc.id); got != tc.want {
			t.Errorf("Replayed(cur %+v, %q, f %+v, %q) = %v; want %v", tc.cur, ids, f, tc.id, got, tc.want)
		}
	}
}

func TestRememberAttempt_ClearedWhenFenceMoves_BoundedNewestKept(t *testing.T) {
	f := fence.Fence{Name: "n", Token: 5, LeaseID: "L"}
	g := fence.Fence{Name: "n", Token: 6, LeaseID: "M"}
	got := fence.RememberAttempt(f, []string{"a"}, f, "b")
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("same fence: %q; want [a b]", got)
	}
	if got := fence.RememberAttempt(f, []string{"a"}, g, "b"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("fence moved: %q; want [b]", got)
	}
	if got := fence.RememberAttempt(f, []string{"a"}, g, ""); len(got) != 0 {
		t.Fatalf("fence moved, no id: %q; want none", got)
	}
	var ids []string
	for i := range fence.MaxWriteAttempts + 3 {
		before := slices.Clone(ids)
		next := fence.RememberAttempt(f, ids, f, fmt.Sprint(i))
		if !slices.Equal(before, ids) {
			t.Fatalf("RememberAttempt changed the ids it was given: %q, was %q", ids, before)
		}
		ids = next
	}
	if len(ids) != fence.MaxWriteAttempts || ids[0] != "3" || ids[len(ids)-1] != fmt.Sprint(fence.MaxWriteAttempts+2) {
		t.Fatalf("after %d ids: %d kept, %q..%q; want the newest %d", fence.MaxWriteAttempts+3, len(ids), ids[0], ids[len(ids)-1], fence.MaxWriteAttempts)
	}
}

func TestAttemptKey_TheIDAndTheContent(t *testing.T) {
	ctx := fence.WithWriteAttempt(context.Background(), strings.Repeat("a", fence.MaxAttemptIDLen))
	k1, err := fence.AttemptKey(ctx, "put", []byte("v1"))
	if err != nil {
		t.Fatalf("AttemptKey = %v", err)
	}
	again, _ := fence.AttemptKey(ctx, "put", []byte("v1"))
	other, _ := fence.AttemptKey(ctx, "put", []byte("v2"))
	del, _ := fence.AttemptKey(ctx, "delete", nil)
	empty, _ := fence.AttemptKey(ctx, "put", nil)
	emptyToo, _ := fence.AttemptKey(ctx, "put", []byte{})
	if k1 != again || k1 == other || k1 == del || empty != emptyToo || empty == del {
		t.Fatalf("keys: put v1 %q, again %q, put v2 %q, delete %q, put nil %q, put empty %q; want one key per id and content", k1, again, other, del, empty, emptyToo)
	}
	if len(k1) > fence.MaxAttemptIDLen+17 || !strings.HasPrefix(k1, strings.Repeat("a", fence.MaxAttemptIDLen)+"#") {
		t.Fatalf("key %q: want the id, '#' and 16 hex digits", k1)
	}
	if k, err := fence.AttemptKey(context.Background(), "put", []byte("v1")); k != "" || err != nil {
		t.Fatalf("AttemptKey without an id = %q, %v; want \"\", nil", k, err)
	}
	if _, err := fence.AttemptKey(fence.WithWriteAttempt(context.Background(), "a b"), "put", nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("AttemptKey of a malformed id = %v; want ErrInvalid", err)
	}
}
