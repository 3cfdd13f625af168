package driver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

func TestValidateFence_KeyThenFence(t *testing.T) {
	good := fence.Fence{Name: "lock", Token: 1, LeaseID: driver.NewLeaseID()}
	if err := driver.ValidateFence("k", good); err != nil {
		t.Fatalf("ValidateFence(good) = %v; want nil", err)
	}
	for _, c := range []struct {
		key       string
		f         fence.Fence
		field     string // the InvalidError's Field
		keyInText bool   // the key is quoted before the fence's error
	}{
		{"", good, "key", false},
		{"", fence.Fence{}, "key", false}, // the key is checked first
		{"k", fence.Fence{Name: "lock"}, "token", true},
		{"k", fence.Fence{Token: 1}, "name", true},
		{"k", fence.Fence{Name: "lock", Token: 1, LeaseID: "has space"}, "lease", true},
	} {
		err := driver.ValidateFence(c.key, c.f)
		var inv *fence.InvalidError
		if !errors.As(err, &inv) || !errors.Is(err, fence.ErrInvalid) || inv.Field != c.field {
			t.Errorf("ValidateFence(%q, %+v) = %v; want a *fence.InvalidError naming %q", c.key, c.f, err, c.field)
			continue
		}
		if got := strings.HasPrefix(err.Error(), `"k": `); got != c.keyInText {
			t.Errorf("ValidateFence(%q, %+v) = %q; key before the fence's error: %v, want %v", c.key, c.f, err, got, c.keyInText)
		}
	}
}
