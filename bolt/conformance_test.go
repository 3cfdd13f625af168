package bolt

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
)

// The conformance suites run against a fresh store (its own file, default,
// durable options) per subtest.

func TestLocker_Conformance(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return openStore(t, nil) })
}

func TestGuard_Conformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return openStore(t, nil) })
}
