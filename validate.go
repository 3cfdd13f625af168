package fence

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on names, TTLs and lease ids. They are part of the contract: every backend
// and the HTTP API enforce them with an error matching ErrInvalid.
const (
	// MaxNameLen is the longest lock name or resource key, in bytes.
	MaxNameLen = 255
	// MinTTL is the shortest lease.
	MinTTL = time.Millisecond
	// MaxTTL is the longest lease. Longer jobs renew (see WithAutoRenew). It bounds how
	// long a restarted store must honour leases granted before a crash.
	MaxTTL = 24 * time.Hour
	// MaxLeaseIDLen is the longest lease id accepted, in bytes.
	MaxLeaseIDLen = 128
	// MaxRequestIDLen is the longest request id (WithRequestID) accepted, in bytes.
	MaxRequestIDLen = 128
	// MaxOwnerLen is the longest owner (WithOwner) accepted, in bytes.
	MaxOwnerLen = 256
	// MaxLimit is the most permits a semaphore may have (WithLimit), and the most
	// shared holders (WithShared) a lock has at once: a shared acquire while
	// MaxLimit shared leases are live finds the lock held.
	MaxLimit = 1024
)

// ValidateName returns nil if name is usable as a lock name: 1 to MaxNameLen bytes
// of valid UTF-8 without control characters. Otherwise it returns an *InvalidError
// (matching ErrInvalid) naming "name".
func ValidateName(name string) error { return validateName("name", name) }

// ValidateKey is ValidateName for the keys of a fenced store: the same rules, an
// *InvalidError naming "key".
func ValidateKey(key string) error { return validateName("key", key) }

// validateName is ValidateName with the field its error names.
func validateName(field, name string) error {
	switch {
	case name == "":
		return invalidf(field, name, "is empty")
	case len(name) > MaxNameLen:
		return invalidf(field, name, "is %d bytes, longer than %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return invalidf(field, name, "is not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return invalidf(field, name, "contains control character %U", r)
		}
	}
	return nil
}

// ValidateTTL returns nil if ttl is a whole number of milliseconds within [MinTTL,
// MaxTTL], and an *InvalidError (matching ErrInvalid) naming "ttl" otherwise.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return invalidf("ttl", ttl.String(), "must be between %v and %v", MinTTL, MaxTTL)
	}
	if ttl%time.Millisecond != 0 {
		return invalidf("ttl", ttl.String(), "must be a whole number of milliseconds")
	}
	return nil
}

// ValidateToken returns nil if t is in [1, MaxToken], and an *InvalidError
// (matching ErrInvalid) naming "token" otherwise. Zero is never a token: it means
// "none".
func ValidateToken(t Token) error {
	if t == 0 {
		return invalidf("token", t.String(), "must be at least 1")
	}
	if t > MaxToken {
		return invalidf("token", t.String(), "is above the maximum %d", uint64(MaxToken))
	}
	return nil
}

// ValidateLeaseID returns nil if id is 1 to MaxLeaseIDLen bytes of printable ASCII
// without spaces, and an *InvalidError (matching ErrInvalid) naming "lease"
// otherwise.
func ValidateLeaseID(id string) error { return validateID("lease", id, MaxLeaseIDLen) }

// ValidateRequestID returns nil if id is 1 to MaxRequestIDLen bytes of printable
// ASCII without spaces (WithRequestID), and an *InvalidError (matching ErrInvalid)
// naming "request_id" otherwise.
func ValidateRequestID(id string) error { return validateID("request_id", id, MaxRequestIDLen) }

// validateID returns nil if id is 1 to max bytes of printable ASCII without
// spaces, and an *InvalidError naming field otherwise.
func validateID(field, id string, max int) error {
	if id == "" {
		return invalidf(field, id, "is empty")
	}
	if len(id) > max {
		return invalidf(field, id, "is %d bytes, longer than %d", len(id), max)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return invalidf(field, id, "must be printable ASCII without spaces")
		}
	}
	return nil
}

// ValidateLimit returns nil if n is a usable semaphore limit (WithLimit): 1 to
// MaxLimit. Otherwise it returns an *InvalidError (matching ErrInvalid) naming
// "limit".
func ValidateLimit(n int) error {
	if n < 1 || n > MaxLimit {
		return invalidf("limit", fmt.Sprint(n), "must be 1 to %d", MaxLimit)
	}
	return nil
}

// ValidateOwner returns nil if owner is empty (no owner) or at most MaxOwnerLen
// bytes of printable UTF-8 (WithOwner), and an *InvalidError (matching ErrInvalid)
// naming "owner" otherwise.
func ValidateOwner(owner string) error {
	switch {
	case owner == "":
		return nil
	case len(owner) > MaxOwnerLen:
		return invalidf("owner", owner, "is %d bytes, longer than %d", len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return invalidf("owner", owner, "is not valid UTF-8")
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) {
			return invalidf("owner", owner, "contains the unprintable character %U", r)
		}
	}
	return nil
}
