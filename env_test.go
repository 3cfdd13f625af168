package fence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fence"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFenceFromEnv(t *testing.T) {
	got, err := fence.FenceFromEnv(envOf(map[string]string{
		"FENCE_LOCK": "jobs/nightly", "FENCE_TOKEN": " 42 ", "FENCE_LEASE": "abc123",
	}))
	if err != nil {
		t.Fatalf("FenceFromEnv: %v", err)
	}
	want := fence.Fence{Name: "jobs/nightly", Token: 42, LeaseID: "abc123"}
	if got != want {
		t.Fatalf("FenceFromEnv = %+v, want %+v", got, want)
	}
	got, err = fence.FenceFromEnv(envOf(map[string]string{"FENCE_LOCK": "a", "FENCE_TOKEN": "1"}))
	if err != nil || got != (fence.Fence{Name: "a", Token: 1}) {
		t.Fatalf("FenceFromEnv without FENCE_LEASE = %+v, %v; want {a 1 \"\"}, nil", got, err)
	}
}

func TestFenceFromEnv_Invalid(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		field string
	}{
		{map[string]string{"FENCE_TOKEN": "1"}, "FENCE_LOCK"},
		{map[string]string{"FENCE_LOCK": "a"}, "FENCE_TOKEN"},
		{map[string]string{"FENCE_LOCK": "a", "FENCE_TOKEN": "0"}, "FENCE_TOKEN"},
		{map[string]string{"FENCE_LOCK": "a", "FENCE_TOKEN": "x1"}, "FENCE_TOKEN"},
		{map[string]string{"FENCE_LOCK": "a\x01", "FENCE_TOKEN": "1"}, "FENCE_LOCK"},
		{map[string]string{"FENCE_LOCK": "a", "FENCE_TOKEN": "1", "FENCE_LEASE": "se cret"}, "FENCE_LEASE"},
	} {
		f, err := fence.FenceFromEnv(envOf(tc.env))
		var inv *fence.InvalidError
		if !errors.As(err, &inv) || !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("FenceFromEnv(%v) = %+v, %v; want an *InvalidError", tc.env, f, err)
			continue
		}
		if inv.Field != tc.field {
			t.Errorf("FenceFromEnv(%v): field %q, want %q (error %v)", tc.env, inv.Field, tc.field, err)
		}
		if f != (fence.Fence{}) {
			t.Errorf("FenceFromEnv(%v) returned %+v with its error, want the zero Fence", tc.env, f)
		}
		if strings.Contains(err.Error(), "cret") {
			t.Errorf("FenceFromEnv error %q echoes the lease id", err)
		}
	}
}

func TestFenceFromEnv_OSEnviron(t *testing.T) {
	t.Setenv("FENCE_LOCK", "envlock")
	t.Setenv("FENCE_TOKEN", "7")
	t.Setenv("FENCE_LEASE", "L7")
	f, err := fence.FenceFromEnv(nil)
	if err != nil || f != (fence.Fence{Name: "envlock", Token: 7, LeaseID: "L7"}) {
		t.Fatalf("FenceFromEnv(nil) = %+v, %v; want {envlock 7 L7}, nil", f, err)
	}
}
