package fence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// The validators live in package fence alone, and backends call them: each gives
// an *InvalidError naming its field, in the wording every backend's tests pin.
func TestValidate_InvalidErrorNamesTheFieldInOneWording(t *testing.T) {
	for _, c := range []struct {
		call        string
		root        error
		field, want string
	}{
		{"ValidateName(\"\")", fence.ValidateName(""), "name",
			`fence: invalid name "": is empty`},
		{"ValidateName(256 bytes)", fence.ValidateName(strings.Repeat("n", 256)), "name",
			`fence: invalid name "` + strings.Repeat("n", 64) + `...": is 256 bytes, longer than 255`},
		{"ValidateKey(\"a\\nb\")", fence.ValidateKey("a\nb"), "key",
			`fence: invalid key "a\nb": contains control character U+000A`},
		{"ValidateTTL(0)", fence.ValidateTTL(0), "ttl",
			`fence: invalid ttl "0s": must be between 1ms and 24h0m0s`},
		{"ValidateTTL(1.5ms)", fence.ValidateTTL(1500 * time.Microsecond), "ttl",
			`fence: invalid ttl "1.5ms": must be a whole number of milliseconds`},
		{"ValidateToken(0)", fence.ValidateToken(0), "token",
			`fence: invalid token "0": must be at least 1`},
		{"ValidateLeaseID(\"a b\")", fence.ValidateLeaseID("a b"), "lease",
			`fence: invalid lease "a b": must be printable ASCII without spaces`},
		{"ValidateOwner(\"\\x00\")", fence.ValidateOwner("\x00"), "owner",
			`fence: invalid owner "\x00": contains the unprintable character U+0000`},
		{"ValidateLimit(0)", fence.ValidateLimit(0), "limit",
			`fence: invalid limit "0": must be 1 to 1024`},
	} {
		var inv *fence.InvalidError
		if !errors.As(c.root, &inv) || !errors.Is(c.root, fence.ErrInvalid) || inv.Field != c.field {
			t.Errorf("fence.%s = %v; want a *fence.InvalidError naming %q", c.call, c.root, c.field)
			continue
		}
		if c.root.Error() != c.want {
			t.Errorf("fence.%s = %q; want %q", c.call, c.root, c.want)
		}
	}
	for _, err := range []error{
		fence.ValidateName("job"), fence.ValidateKey("k"), fence.ValidateTTL(time.Second),
		fence.ValidateToken(fence.MaxToken), fence.ValidateLeaseID(driver.NewLeaseID()),
		fence.ValidateOwner(""), fence.ValidateLimit(fence.MaxLimit),
	} {
		if err != nil {
			t.Errorf("a valid argument: %v; want nil", err)
		}
	}
}
