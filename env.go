package fence

import (
	"os"
	"strings"
)

// Environment variables that `fence lock` and `fence elect` set for the command they
// run: the fence of the lease the command holds.
const (
	EnvLock  = "FENCE_LOCK"  // the lock name, as given (not escaped)
	EnvToken = "FENCE_TOKEN" // the fencing token, in decimal
	EnvLease = "FENCE_LEASE" // the lease id
)

// FenceFromEnv returns the fence that `fence lock NAME -- CMD` passes to CMD: the
// lock name from FENCE_LOCK, the token from FENCE_TOKEN and the lease id from
// FENCE_LEASE (optional: without it, a guard refuses a second write under the same
// token). getenv reads a variable; nil means os.Getenv.
//
// It returns an *InvalidError matching ErrInvalid, whose Field is the variable's
// name, if FENCE_LOCK or FENCE_TOKEN is unset or empty, or a variable holds a
// malformed name, token or lease id.
func FenceFromEnv(getenv func(string) string) (Fence, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var f Fence
	name, tok := getenv(EnvLock), strings.TrimSpace(getenv(EnvToken))
	switch {
	case name == "":
		return f, &InvalidError{Field: EnvLock, Reason: "is not set (run the command under `fence lock NAME -- CMD`)"}
	case tok == "":
		return f, &InvalidError{Field: EnvToken, Reason: "is not set (run the command under `fence lock NAME -- CMD`)"}
	}
	if err := ValidateName(name); err != nil {
		return f, renameField(EnvLock, err)
	}
	t, err := ParseToken(tok)
	if err != nil {
		return f, renameField(EnvToken, err)
	}
	f.Name, f.Token = name, t
	if id := strings.TrimSpace(getenv(EnvLease)); id != "" {
		if err := ValidateLeaseID(id); err != nil {
			e := &InvalidError{Field: EnvLease, Reason: "is malformed"}
			if inv, ok := err.(*InvalidError); ok {
				e.Reason = inv.Reason // and no Value: a lease id is a credential, never echoed
			}
			return Fence{}, e
		}
		f.LeaseID = id
	}
	return f, nil
}

// renameField returns err, an *InvalidError, naming field instead.
func renameField(field string, err error) error {
	inv, ok := err.(*InvalidError)
	if !ok {
		return err
	}
	return &InvalidError{Field: field, Value: inv.Value, Reason: inv.Reason}
}
