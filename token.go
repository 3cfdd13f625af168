package fence

import (
	"fmt"
	"strconv"
)

// Token is a fencing token: for one lock name, each grant's token is greater than
// every earlier grant's. Tokens are compared, never interpreted: they may skip values,
// so never require last+1. Tokens of different lock names come from different
// counters and must not be compared (see [Fence.Name]).
type Token uint64

// MaxToken is the largest token fence hands out or accepts: 2^53-1, the largest
// integer that survives a round trip through a float64 (JSON numbers, Redis Lua).
// A backend whose counter reaches it fails closed with [ErrTokenExhausted].
const MaxToken Token = 1<<53 - 1

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// ParseToken parses a decimal token, as carried by the Fence-Token header or a CLI
// flag. It returns an error matching [ErrInvalid] for anything but a decimal integer
// in [1, MaxToken].
func ParseToken(s string) (Token, error) {
	if s == "" {
		return 0, invalidf("token", s, "is empty")
	}
	if len(s) > 20 {
		return 0, invalidf("token", s, "is not a decimal integer in [1, %d]", uint64(MaxToken))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, invalidf("token", s, "is not a decimal integer in [1, %d]", uint64(MaxToken))
	}
	t := Token(n)
	if err := ValidateToken(t); err != nil {
		return 0, err
	}
	return t, nil
}

// Fence is what a write carries to a guarded resource: the lock name the token
// belongs to (its namespace), the token, and the lease that was granted it. A guard
// accepts a fence whose token is greater than the highest it accepted for the
// resource, or equal to it under the same lease (several writes under one lease).
type Fence struct {
	// Name is the lock name whose counter issued Token. A guard stores it with the
	// resource and rejects fences of another name with [ErrNamespace].
	Name string `json:"name"`
	// Token is the fencing token of the grant.
	Token Token `json:"token"`
	// LeaseID identifies the grant, so that an equal token from another lease (a
	// regressed counter) is rejected. It may be empty only where the caller has no
	// lease id (a guard then treats equal tokens as different leases).
	LeaseID string `json:"lease,omitempty"`
}

// String formats the fence for logs, without the lease id (it is a credential).
func (f Fence) String() string { return fmt.Sprintf("%s#%d", f.Name, f.Token) }

// Validate returns an error matching [ErrInvalid] if the name, token or lease id of f
// is malformed.
func (f Fence) Validate() error {
	if err := ValidateName(f.Name); err != nil {
		return err
	}
	if err := ValidateToken(f.Token); err != nil {
		return err
	}
	if f.LeaseID != "" {
		if err := ValidateLeaseID(f.LeaseID); err != nil {
			return err
		}
	}
	return nil
}

// Admit is the fencing rule every guard applies, in one place: it returns nil if
// next may be accepted by a resource whose highest accepted fence is highest (zero
// if none), and otherwise an error: a *[NamespaceError] (matching [ErrNamespace]) if
// the lock names differ, or a *[StaleTokenError] (matching [ErrStaleToken]) if
// next's token is lower, or equal under a different or unknown lease.
//
// The resource is named only for the error message. Admit does not validate next;
// call [Fence.Validate] first.
func Admit(resource string, highest, next Fence) error {
	if highest.Token == 0 {
		return nil
	}
	if highest.Name != next.Name {
		return &NamespaceError{Resource: resource, Want: highest.Name, Got: next.Name}
	}
	switch {
	case next.Token > highest.Token:
		return nil
	case next.Token == highest.Token && next.LeaseID != "" && next.LeaseID == highest.LeaseID:
		return nil
	}
	return &StaleTokenError{Resource: resource, Token: next.Token, Highest: highest.Token, SameToken: next.Token == highest.Token}
}
