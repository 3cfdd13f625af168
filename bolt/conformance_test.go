package bolt

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
)

// The conformance suites run against a fresh store (its own file, default,
// durable options) per subtest. The store refuses fences it never issued (P9), so
// the guard suite draws its fences from the store's own grants.

func TestLocker_Conformance(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return openStore(t, nil) })
}

func TestGuard_Conformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return openStore(t, nil) }, fencetest.WithGuardAsIssuer())
}

func TestIssuedKV_Conformance(t *testing.T) {
	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return openStore(t, nil) })
}

// A late attempt of a write never replaces a later write of the same holder (P3):
// a client that retries after its attempt timeout, on this server or another
// server on the same file, sends the write's attempt id again.
func TestWriteAttempts_Conformance(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return openStore(t, nil) }, fencetest.WithGuardAsIssuer())
}
